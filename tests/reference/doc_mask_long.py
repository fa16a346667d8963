#!/usr/bin/python3
"""Document masks at a long sequence: one 32K-token sequence of packed documents, judged
document by document.

    doc_mask_long.py WEIPIPE SOURCE_ROOT

`weipipe check --doc-mask --seq-length 32768 --recompute` (a small model, fp32, about one token
in 8 a document boundary) dumps its loss and gradients. With the mask, every document is an
independent sequence: RoPE scores depend only on the distance between query and key, so a
document at position 20000 scores exactly as at 0. The reference therefore runs each document
alone from position 0 (scripts/torch_ref.py's float64 model, documents of one length batched)
and sums their token losses: a 32K x 32K attention, which no reference could hold, becomes
thousands of short ones. Loss and every gradient within 1e-4 relative. Attending across
documents, a lost boundary or a position off by one document would all fail it. Exit 0 pass,
1 fail, 77 without torch.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import torch_ref  # noqa: E402  (exits 77 itself without torch)
from torch_ref import torch  # noqa: E402

TOL = 1e-4
SEQ = 32768


def main():
    weipipe, root = os.path.abspath(sys.argv[1]), sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        dump_dir = os.path.join(tmp, "dump")
        cmd = [weipipe, "check", "--config", "configs/tiny.ini", "--precision", "fp32", "--quiet", "--out", dump_dir,
               "--doc-mask", "--seq-length", str(SEQ), "--micro-batch-size", "1", "--recompute", "--num-layers", "2",
               "--hidden-size", "32", "--num-attention-heads", "2", "--num-query-groups", "1", "--ffn-hidden-size", "64",
               "--init-std", "0.1", "--seed", "9", "--num-chunks", "2"]
        print("+", " ".join(cmd[1:]), flush=True)
        if subprocess.run(cmd, cwd=root).returncode != 0:
            print("FAIL: weipipe check failed")
            return 1
        dump = torch_ref.read_dump(dump_dir)
    cfg = dict(dump["cfg"], doc_mask=False)  # each document alone is a plain causal sequence
    inputs = torch.from_numpy(dump["inputs"].astype("int64"))[0]
    targets = torch.from_numpy(dump["targets"].astype("int64"))[0]
    starts = [0] + [i for i in range(1, SEQ) if inputs[i].item() == dump["cfg"]["doc_boundary"]]
    bounds = list(zip(starts, starts[1:] + [SEQ]))
    by_len = {}
    for a, b in bounds:
        by_len.setdefault(b - a, []).append(a)
    params = {name: torch.tensor(arr, dtype=torch.float64, requires_grad=True) for name, arr in dump["params"].items()}
    total = 0
    for n, firsts in sorted(by_len.items()):
        idx = torch.tensor(firsts).view(-1, 1) + torch.arange(n).view(1, -1)
        total = total + torch_ref.llama_loss(params, cfg, inputs[idx], targets[idx]) * idx.numel()
    loss = total / SEQ
    loss.backward()
    rows = [("loss", abs(dump["loss"] - loss.item()) / abs(loss.item()))]
    rows += [(name, torch_ref.rel_err(dump["grads"][name], p.grad.numpy())) for name, p in params.items()]
    worst_name, worst = max(rows, key=lambda r: r[1])
    ok = len(bounds) > 1000 and all(err <= TOL for _, err in rows)
    print(f"s = {SEQ}, {len(bounds)} documents (longest {max(by_len)} tokens): loss dump {dump['loss']:.9g} vs"
          f" per-document reference {loss.item():.9g}; max rel err {worst:.3e} ({worst_name}), tolerance {TOL:g}:"
          f" {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
