#!/usr/bin/env python3
"""PyTorch on the same GPU and shapes as tests/gpu/bench_gpu.c, for a side-by-side table.

The usual way to train such a model in PyTorch: fp32 parameters, torch.autocast to bf16,
causal attention through F.scaled_dot_product_attention with the flash backend forced.
Measured, like bench_gpu, at the paper's width (h = 4096, 32 heads of 128, ffn 11008,
V = 32000, b = 1) for s = 4096 and 16384:
  - block: one decoder block, forward + backward (input gradient and weight gradients);
  - model (4 layers): embedding, 4 blocks, final norm, LM head, mean cross-entropy;
  - attention fwd / bwd alone (bf16 q, k, v).
FLOPs are counted as weipipe's layout_chunk_flops does (docs/model.md): 2 per multiply-add
of the matrix products; causal attention 4 * s(s+1)/2 * hd * heads per layer forward, twice
that backward; the backward's matrix work twice the forward's. Time is the best of the
timed iterations (CUDA events), as bench_gpu reports its best.

usage: gpu_torch_bench.py [--quick] [--iters N]     (--quick: s = 1024 only)
Prints a markdown table. Exit 0 on success, 77 when torch >= 2.0 with CUDA is not there.
"""
import argparse
import math
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as exc:
    print(f"gpu_torch_bench: skipped: cannot import torch with {sys.executable}: {exc}")
    sys.exit(77)
if not torch.cuda.is_available() or not hasattr(F, "scaled_dot_product_attention"):
    print(f"gpu_torch_bench: skipped: torch {torch.__version__} has no CUDA device or no scaled_dot_product_attention")
    sys.exit(77)

H, HEADS, HD, FFN, VOCAB = 4096, 32, 128, 11008, 32000


def nominal_peak(name):
    """Dense fp16/bf16 tensor-core TFLOP/s by device name, as bench_gpu.c; 0 when unknown."""
    if "H100" in name and "PCIe" in name:
        return 756.0
    if any(n in name for n in ("H100", "H200", "H800", "GH200")):
        return 989.0
    if "A100" in name or "A800" in name:
        return 312.0
    if "L40S" in name:
        return 362.0
    return 0.0


def rope_tables(seq, device):
    inv = 10000.0 ** (-torch.arange(0, HD, 2, dtype=torch.float64, device=device) / HD)
    ang = torch.arange(seq, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope(x, cos, sin):
    """Hugging Face rotate-half on [b, heads, s, hd]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, None].to(x.dtype), sin[None, None].to(x.dtype)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


class RMSNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(H))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight).to(x.dtype)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.n1, self.n2 = RMSNorm(), RMSNorm()
        self.q, self.k, self.v, self.o = lin(H, H), lin(H, H), lin(H, H), lin(H, H)
        self.gate, self.up, self.down = lin(H, FFN), lin(H, FFN), lin(FFN, H)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        n = self.n1(x)
        heads = lambda t: t.view(b, s, HEADS, HD).transpose(1, 2)  # noqa: E731
        q, k, v = rope(heads(self.q(n)), cos, sin), rope(heads(self.k(n)), cos, sin), heads(self.v(n))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, H))
        n = self.n2(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


class Model(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, H)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
        self.norm = RMSNorm()
        self.head = torch.nn.Linear(H, VOCAB, bias=False)

    def forward(self, tokens, targets, cos, sin):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def flash(backend="flash"):
    """Force one attention backend (flash, or cudnn: cuDNN's fused attention) where this torch can say so."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.CUDNN_ATTENTION if backend == "cudnn" else SDPBackend.FLASH_ATTENTION])
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)


def best_ms(fn, iters, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def attn_flops(seq, layers=1):
    return 4.0 * seq * (seq + 1) / 2 * HD * HEADS * layers


def block_flops(seq):
    matmul = 4 * H * H + 3 * H * FFN  # multiply-adds per token
    return 6.0 * seq * matmul + 3 * attn_flops(seq)


def model_flops(seq, layers):
    matmul = layers * (4 * H * H + 3 * H * FFN) + VOCAB * H
    return 6.0 * seq * matmul + 3 * attn_flops(seq, layers)


def bench_block(seq, iters, dev, compiled=False):
    blk = Block().to(dev)
    if compiled:
        blk = torch.compile(blk)
    cos, sin = rope_tables(seq, dev)
    x = torch.randn(1, seq, H, device=dev, requires_grad=True)
    g = torch.randn(1, seq, H, device=dev) * 1e-3

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16), flash():
            y = blk(x, cos, sin)
        y.backward(g)
    return best_ms(step, iters), block_flops(seq)


def bench_model(seq, iters, dev, layers=4):
    model = Model(layers).to(dev)
    cos, sin = rope_tables(seq, dev)
    tokens = torch.randint(0, VOCAB, (1, seq), device=dev)
    targets = torch.randint(0, VOCAB, (1, seq), device=dev)

    def step():
        model.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16), flash():
            loss = model(tokens, targets, cos, sin)
        loss.backward()
    ms = best_ms(step, iters)
    del model
    return ms, model_flops(seq, layers)


def bench_attention(seq, iters, dev, backend="flash"):
    q, k, v = (torch.randn(1, HEADS, seq, HD, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(1, HEADS, seq, HD, device=dev, dtype=torch.bfloat16)
    with flash(backend):
        fwd = best_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), iters)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        bwd = best_ms(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True), iters)
    return (fwd, attn_flops(seq)), (bwd, 2 * attn_flops(seq))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="s = 1024 only (a smoke run)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="also the block under torch.compile (minutes of compiling)")
    ap.add_argument("--seq", type=int, action="append", help="these sequence lengths instead of 4096 and 16384")
    args = ap.parse_args()
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    peak = nominal_peak(name)
    print(f"device: {name}; torch {torch.__version__}, bf16 autocast, fp32 parameters, flash attention")
    print(f"| {'what':16s} | {'s':>6s} | {'ms':>9s} | {'tokens/s':>10s} | {'TFLOP/s':>7s} | {'MFU':>8s} |")
    print("|------------------|--------|-----------|------------|---------|----------|")
    for seq in (args.seq or ([1024] if args.quick else [4096, 16384])):
        (fa, fb) = bench_attention(seq, args.iters, dev)
        rows = [("block", *bench_block(seq, args.iters, dev)), ("model (4 layers)", *bench_model(seq, args.iters, dev)),
                ("attention fwd", *fa), ("attention bwd", *fb)]
        try:
            (ca, cb) = bench_attention(seq, args.iters, dev, "cudnn")
            rows += [("attn fwd cudnn", *ca), ("attn bwd cudnn", *cb)]
        except RuntimeError as exc:  # no cuDNN backend in this torch
            print(f"(torch's cuDNN attention: {str(exc).splitlines()[0]})")
        if args.compile and (seq == 4096 or args.seq):
            rows.append(("block compiled", *bench_block(seq, args.iters, dev, compiled=True)))
        for what, ms, flops in rows:
            tflops = flops / (ms * 1e-3) / 1e12
            mfu = f"{100 * tflops / peak:.1f}%" if peak else "-"
            print(f"| {what:16s} | {seq:6d} | {ms:9.2f} | {seq / (ms * 1e-3):10.0f} | {tflops:7.1f} | {mfu:>8s} |")
        sys.stdout.flush()
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
