#!/usr/bin/python3
"""Time one training micro-batch (forward + backward) of the Llama model in PyTorch on CPU.

The model is torch_ref.py's (the one that checks weipipe's gradients), in float32, so the
comparison with `weipipe bench` is like for like: same shapes, same arithmetic, same FLOP
accounting (docs/model.md: 2 FLOPs per multiply-add of the matrix products and of causal
attention; backward counts the matrix work twice and the attention work twice).
Attention is batched matmuls with a causal mask, no Python loop over tokens or heads.

Flags are spelled as weipipe's; --config reads the same INI files (flags override it).
Prints tokens/s and model GFLOP/s, median and best of --iters (weipipe bench reports the best);
--format json prints one JSON object for scripts.
Exit 0 on success, 2 on bad usage, 77 when torch cannot be imported.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref  # noqa: E402  (exits 77 itself when torch is missing)
from torch_ref import torch  # noqa: E402

MODEL_FLAGS = {  # flag -> (torch_ref config key, type, default as weipipe's flags.def)
    "num-layers": ("layers", int, 4),
    "hidden-size": ("hidden", int, 64),
    "ffn-hidden-size": ("ffn", int, 0),
    "num-attention-heads": ("heads", int, 4),
    "num-query-groups": ("kv_heads", int, 0),
    "seq-length": ("seq", int, 64),
    "micro-batch-size": ("batch", int, 1),
    "vocab-size": ("vocab", int, 256),
    "rope-theta": ("rope_theta", float, 10000.0),
    "norm-eps": ("norm_eps", float, 1e-5),
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="INI file of key = value (keys spelled as the flags)")
    for flag, (_, kind, _) in MODEL_FLAGS.items():
        ap.add_argument("--" + flag, type=kind)
    ap.add_argument("--iters", type=int, default=5, help="timed iterations (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--format", choices=["text", "json"], default="text")
    return ap.parse_args()


def resolve_config(args):
    """Defaults, then the --config file, then flags; the same precedence as weipipe."""
    values = {flag: str(default) for flag, (_, _, default) in MODEL_FLAGS.items()}
    if args.config:
        values.update({k: v for k, v in torch_ref.read_ini(args.config).items() if k in MODEL_FLAGS})
    for flag in MODEL_FLAGS:
        given = getattr(args, flag.replace("-", "_"))
        if given is not None:
            values[flag] = str(given)
    return torch_ref.model_config(values, args.config or "flags")


def init_params(cfg, seed):
    """Normal(0, 0.02) matrices, unit norm weights (the values do not change the timing)."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in torch_ref.hf_shapes(cfg).items():
        t = torch.ones(shape) if len(shape) == 1 else torch.randn(shape, generator=gen) * 0.02
        params[name] = t.requires_grad_(True)
    return params


def model_flops(cfg):
    """Forward + backward model FLOPs of one micro-batch (docs/model.md accounting)."""
    h, hd, f = cfg["hidden"], cfg["head_dim"], cfg["ffn"]
    q, kv = cfg["heads"] * hd, cfg["kv_heads"] * hd
    tokens = cfg["batch"] * cfg["seq"]
    matmul = cfg["layers"] * (h * q + 2 * h * kv + q * h + 3 * h * f) + cfg["vocab"] * h
    pairs = cfg["batch"] * cfg["seq"] * (cfg["seq"] + 1) / 2
    attn_fwd = 4.0 * pairs * cfg["heads"] * hd * cfg["layers"]
    return 3 * 2.0 * tokens * matmul + 3 * attn_fwd


def time_step(params, cfg, inputs, targets):
    for p in params.values():
        p.grad = None
    start = time.perf_counter()
    loss = torch_ref.llama_loss(params, cfg, inputs, targets)
    loss.backward()
    return time.perf_counter() - start


def main():
    args = parse_args()
    if args.iters < 1 or args.warmup < 0 or args.threads < 1:
        print("torch_bench: --iters and --threads must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    try:
        cfg = resolve_config(args)
    except torch_ref.DumpError as exc:
        print(f"torch_bench: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    params = init_params(cfg, args.seed)
    tokens = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    for _ in range(args.warmup):
        time_step(params, cfg, inputs, targets)
    times = [time_step(params, cfg, inputs, targets) for _ in range(args.iters)]
    sec = statistics.median(times)
    n_tokens = cfg["batch"] * cfg["seq"]
    result = {
        "impl": "torch", "torch_version": torch.__version__, "threads": args.threads,
        "num_layers": cfg["layers"], "hidden_size": cfg["hidden"], "ffn_hidden_size": cfg["ffn"],
        "num_attention_heads": cfg["heads"], "num_query_groups": cfg["kv_heads"],
        "seq_length": cfg["seq"], "micro_batch_size": cfg["batch"], "vocab_size": cfg["vocab"],
        "iters": args.iters, "ms_median": sec * 1e3, "ms_min": min(times) * 1e3,
        "tokens_per_s": n_tokens / sec, "gflops": model_flops(cfg) / sec / 1e9,
        "tokens_per_s_best": n_tokens / min(times), "gflops_best": model_flops(cfg) / min(times) / 1e9,
    }
    if args.format == "json":
        print(json.dumps(result))
    else:
        print(f"torch {torch.__version__} fp32, {args.threads} threads: L={cfg['layers']} h={cfg['hidden']}"
              f" ffn={cfg['ffn']} heads={cfg['heads']}/{cfg['kv_heads']} s={cfg['seq']} b={cfg['batch']}"
              f" V={cfg['vocab']}")
        print(f"fwd+bwd median of {args.iters}: {result['ms_median']:.1f} ms, {result['tokens_per_s']:.0f} tokens/s,"
              f" {result['gflops']:.2f} GFLOP/s")
        print(f"fwd+bwd best of {args.iters}:   {result['ms_min']:.1f} ms, {result['tokens_per_s_best']:.0f} tokens/s,"
              f" {result['gflops_best']:.2f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
