#!/usr/bin/env python3
"""An exported directory read with nothing but json and numpy (independent of our C reader):

    check_export.py OUT_DIR CKPT_DIR [MAX_SHARD_BYTES]

model.safetensors: 8-byte little-endian header length, the data 8-byte aligned, __metadata__
format "pt", tensors back to back from offset 0 to the end of the file, exactly the Hugging Face
Llama names with the shapes config.json implies, in config.json's torch_dtype; values equal to
the checkpoint's fp32 masters (rank-*.safetensors, also parsed here) after one round-to-nearest-
even into that dtype. A sharded export (model.safetensors.index.json) is checked file by file and
against save_pretrained's layout; generation_config.json's bos/eos must be config.json's.
Exit 0 pass, 1 fail, 77 when numpy is missing."""
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


def check_file(path, dtype, shapes):
    """One safetensors file's layout; its tensors as name -> (raw, n, entry)."""
    raw, n, header = parse(path)
    check((8 + n) % 8 == 0, f"{path}: data starts at {8 + n}, not 8-byte aligned")
    check(header.get("__metadata__", {}).get("format") == "pt", f"{path}: __metadata__.format is not pt")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    end = 0
    for name, d in sorted(tensors.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        check(d["data_offsets"][0] == end, f"{name}: starts at {d['data_offsets'][0]}, previous ended at {end}")
        end = d["data_offsets"][1]
        check(d["dtype"] == dtype, f"{name}: dtype {d['dtype']}, config says {dtype}")
        check(d["shape"] == shapes.get(name), f"{name}: shape {d['shape']}, want {shapes.get(name)}")
    check(8 + n + end == len(raw), f"{path}: {len(raw) - 8 - n - end} bytes after the last tensor")
    return {k: (raw, n, v) for k, v in tensors.items()}


def cfg_layers(shapes):
    return len({k.split(".")[2] for k in shapes if k.startswith("model.layers.")})


def check_shards(out, dtype, shapes, max_bytes):
    """save_pretrained's sharded layout: model.safetensors.index.json with metadata.total_size
    (tensor bytes) and weight_map; shards model-0000K-of-0000N.safetensors each holding exactly
    the tensors mapped to it; filled in order as huggingface_hub does (a new shard when the next
    tensor would pass max_bytes, a tensor above max_bytes alone)."""
    index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
    check(set(index) == {"metadata", "weight_map"}, f"index keys {sorted(index)}")
    wmap = index["weight_map"]
    files = sorted(set(wmap.values()))
    count = len(files)
    check(count > 1, "an index for a single shard (save_pretrained writes model.safetensors then)")
    check(files == [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)], f"shard names {files[:3]}")
    check(not os.path.exists(os.path.join(out, "model.safetensors")), "model.safetensors beside the shards")
    tensors = {}
    for f in files:
        got = check_file(os.path.join(out, f), dtype, shapes)
        check(set(got) == {k for k, v in wmap.items() if v == f}, f"{f}: holds other tensors than weight_map says")
        tensors.update(got)
    nbytes = {k: t[2]["data_offsets"][1] - t[2]["data_offsets"][0] for k, t in tensors.items()}
    check(index["metadata"].get("total_size") == sum(nbytes.values()), f"total_size {index['metadata']}")
    if max_bytes:
        # LlamaForCausalLM.state_dict() order: modules as LlamaDecoderLayer registers them
        per_layer = ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                     "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                     "input_layernorm.weight", "post_attention_layernorm.weight"]
        order = (["model.embed_tokens.weight"] +
                 [f"model.layers.{i}.{m}" for i in range(cfg_layers(shapes)) for m in per_layer] +
                 ["model.norm.weight", "lm_head.weight"])
        plan, created, current, size = {}, 0, None, 0
        for name in order:
            b = nbytes.get(name, 0)
            if b > max_bytes:
                plan[name], created = created, created + 1
                continue
            if current is None or size + b > max_bytes:
                current, created, size = created, created + 1, 0
            plan[name] = current
            size += b
        want = {k: f"model-{v + 1:05d}-of-{count:05d}.safetensors" for k, v in plan.items()}
        check(want == wmap, "shards are not filled as huggingface_hub's split_state_dict_into_shards does")
    return tensors


def main():
    out, ckpt = sys.argv[1], sys.argv[2]
    max_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama", "config: architecture")
    check(isinstance(cfg["tie_word_embeddings"], bool) and cfg["hidden_act"] == "silu", "config: tie/act")
    gen = json.load(open(os.path.join(out, "generation_config.json")))
    check(gen.get("bos_token_id") == cfg["bos_token_id"] and gen.get("eos_token_id") == cfg["eos_token_id"],
          f"generation_config.json {gen} disagrees with config.json's bos/eos")
    shapes = expected_shapes(cfg)
    if cfg["tie_word_embeddings"]:  # save_pretrained leaves the tied head out
        del shapes["lm_head.weight"]
    dtype = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[cfg["torch_dtype"]]
    if os.path.exists(os.path.join(out, "model.safetensors.index.json")):
        located = check_shards(out, dtype, shapes, max_bytes)
    else:
        located = check_file(os.path.join(out, "model.safetensors"), dtype, shapes)
    tensors = {k: v[2] for k, v in located.items()}
    check(set(tensors) == set(shapes), f"names differ: {sorted(set(tensors) ^ set(shapes))[:5]}")
    masters = {}
    for path in glob.glob(os.path.join(ckpt, "rank-*.safetensors")):
        r, rn, rh = parse(path)
        masters.update({k: tensor(r, rn, v) for k, v in rh.items() if k in shapes})
    check(set(masters) == set(shapes), "the checkpoint does not hold every master")
    for name in shapes:
        if name not in masters or name not in tensors:
            continue
        raw, n, entry = located[name]
        got, m = tensor(raw, n, entry), masters[name]
        want = {"F32": lambda x: x, "F16": lambda x: x.astype("<f2"), "BF16": bf16_rne}[dtype](m)
        check(np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)), f"{name}: values differ from the master")
    for f in failures[:20]:
        print("check_export: FAIL:", f, file=sys.stderr)
    print(f"check_export: {len(tensors)} tensors, {dtype}, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
