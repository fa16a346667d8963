#!/usr/bin/env python3
"""Check an exported model against the Python ecosystem.

    hf_check.py OUT_DIR --data SHARD [--seq-length S] [--batches K]
                [--ckpt CKPT_DIR --weipipe BUILD/weipipe] [--tolerance T]

Loads OUT_DIR (written by `weipipe export`) with transformers' LlamaForCausalLM.from_pretrained
and computes the mean next-token loss over the first K sequences of the data read in order
(sequence i = tokens [i*S, (i+1)*S], the tokens `weipipe eval` reads). With --ckpt it also runs
`weipipe eval` on the checkpoint and prints both losses and their difference; --tolerance makes
a difference above T an exit status of 1.

transformers needs a torch it supports: Debian's python3-torch (1.13) works with transformers
4.44 installed in a venv that sees the system packages:
    /usr/bin/python3 -m venv --system-site-packages VENV && VENV/bin/pip install transformers==4.44.2
Without transformers (--impl auto) the same forward is computed by a plain-torch Llama written
here from config.json and the safetensors file or shards (fp64, rope_scaling llama3 included), so the check still runs anywhere torch
does. Exit 77 when neither torch nor numpy is importable.
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"hf_check: skipped: {e}", file=sys.stderr)
    sys.exit(77)

SHARD_MAGIC, SHARD_VERSION, HEADER_INTS = 20240520, 1, 256


def read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header.size < HEADER_INTS or header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        sys.exit(f"hf_check: {path}: not an llm.c token shard (magic/version)")
    tokens = np.fromfile(path, dtype="<u2", offset=HEADER_INTS * 4)
    if tokens.size != header[2]:
        sys.exit(f"hf_check: {path}: header token count {header[2]}, file holds {tokens.size}")
    return tokens


def sequences(data, seq, count):
    """The loader's reading order: windows of seq+1 tokens at stride seq, shard after shard."""
    paths = sorted(glob.glob(os.path.join(data, "val_*.bin"))) if os.path.isdir(data) else [data]
    windows = []
    for p in paths:
        tok = read_shard(p).astype(np.int64)
        for i in range((tok.size - 1) // seq if tok.size > seq else 0):
            windows.append(tok[i * seq:(i + 1) * seq + 1])
            if len(windows) == count:
                return np.stack(windows)
    sys.exit(f"hf_check: {data} holds {len(windows)} sequences of {seq} tokens, {count} asked")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        b, e = d["data_offsets"]
        raw = np.frombuffer(data[b:e], dtype={"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[d["dtype"]])
        if d["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(raw.astype(np.float64).reshape(d["shape"]))
    return out


def read_weights(out_dir):
    """model.safetensors, or every shard that model.safetensors.index.json's weight_map names."""
    index = os.path.join(out_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(out_dir, "model.safetensors"))
    weight_map = json.load(open(index))["weight_map"]
    w = {}
    for shard in sorted(set(weight_map.values())):
        w.update(read_safetensors(os.path.join(out_dir, shard)))
    missing = set(weight_map) - set(w)
    if missing:
        sys.exit(f"hf_check: {index}: {sorted(missing)[:3]} not in the shards named")
    return w


def llama3_inv_freq(inv, scaling):
    """transformers' _compute_llama3_parameters (modeling_rope_utils.py), fp64."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    llama = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, (1 - smooth) * llama / factor + smooth * llama, llama)


def plain_torch_logits(out_dir, ids):
    """Llama forward in fp64 from config.json + the safetensors (Hugging Face conventions)."""
    cfg = json.load(open(os.path.join(out_dir, "config.json")))
    w = read_weights(out_dir)
    if "lm_head.weight" not in w and cfg.get("tie_word_embeddings"):
        w["lm_head.weight"] = w["model.embed_tokens.weight"]
    h, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, theta = h // nh, cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    B, S = ids.shape

    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    scaling = cfg.get("rope_scaling")
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind != "llama3":
            sys.exit(f"hf_check: rope_scaling type {kind!r} is not implemented here")
        inv = llama3_inv_freq(inv, scaling)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def rope(x):  # [B, heads, S, hd], rotate half
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    mask = torch.full((S, S), float("-inf"), dtype=torch.float64).triu(1)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        n = rms(x, w[p + "input_layernorm.weight"])
        q = (n @ w[p + "self_attn.q_proj.weight"].T).view(B, S, nh, hd).transpose(1, 2)
        k = (n @ w[p + "self_attn.k_proj.weight"].T).view(B, S, nkv, hd).transpose(1, 2)
        v = (n @ w[p + "self_attn.v_proj.weight"].T).view(B, S, nkv, hd).transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, -1) @ v
        x = x + att.transpose(1, 2).reshape(B, S, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        n = rms(x, w[p + "post_attention_layernorm.weight"])
        gate, up = n @ w[p + "mlp.gate_proj.weight"].T, n @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def transformers_logits(out_dir, ids):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(out_dir, torch_dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def mean_loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="mean").item()


def weipipe_loss(args):
    cmd = [args.weipipe, "eval", args.ckpt, "--data", args.data, "--seq-length", str(args.seq_length),
           "--batches", str(args.batches), "--precision", "fp32"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"hf_check: {' '.join(cmd)} failed ({run.returncode}): {run.stderr.strip()}")
    m = re.search(r"loss ([-+0-9.eEnaif]+)", run.stdout)
    if not m:
        sys.exit(f"hf_check: no loss in weipipe eval's output: {run.stdout!r}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq-length", type=int, default=64)
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--ckpt")
    ap.add_argument("--weipipe", default="build/weipipe")
    ap.add_argument("--tolerance", type=float)
    ap.add_argument("--impl", choices=["auto", "transformers", "torch"], default="auto")
    args = ap.parse_args()
    if args.impl != "torch":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import hfenv

        hfenv.use_transformers()  # setup.sh's venv, when this Python lacks transformers

    win = torch.from_numpy(sequences(args.data, args.seq_length, args.batches))
    ids, targets = win[:, :-1], win[:, 1:]
    impl = args.impl
    if impl == "auto":
        try:
            import transformers  # noqa: F401
            from transformers import LlamaForCausalLM  # noqa: F401

            impl = "transformers"
        except Exception:
            impl = "torch"
    with torch.no_grad():
        logits = transformers_logits(args.out_dir, ids) if impl == "transformers" else plain_torch_logits(args.out_dir, ids)
    ref = mean_loss(logits.double(), targets)
    name = "transformers LlamaForCausalLM" if impl == "transformers" else "plain torch Llama"
    print(f"{name} (fp64): loss {ref:.8f} over {args.batches} sequences of {args.seq_length} tokens")
    if not args.ckpt:
        return 0
    ours = weipipe_loss(args)
    diff = abs(ours - ref)
    print(f"weipipe eval (fp32): loss {ours:.8f}")
    print(f"difference: {diff:.3e}")
    if args.tolerance is not None and not diff <= args.tolerance:
        print(f"hf_check: difference {diff:.3e} exceeds the tolerance {args.tolerance:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
