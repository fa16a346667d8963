#!/usr/bin/python3
"""`weipipe sample` end to end, on a random model trained one step and exported.

    sample_check.py cli WEIPIPE DATA   sampling flags and bad input (python3 only)
    sample_check.py ref WEIPIPE DATA   greedy ids against references (needs torch)
    sample_check.py train WEIPIPE DATA train --sample-every against weipipe sample (python3 only)

cli: with a seed, sampling repeats itself and another seed changes it; --top-k 1 and a tiny
--top-p give the greedy ids; the checkpoint and its Hugging Face export give the same ids; bad
input exits 2 with one line naming the culprit, and nothing on stdout. Where Debian's
sentencepiece tools are installed, a BPE trained by spm_train: --prompt TEXT equals BOS plus
spm_encode's ids, --format text equals spm_decode of the generated ids, generation ends at EOS,
and the tokenizer is found in the checkpoint directory without --tokenizer.

ref: for random prompts, the greedy ids of `weipipe sample --temperature 0` (fp32, KV cache)
equal those of a plain-torch fp64 Llama that recomputes the whole prefix for every token
(scripts/hf_check.py's plain_torch_logits), and, where transformers is importable, those of
LlamaForCausalLM.generate(do_sample=False) on the exported directory (fp64). fp32 and fp64 may
legitimately pick different ids where the reference's top two logits are within 1e-3 of each
other; the comparison stops at such a near-tie (none occurs at init std 0.3 with these seeds,
and the script says how many tokens it compared). Exit 0 pass, 1 fail, 77 without torch.

train: `train --sample-every 2 --save-every 2` on 1 rank, and on 3 ranks under weipipe-interleave
and fsdp (weights owned, or sliced, elsewhere than rank 0): every metrics sample equals
`weipipe sample CKPT/step-K --prompt-tokens 0 --temperature 0` on that step's checkpoint (the same
weights, gathered by the ring in one case and read from the files in the other).
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TIE = 1e-3
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)


def run(weipipe, *args):
    return subprocess.run([weipipe, *map(str, args)], capture_output=True, encoding="utf-8", errors="replace")


def ids_of(weipipe, model, prompt, n, *extra):
    r = run(weipipe, "sample", model, "--prompt-tokens", ",".join(map(str, prompt)), "--max-new-tokens", n,
            "--format", "ids", "--precision", "fp32", *extra)
    if r.returncode != 0:
        sys.exit(f"sample_check: weipipe sample {model} failed ({r.returncode}): {r.stderr.strip()}")
    return [int(x) for x in r.stdout.strip().split(",")] if r.stdout.strip() else []


def make_model(weipipe, data, tmp):
    save, hf = os.path.join(tmp, "save"), os.path.join(tmp, "hf")
    r = run(weipipe, "train", "--data", data, "--steps", 1, "--save", save, "--num-layers", 2, "--hidden-size", 48,
            "--num-attention-heads", 4, "--num-query-groups", 2, "--seq-length", 40, "--nranks", 1, "--init-std", 0.3,
            "--precision", "fp32", "--seed", 3, "--quiet")
    if r.returncode != 0:
        sys.exit(f"sample_check: train failed: {r.stderr.strip()}")
    r = run(weipipe, "export", save, hf, "--quiet")
    if r.returncode != 0:
        sys.exit(f"sample_check: export failed: {r.stderr.strip()}")
    return save, hf


def cli_checks(weipipe, save, hf):
    p = [5, 17, 99, 3]
    greedy = ids_of(weipipe, save, p, 16, "--temperature", 0)
    check(len(greedy) == 16, f"greedy: {len(greedy)} ids, want 16")
    check(ids_of(weipipe, hf, p, 16, "--temperature", 0) == greedy, "checkpoint and its export: same greedy ids")
    a = ids_of(weipipe, save, p, 16, "--temperature", 1.5, "--seed", 7)
    b = ids_of(weipipe, save, p, 16, "--temperature", 1.5, "--seed", 7)
    c = ids_of(weipipe, save, p, 16, "--temperature", 1.5, "--seed", 8)
    check(a == b, "--seed 7 twice: the same ids")
    check(a != c, "--seed 7 and --seed 8: different ids")
    check(a != greedy, "temperature 1.5 departs from greedy")
    check(ids_of(weipipe, save, p, 16, "--temperature", 1.5, "--top-k", 1, "--seed", 9) == greedy, "--top-k 1 == greedy")
    check(ids_of(weipipe, save, p, 16, "--temperature", 1.5, "--top-p", 1e-6, "--seed", 9) == greedy,
          "--top-p 1e-6 == greedy")
    k3 = ids_of(weipipe, save, p, 16, "--temperature", 1.5, "--top-k", 3, "--seed", 9)
    check(len(k3) == 16, "--top-k 3 generates")
    r = subprocess.run([weipipe, "sample", save, "--prompt", "Hi", "--max-new-tokens", "5", "--temperature", "0"],
                       capture_output=True)
    text_ids = list(r.stdout)  # byte vocabulary: the bytes are the ids
    check(r.returncode == 0 and text_ids == ids_of(weipipe, save, list(b"Hi"), 5, "--temperature", 0),
          f"--prompt 'Hi' --format text: the bytes of --prompt-tokens 72,105's ids ({text_ids})")
    r = run(weipipe, "sample", save, "--prompt-tokens", "1", "--max-new-tokens", 100, "--temperature", 0,
            "--format", "ids")
    n = len(r.stdout.strip().split(","))
    check(r.returncode == 0 and n == 39 and "positions" in r.stderr,
          f"100 new tokens after 1 in 40 positions: {n} generated (want 39) and a warning")

    long_prompt = ",".join(["1"] * 41)
    bad = [
        (["--top-p", 0], "--top-p"),
        (["--top-p", 1.5], "--top-p"),
        (["--top-k", -1], "--top-k"),
        (["--temperature", -1], "--temperature"),
        (["--max-new-tokens", -2], "--max-new-tokens"),
        (["--format", "csv"], "--format"),
        (["--prompt-tokens", "1,x"], "--prompt-tokens"),
        (["--prompt-tokens", "1,256"], "--prompt-tokens"),
        (["--prompt-tokens", long_prompt], "positions"),
        (["--prompt", "a", "--prompt-tokens", "1"], "--prompt"),
        (["--top-q", 1], "--top-q"),
    ]
    for args, culprit in bad:
        r = run(weipipe, "sample", save, *args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and culprit in lines[0] and r.stdout == "",
              f"sample {' '.join(map(str, args))[:40]}: exit {r.returncode}, {lines[:1]}")
    other = os.path.join(os.path.dirname(save), "hf-other")
    shutil.copytree(hf, other)
    cfg = json.load(open(os.path.join(other, "config.json")))
    cfg["model_type"], cfg["architectures"] = "gpt2", ["GPT2LMHeadModel"]
    json.dump(cfg, open(os.path.join(other, "config.json"), "w"))
    for target in [os.path.dirname(save), os.path.join(save, "nothing"), other]:
        r = run(weipipe, "sample", target)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and r.stdout == "", f"sample {os.path.basename(target)}: exit "
              f"{r.returncode}, {lines[:1]}")


def spm_checks(weipipe, data, tmp):
    if not (shutil.which("spm_train") and shutil.which("spm_encode") and shutil.which("spm_decode")):
        print("sentencepiece checks skipped: spm_train/spm_encode/spm_decode not installed")
        return
    prefix = os.path.join(tmp, "spm")
    corpus = os.path.join(HERE, "..", "..", "README.md")
    r = subprocess.run(["spm_train", f"--input={corpus}", f"--model_prefix={prefix}", "--vocab_size=300",
                        "--model_type=bpe"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sample_check: spm_train failed: {r.stderr[-500:]}")
    model = prefix + ".model"
    save = os.path.join(tmp, "save300")
    r = run(weipipe, "train", "--data", data, "--steps", 1, "--save", save, "--num-layers", 2, "--hidden-size", 48,
            "--seq-length", 40, "--vocab-size", 300, "--nranks", 1, "--init-std", 0.3, "--precision", "fp32",
            "--quiet")
    if r.returncode != 0:
        sys.exit(f"sample_check: train (vocabulary 300) failed: {r.stderr.strip()}")
    text = "Weights, not activations"
    enc = subprocess.run(["spm_encode", f"--model={model}", "--output_format=id"], input=text + "\n",
                         capture_output=True, text=True).stdout.split()
    prompt = [1] + [int(x) for x in enc]  # spm_train's BOS is 1, EOS 2
    r = run(weipipe, "sample", save, "--tokenizer", model, "--prompt", text, "--max-new-tokens", 30,
            "--temperature", 0, "--format", "ids")
    by_text = [int(x) for x in r.stdout.strip().split(",")] if r.returncode == 0 and r.stdout.strip() else None
    by_ids = ids_of(weipipe, save, prompt, 30, "--temperature", 0)
    if by_ids and 2 in by_ids:
        by_ids = by_ids[:by_ids.index(2) + 1]
    check(by_text is not None and by_text == by_ids, f"--prompt '{text}' == --prompt-tokens BOS + spm_encode {prompt}")
    check(by_text is not None and (2 not in by_text or by_text.index(2) == len(by_text) - 1),
          f"EOS, if chosen, is the last id (ids {by_text}; the stop itself: model/decode)")
    shutil.copy(model, os.path.join(save, "step-1", "tokenizer.model"))
    r = run(weipipe, "sample", save, "--prompt", text, "--max-new-tokens", 30, "--temperature", 0)
    dec = subprocess.run(["spm_decode", f"--model={model}", "--input_format=id"],
                         input=" ".join(map(str, by_text or [])) + "\n", capture_output=True, text=True).stdout
    check(r.returncode == 0 and r.stdout.rstrip("\n") == dec.rstrip("\n"),
          f"--format text, tokenizer.model found in the checkpoint: {r.stdout[:40]!r} == spm_decode {dec[:40]!r}")
    for args, culprit in [(["--tokenizer", corpus, "--prompt", "a"], "README.md"),
                          (["--tokenizer", os.path.join(tmp, "none.model"), "--prompt", "a"], "none.model")]:
        r = run(weipipe, "sample", save, *args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and culprit in lines[0] and r.stdout == "",
              f"sample --tokenizer {culprit}: exit {r.returncode}, {lines[:1]}")
    return model


def ref_checks(weipipe, save, hf):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
    try:
        import torch
        import hf_check  # plain_torch_logits; exits 77 itself without numpy/torch
    except ImportError as e:
        print(f"sample_check: skipped: {e}")
        sys.exit(77)
    model = None
    try:
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM.from_pretrained(hf, torch_dtype=torch.float64).eval()
        model.generation_config.eos_token_id = None  # weipipe knows no EOS without a tokenizer
        model.generation_config.pad_token_id = 0
    except ImportError:
        print(f"transformers not importable for {sys.executable}: plain torch only")
    rng = random.Random(17)
    compared = 0
    for case in range(6):
        P, N = rng.randint(1, 14), rng.randint(8, 20)
        prompt = [rng.randrange(256) for _ in range(P)]
        ours = ids_of(weipipe, hf, prompt, N, "--temperature", 0)
        mine_ckpt = ids_of(weipipe, save, prompt, N, "--temperature", 0)
        seq, ref, stop = list(prompt), [], N
        with torch.no_grad():
            for i in range(N):  # fp64, whole prefix each token
                logits = hf_check.plain_torch_logits(hf, torch.tensor([seq]))[0, -1]
                top2 = torch.topk(logits, 2).values
                nxt = int(torch.argmax(logits))
                ref.append(nxt)
                seq.append(nxt)
                if float(top2[0] - top2[1]) < TIE:
                    stop = i
                    break
        compared += stop
        check(ours[:stop] == ref[:stop] and mine_ckpt == ours,
              f"prompt of {P}: {stop} greedy ids equal plain torch fp64 (weipipe {ours[:6]}..., torch {ref[:6]}...)")
        if model is not None:
            out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=N, min_new_tokens=N,
                                 attention_mask=torch.ones(1, P, dtype=torch.long))
            hf_ids = out[0, P:].tolist()
            check(hf_ids[:stop] == ours[:stop],
                  f"prompt of {P}: {stop} greedy ids equal transformers generate(do_sample=False) {hf_ids[:6]}...")
    print(f"compared {compared} generated ids over 6 prompts")
    check(compared >= 60, f"{compared} ids compared before any near-tie (want at least 60)")


def escaped(ids):
    """report.c's text of a byte-vocabulary sample: the bytes as UTF-8 where a sequence is
    well-formed (Python's strict decoder decides, an independent check of report.c's table),
    every other byte U+FFFD."""
    b, out, i = bytes(ids), [], 0
    while i < len(b):
        for k in (1, 2, 3, 4):
            try:
                ch = b[i:i + k].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(ch) == 1 and (k == 1) == (b[i] < 0x80):
                out.append(ch)
                i += k
                break
        else:
            out.append("\ufffd")
            i += 1
    return "".join(out)


def train_checks(weipipe, data, tmp):
    runs = [("1 rank", ["--nranks", 1]),
            ("3 ranks weipipe-interleave", ["--nranks", 3, "--transport", "local", "--strategy", "weipipe-interleave"]),
            ("3 ranks fsdp", ["--nranks", 3, "--transport", "local", "--strategy", "fsdp"])]
    for name, extra in runs:
        d = tempfile.mkdtemp(dir=tmp)
        save, metrics = os.path.join(d, "save"), os.path.join(d, "m.jsonl")
        r = run(weipipe, "train", "--data", data, "--steps", 4, "--num-layers", 3, "--hidden-size", 32,
                "--seq-length", 16, "--lr", 1e-2, "--sample-every", 2, "--sample-tokens", 12, "--save", save,
                "--save-every", 2, "--keep-last", 0, "--metrics", metrics, "--quiet", *extra)
        if r.returncode != 0:
            sys.exit(f"sample_check: train ({name}) failed: {r.stderr.strip()}")
        samples = [json.loads(line) for line in open(metrics) if '"sample"' in line]
        check([x["step"] for x in samples] == [2, 4], f"{name}: samples at steps {[x['step'] for x in samples]}")
        for x in samples:
            ckpt = os.path.join(save, f"step-{x['step']}")
            r = subprocess.run([weipipe, "sample", ckpt, "--prompt-tokens", "0", "--max-new-tokens", "12",
                                "--temperature", "0", "--format", "ids"], capture_output=True, text=True)
            ids = [int(v) for v in r.stdout.strip().split(",")] if r.returncode == 0 else []
            check(len(ids) == 12 and escaped(ids) == x["sample"],
                  f"{name}, step {x['step']}: train's sample {x['sample']!r} == sample on the checkpoint")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ref":
        sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
        import hfenv

        hfenv.use_transformers()  # the greedy check against generate() needs setup.sh's venv
    if len(sys.argv) != 4 or sys.argv[1] not in ("cli", "ref", "train"):
        sys.exit(__doc__)
    mode, weipipe, data = sys.argv[1:]
    tmp = tempfile.mkdtemp(prefix="wp-sample-")
    try:
        if mode == "train":
            train_checks(weipipe, data, tmp)
        else:
            save, hf = make_model(weipipe, data, tmp)
            (cli_checks if mode == "cli" else ref_checks)(weipipe, save, hf)
            if mode == "cli":
                model = spm_checks(weipipe, data, tmp)
                if model:  # a tokenizer larger than the model's vocabulary of 256
                    r = run(weipipe, "sample", save, "--tokenizer", model, "--prompt", "a")
                    lines = r.stderr.strip().splitlines()
                    check(r.returncode == 2 and len(lines) == 1 and "vocabulary" in lines[0],
                          f"tokenizer of 300 for a model of 256: exit {r.returncode}, {lines[:1]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"sample_check {mode}: {'all checks passed' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
