#!/usr/bin/env python3
"""An exported directory read with nothing but json and numpy (independent of our C reader):

    check_export.py OUT_DIR CKPT_DIR

model.safetensors: 8-byte little-endian header length, the data 8-byte aligned, __metadata__
format "pt", tensors back to back from offset 0 to the end of the file, exactly the Hugging Face
Llama names with the shapes config.json implies, in config.json's torch_dtype; values equal to
the checkpoint's fp32 masters (rank-*.safetensors, also parsed here) after one round-to-nearest-
even into that dtype. Exit 0 pass, 1 fail, 77 when numpy is missing."""
import glob
import json
import os
import sys

try:
    import numpy as np
except ImportError:
    print("check_export: skipped: numpy is not installed", file=sys.stderr)
    sys.exit(77)

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def parse(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    return raw, n, header


def tensor(raw, n, d):
    b, e = d["data_offsets"]
    dt = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[d["dtype"]]
    return np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dt).reshape(d["shape"])


def bf16_rne(x):
    u = x.astype("<f4").view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def expected_shapes(cfg):
    h, f, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": [V, h], "model.norm.weight": [h], "lm_head.weight": [V, h]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [h], p + "self_attn.q_proj.weight": [q, h],
                       p + "self_attn.k_proj.weight": [kv, h], p + "self_attn.v_proj.weight": [kv, h],
                       p + "self_attn.o_proj.weight": [h, q], p + "post_attention_layernorm.weight": [h],
                       p + "mlp.gate_proj.weight": [f, h], p + "mlp.up_proj.weight": [f, h],
                       p + "mlp.down_proj.weight": [h, f]})
    return shapes


def main():
    out, ckpt = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama", "config: architecture")
    check(cfg["tie_word_embeddings"] is False and cfg["hidden_act"] == "silu", "config: tie/act")
    raw, n, header = parse(os.path.join(out, "model.safetensors"))
    check((8 + n) % 8 == 0, f"data starts at {8 + n}, not 8-byte aligned")
    check(header.get("__metadata__", {}).get("format") == "pt", "__metadata__.format is not pt")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    shapes = expected_shapes(cfg)
    check(set(tensors) == set(shapes), f"names differ: {sorted(set(tensors) ^ set(shapes))[:5]}")
    dtype = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[cfg["torch_dtype"]]
    end = 0
    for name, d in sorted(tensors.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        check(d["data_offsets"][0] == end, f"{name}: starts at {d['data_offsets'][0]}, previous ended at {end}")
        end = d["data_offsets"][1]
        check(d["dtype"] == dtype, f"{name}: dtype {d['dtype']}, config says {dtype}")
        check(d["shape"] == shapes.get(name), f"{name}: shape {d['shape']}, want {shapes.get(name)}")
    check(8 + n + end == len(raw), f"file has {len(raw) - 8 - n - end} bytes after the last tensor")
    masters = {}
    for path in glob.glob(os.path.join(ckpt, "rank-*.safetensors")):
        r, rn, rh = parse(path)
        masters.update({k: tensor(r, rn, v) for k, v in rh.items() if k in shapes})
    check(set(masters) == set(shapes), "the checkpoint does not hold every master")
    for name in shapes:
        if name not in masters or name not in tensors:
            continue
        got, m = tensor(raw, n, tensors[name]), masters[name]
        want = {"F32": lambda x: x, "F16": lambda x: x.astype("<f2"), "BF16": bf16_rne}[dtype](m)
        check(np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)), f"{name}: values differ from the master")
    for f in failures[:20]:
        print("check_export: FAIL:", f, file=sys.stderr)
    print(f"check_export: {len(tensors)} tensors, {dtype}, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
