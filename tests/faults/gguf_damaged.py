#!/usr/bin/env python3
"""Damaged GGUF model files (issue 42, items 2 and 3): each must be refused, exit 2, with one line
naming the file and the culprit (the tensor and its block, or the key as the file spells it),
never run to garbage with exit 0 and never blamed on a flag the user did not type.

    gguf_damaged.py WEIPIPE DATA_SHARD

The files are written by gguf-py's GGUFWriter (llama.cpp's own Python, an independent writer): a
small random llama (2 layers, h 64, 4 heads, 2 KV heads, V 256, tied) with a Q8_0 embedding,
Q4_1 attention and MLP matrices and F32 norms, as SmolLM2's GGUF has them. It is first trained
from (exit 0: the control), then damaged one way at a time: NaN or Inf in a Q4_1 scale or min, a
Q8_0 scale, an F32 norm; an infinite or NaN epsilon or RoPE theta; block counts of 0, 2000000 and
one less than the layers present; zero heads; an EOS id past the vocabulary; a tensor name given
twice (a second blk.0.ffn_norm.weight of zeros after the first: the first won). The tokenizer keys: tokens as an int32 array (was a segfault). Exit 77 without gguf-py.
"""
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
try:
    import hfenv

    hfenv.use("gguf")
    import numpy as np
    import gguf
    import gguf.quants
except (ImportError, SystemExit) as e:
    print(f"skipped: {e} (scripts/setup.sh installs gguf into its venv)")
    sys.exit(77)

L, H, HEADS, KV, FFN, V = 2, 64, 4, 2, 128, 256
HD = H // HEADS
Q8, Q41 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_1


def tensors(layers):
    rng = np.random.default_rng(42)
    out = [("token_embd.weight", rng.normal(0, 0.02, (V, H)).astype(np.float32), Q8),
           ("output_norm.weight", np.ones(H, np.float32), None)]
    for l in range(layers):
        for name, shape, q in [("attn_norm", (H,), None), ("attn_q", (H, H), Q41), ("attn_k", (KV * HD, H), Q41),
                               ("attn_v", (KV * HD, H), Q41), ("attn_output", (H, H), Q41), ("ffn_norm", (H,), None),
                               ("ffn_gate", (FFN, H), Q41), ("ffn_up", (FFN, H), Q41), ("ffn_down", (H, FFN), Q41)]:
            a = np.ones(shape, np.float32) if q is None else rng.normal(0, 0.05, shape).astype(np.float32)
            out.append((f"blk.{l}.{name}.weight", a, q))
    return out


def write(path, block_count=L, layers=L, eps=1e-5, theta=10000.0, heads=HEADS, eos=None, tokens=None, rename=None):
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(block_count)
    w.add_embedding_length(H)
    w.add_feed_forward_length(FFN)
    w.add_head_count(heads)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(eps)
    w.add_rope_freq_base(theta)
    w.add_context_length(64)
    w.add_vocab_size(V)
    if eos is not None:
        w.add_eos_token_id(eos)
    if tokens is not None:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        if tokens == "int32":
            w.add_array("tokenizer.ggml.tokens", list(range(V)))
        w.add_token_merges(["a b"])
    extra = [(rename[1], np.zeros(H, np.float32), None)] if rename else []  # a stand-in, patched to rename[0] below
    for name, a, q in tensors(layers) + extra:
        if q is None:
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, gguf.quants.quantize(a, q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if rename:  # gguf-py refuses a name given twice: the second is written under a stand-in of its length, then patched
        blob = open(path, "rb").read()
        assert blob.count(rename[1].encode()) == 1 and len(rename[0]) == len(rename[1])
        open(path, "wb").write(blob.replace(rename[1].encode(), rename[0].encode()))


def damage(path, tensor, byte, value):
    """Overwrites bytes at offset `byte` of the tensor's data with `value` (bytes)."""
    r = gguf.GGUFReader(path)
    t = next(t for t in r.tensors if t.name == tensor)
    with open(path, "r+b") as f:
        f.seek(int(t.data_offset) + byte)
        f.write(value)


F16_NAN, F16_INF = struct.pack("<H", 0x7E00), struct.pack("<H", 0x7C00)
F32_NAN, F32_INF = struct.pack("<f", float("nan")), struct.pack("<f", float("inf"))


def main():
    weipipe, shard = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    fail = 0
    with tempfile.TemporaryDirectory(prefix="wp-gguf-damaged-") as tmp:
        def run(cmd, name):
            save = os.path.join(tmp, name + "-save")
            path = os.path.join(tmp, name + ".gguf")
            argv = {"train": [weipipe, "train", "--init-from", path, "--data", shard, "--steps", "1", "--quiet", "--seq-length", "16",
                              "--save", save],
                    "eval": [weipipe, "eval", path, "--data", shard, "--seq-length", "16", "--quiet"],
                    "tok": [weipipe, "prepare", os.path.join(tmp, "text.txt"), "--tokenizer", path, "--out", save, "--quiet"]}[cmd]
            return path, save, subprocess.run(argv, capture_output=True, text=True)

        with open(os.path.join(tmp, "text.txt"), "w") as f:
            f.write("a b ab\n" * 10)
        write(os.path.join(tmp, "good.gguf"))
        for cmd in ("train", "eval"):
            _, _, r = run(cmd, "good")
            if r.returncode != 0:
                print(f"FAIL: the valid GGUF: {cmd} exit {r.returncode}: {r.stderr.strip()}")
                return 1
        print("valid GGUF: trained one step and evaluated")

        Q41_BLOCK, Q8_BLOCK = 20, 34  # bytes of one block: Q4_1 d, m (f16) + 16; Q8_0 d (f16) + 32
        cases = [
            # (name, how to write it, command, words the one line must hold)
            ("q41_scale_nan", lambda p: (write(p), damage(p, "blk.1.attn_q.weight", 3 * Q41_BLOCK, F16_NAN)), "train",
             ["blk.1.attn_q.weight", "block 3", "Q4_1"]),
            ("q41_min_inf", lambda p: (write(p), damage(p, "blk.0.ffn_up.weight", 5 * Q41_BLOCK + 2, F16_INF)), "eval",
             ["blk.0.ffn_up.weight", "block 5", "Q4_1"]),
            ("q8_scale_nan", lambda p: (write(p), damage(p, "token_embd.weight", 7 * Q8_BLOCK, F16_NAN)), "eval",
             ["token_embd.weight", "block 7", "Q8_0"]),
            ("f32_norm_nan", lambda p: (write(p), damage(p, "output_norm.weight", 4 * 9, F32_NAN)), "train",
             ["output_norm.weight", "element 9"]),
            ("f32_norm_inf", lambda p: (write(p), damage(p, "blk.1.ffn_norm.weight", 0, F32_INF)), "eval",
             ["blk.1.ffn_norm.weight", "element 0"]),
            ("eps_inf", lambda p: write(p, eps=float("inf")), "train", ["llama.attention.layer_norm_rms_epsilon", "finite"]),
            ("eps_nan", lambda p: write(p, eps=float("nan")), "eval", ["llama.attention.layer_norm_rms_epsilon", "finite"]),
            ("theta_inf", lambda p: write(p, theta=float("inf")), "train", ["llama.rope.freq_base", "finite"]),
            ("blocks_0", lambda p: write(p, block_count=0), "train", ["llama.block_count", "[1, 100000]"]),
            ("blocks_2000000", lambda p: write(p, block_count=2000000), "train", ["llama.block_count", "2000000", "[1, 100000]"]),
            ("blocks_short", lambda p: write(p, block_count=L - 1), "eval", ["blk.1.", "llama.block_count 1", "unexpected"]),
            ("heads_0", lambda p: write(p, heads=0), "train", ["llama.attention.head_count", "[1,"]),
            ("eos_past_vocab", lambda p: write(p, eos=V + 5), "train", ["tokenizer.ggml.eos_token_id", str(V + 5)]),
            ("name_twice", lambda p: write(p, rename=("blk.0.ffn_norm.weight", "blk.9.ffn_norm.weight")),
             "train", ["blk.0.ffn_norm.weight", "twice"]),
            ("tokens_int32", lambda p: write(p, tokens="int32"), "tok", ["tokenizer.ggml.tokens", "strings"]),
        ]
        for name, make, cmd, words in cases:
            make(os.path.join(tmp, name + ".gguf"))
            path, save, r = run(cmd, name)
            lines = r.stderr.strip().splitlines()
            # blamed on a model flag nobody typed (was: "--num-layers: 2000000 must be at least 1")
            flagged = any(f in r.stderr for f in ("--num-", "--hidden", "--norm-eps", "--rope-theta", "--eos-token-id"))
            # the values are checked as the masters load, after --save is made: no checkpoint in it
            saved = os.path.isdir(save) and any(n.startswith("step-") for n in os.listdir(save))
            ok = (r.returncode == 2 and len(lines) == 1 and path in lines[0] and all(w in lines[0] for w in words)
                  and not flagged and not saved)
            print(f"{'ok' if ok else 'FAIL'}: {name} ({cmd}): exit {r.returncode}: {r.stderr.strip()}"
                  + ("" if ok else f" (wanted exit 2, one line naming {path} and {words})"))
            fail |= not ok
    return int(fail)


if __name__ == "__main__":
    sys.exit(main())
