#!/usr/bin/env python3
"""A whole Llama training step in plain PyTorch, the strongest fair way we know beside the usual
way, for the whole-step comparison with weipipe (issue 38; scripts/gpu_check.py's torchstep stage).

A step is: zero_grad (set to None), forward, loss, backward, AdamW, timed as a whole. Variants
(--variants; every one is the same model code below, only these knobs differ):
  bf16-cudnn-compiled   bf16 parameters with fp32 masters: torch.optim.AdamW(fused=True) steps an
                        fp32 master copy and the bf16 model is copied from it (PyTorch's fused AdamW
                        keeps no masters of bf16 parameters itself: this is the standard way, as in
                        Megatron-LM and apex); SDPA on its cuDNN backend only; fused QKV and gate/up
                        projections; F.rms_norm; a cross-entropy over chunks of tokens that computes
                        the LM head's gradients in its forward and never holds all fp32 logits
                        (ChunkedLinearCE below, the Liger-kernel way); torch.compile of every decoder
                        block (--compile-scope blocks, torchtitan's way: the 16-30 identical blocks
                        compile once; --compile-scope whole compiles the model as one graph, minutes
                        longer, the LM head's loss a graph break) and of the loss's per-chunk softmax.
  bf16-cudnn-eager      the same without torch.compile.
  fp32-autocast-flash   the usual way (scripts/gpu_torch_bench.py's): fp32 parameters and fused AdamW
                        on them, torch.autocast to bf16, SDPA's flash backend forced, the whole fp32
                        logits and F.cross_entropy, eager.
Shapes (scripts/step_flops.py): SmolLM2-135M at s = 2048 and 4096, Llama-3.2-1B at 2048, 4096, 8192;
b defaults to what fills an H100 80 GB (--batch overrides); an out-of-memory error halves b and the
row says which b ran. Every step reads the same random batch (tokens drawn once, never zeros).

Timing: each step between two CUDA events, the host waiting for the second (a trainer reads its
loss each step; weipipe's step time ends the same way); the median of --steps steps after
--warmup (compilation, autotuning, the allocator's growth). Memory: torch.cuda.max_memory_allocated
and max_memory_reserved over the warm-up and the timed steps (reset per variant and shape).
MFU: scripts/step_flops.py's count against the device's dense bf16 peak by name (or --peak-tflops).

  gpu_torch_step.py [--model smollm2-135m,llama32-1b] [--seq S ...] [--batch B] [--variants a,b]
                    [--steps 10] [--warmup 3] [--json FILE] [--compile-scope blocks|whole]
  gpu_torch_step.py --device cpu --tiny      a CPU smoke run of every variant on a tiny shape
                                              (eager; math attention; CPU autocast), seconds
Prints one markdown table and names the strongest variant per shape. Exit 0 when every row ran
(an OOM at b = 1 is a row that did not run: exit 1), 1 on a failure or a non-finite loss, 2 on bad
flags, 77 when the device is CUDA and this python has no CUDA torch.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_flops  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError as exc:
    print(f"gpu_torch_step: skipped: cannot import torch with {sys.executable}: {exc}")
    sys.exit(77)

VARIANTS = {
    "bf16-cudnn-compiled": dict(params="bf16", attention="cudnn", compiled=True, loss="chunked"),
    "bf16-cudnn-eager": dict(params="bf16", attention="cudnn", compiled=False, loss="chunked"),
    "fp32-autocast-flash": dict(params="fp32", attention="flash", compiled=False, loss="full"),
}
OOM = getattr(torch.cuda, "OutOfMemoryError", MemoryError)  # torch < 1.13 has no such class: nothing to catch on CUDA
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, vocab=300, rope_theta=10000.0, norm_eps=1e-5,
            seqs=(32,), tokens=64)


# ---------------------------------------------------------------------------------------------- model
def rms_norm(x, weight, eps):
    """F.rms_norm where this torch has it (2.4+); else the same arithmetic as transformers'
    LlamaRMSNorm (fp32 statistics, the input's dtype out, times the weight)."""
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope_tables(shape, seq, device, dtype):
    """cos, sin [seq, head size] as transformers' LlamaRotaryEmbedding makes them (fp32, then
    the activations' dtype)."""
    hd = shape["hidden"] // shape["heads"]
    inv = 1.0 / (shape["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64, device=device).float() / hd))
    ang = torch.arange(seq, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope(x, cos, sin):
    """Rotate-half RoPE on [b, heads, s, hd] (transformers' apply_rotary_pos_emb), in x's dtype
    (under autocast q and k are bf16 while the tables are fp32: SDPA's flash backend takes no fp32)."""
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rot * sin.to(x.dtype)


class Attention:
    """Causal attention on [b, heads, s, hd] queries and [b, kv_heads, s, hd] keys and values.
    mode: 'sdpa' (F.scaled_dot_product_attention; the backend is chosen around the step by
    sdpa_backend()), or 'math' where this torch has no SDPA (CPU only: torch 1.13). gqa: SDPA
    takes the fewer key/value heads itself (enable_gqa, or the cuDNN backend's own support);
    else they are repeated to every query head first, as transformers' repeat_kv does."""

    def __init__(self, mode, gqa):
        self.mode, self.gqa = mode, gqa

    def __call__(self, q, k, v):
        rep = q.shape[1] // k.shape[1]
        if rep > 1 and not self.gqa:
            b, kvh, s, hd = k.shape
            k = k[:, :, None].expand(b, kvh, rep, s, hd).reshape(b, kvh * rep, s, hd)
            v = v[:, :, None].expand(b, kvh, rep, s, hd).reshape(b, kvh * rep, s, hd)
        if self.mode == "sdpa":
            if rep > 1 and self.gqa == "enable_gqa":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = q.shape[2]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        p = torch.softmax(scores.float().masked_fill(mask, float("-inf")), dim=-1).to(q.dtype)
        return p @ v


class Block(torch.nn.Module):
    def __init__(self, shape, attention):
        super().__init__()
        h, self.heads, self.kvh = shape["hidden"], shape["heads"], shape["kv_heads"]
        self.hd, self.eps, self.attention = h // self.heads, shape["norm_eps"], attention
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.wqkv = lin(h, (self.heads + 2 * self.kvh) * self.hd)  # rows: q, then k, then v
        self.wo = lin(self.heads * self.hd, h)
        self.w13 = lin(h, 2 * shape["ffn"])  # rows: gate, then up
        self.w2 = lin(shape["ffn"], h)
        self.attn_norm = torch.nn.Parameter(torch.ones(h))
        self.ffn_norm = torch.nn.Parameter(torch.ones(h))

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        qkv = self.wqkv(rms_norm(x, self.attn_norm, self.eps))
        q, k, v = qkv.split([self.heads * self.hd, self.kvh * self.hd, self.kvh * self.hd], dim=-1)
        q = rope(q.view(b, s, self.heads, self.hd).transpose(1, 2), cos, sin)
        k = rope(k.view(b, s, self.kvh, self.hd).transpose(1, 2), cos, sin)
        v = v.view(b, s, self.kvh, self.hd).transpose(1, 2)
        a = self.attention(q, k, v)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, self.heads * self.hd))
        gate, up = self.w13(rms_norm(x, self.ffn_norm, self.eps)).chunk(2, dim=-1)
        return x + self.w2(F.silu(gate) * up)


def ce_chunk(logits, targets, scale):
    """One chunk's summed cross-entropy (fp32) and its gradient scale * (softmax - onehot) in the
    logits' dtype: the only pass over the chunk's [c, V] logits (fused into ~2 kernels compiled)."""
    lf = logits.float()
    lse = torch.logsumexp(lf, dim=-1, keepdim=True)
    loss = (lse.squeeze(1) - lf.gather(1, targets[:, None]).squeeze(1)).sum()
    p = torch.exp(lf - lse).scatter_add(1, targets[:, None], torch.full_like(lse, -1.0))
    return loss, (p * scale).to(logits.dtype)


class ChunkedLinearCE(torch.autograd.Function):
    """mean over tokens of cross_entropy(x @ w^T, targets) without all the logits: per chunk of
    tokens, the logits, the loss and dlogits, then dx (this chunk's rows) and dw (summed over
    chunks, in w's dtype through addmm's beta = 1, as Liger's fused linear cross-entropy does), all
    in the forward; the backward scales them by the incoming gradient. Peak extra memory: one
    chunk's logits in fp32 and in w's dtype."""

    @staticmethod
    def forward(ctx, x, w, targets, chunk, fn):
        n = x.shape[0]
        dx = torch.empty_like(x)
        dw = torch.zeros_like(w)
        loss = torch.zeros((), dtype=torch.float32, device=x.device)
        for i in range(0, n, chunk):
            xc, tc = x[i:i + chunk], targets[i:i + chunk]
            l, dl = fn(xc @ w.t(), tc, 1.0 / n)
            loss += l
            torch.mm(dl, w, out=dx[i:i + chunk])
            dw.addmm_(dl.t(), xc)
        ctx.save_for_backward(dx, dw)
        return loss / n

    @staticmethod
    def backward(ctx, g):
        dx, dw = ctx.saved_tensors
        return dx * g.to(dx.dtype), dw * g.to(dw.dtype), None, None, None


class Llama(torch.nn.Module):
    """LlamaForCausalLM's arithmetic with tied embeddings, q/k/v and gate/up each one matrix."""

    def __init__(self, shape, attention, loss="chunked", chunk=4096, ce_fn=ce_chunk):
        super().__init__()
        self.shape, self.loss_kind, self.chunk, self.ce_fn = shape, loss, chunk, ce_fn
        self.embed = torch.nn.Embedding(shape["vocab"], shape["hidden"])
        self.blocks = torch.nn.ModuleList(Block(shape, attention) for _ in range(shape["layers"]))
        self.norm = torch.nn.Parameter(torch.ones(shape["hidden"]))

    def hidden(self, tokens, cos, sin):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return rms_norm(x, self.norm, self.shape["norm_eps"])

    def logits(self, tokens, cos, sin):
        return self.hidden(tokens, cos, sin) @ self.embed.weight.t()

    def forward(self, tokens, targets, cos, sin):
        x = self.hidden(tokens, cos, sin)
        return self.head_loss(x.reshape(-1, x.shape[-1]), targets.reshape(-1))

    def head_loss(self, x, targets):
        w = self.embed.weight
        if self.loss_kind == "full":
            return F.cross_entropy((x @ w.t()).float(), targets)
        if torch.is_autocast_enabled():  # the weight as the autocast matmul would see it
            x, w = x.to(torch.bfloat16), w.to(torch.bfloat16)
        return ChunkedLinearCE.apply(x, w, targets, self.chunk, self.ce_fn)


def init_weights(model, seed):
    """transformers' Llama initialisation: normal(0, 0.02) matrices and embedding, norms at 1
    (drawn where the model lives: a 1B model's draws on the host would take tens of seconds)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, 0.02)


def build_on(device, fn):
    """fn() with new tensors made on device where this torch can (2.0+: torch.device as a context),
    else on the host and moved."""
    if hasattr(torch.device, "__enter__"):
        with device:
            return fn()
    return fn().to(device)


# ---------------------------------------------------------------------------------------- the step
def sdpa_backend(kind, device):
    """A context forcing SDPA's backend (cudnn or flash) where this torch can; None: no forcing."""
    if device.type != "cuda":
        return None
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.CUDNN_ATTENTION if kind == "cudnn" else SDPBackend.FLASH_ATTENTION])


def probe_attention(kind, shape, device):
    """How this torch and device run the variant's attention: (Attention, words for the table)."""
    if not hasattr(F, "scaled_dot_product_attention"):
        return Attention("math", False), f"math (torch {torch.__version__} has no SDPA)"
    if device.type != "cuda":
        return Attention("sdpa", False), "SDPA (CPU: its math backend)"
    hd = shape["hidden"] // shape["heads"]
    q = torch.randn(2, shape["heads"], 256, hd, device=device, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, shape["kv_heads"], 256, hd, device=device, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, shape["kv_heads"], 256, hd, device=device, dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn_like(q)

    def outputs(attn):  # the output and the gradients of q, k, v
        out = attn(q, k, v)
        return [out] + list(torch.autograd.grad(out, (q, k, v), dout))

    with sdpa_backend(kind, device):
        ref = outputs(Attention("sdpa", False))  # the key/value heads repeated: always valid
        for gqa in ("native", "enable_gqa") if kind == "cudnn" else ("enable_gqa",):
            try:  # the backend taking the fewer key/value heads itself, where it gives the same result
                got = outputs(Attention("sdpa", gqa))
                if all(((g.float() - r.float()).norm() / r.float().norm()).item() < 2e-2 for g, r in zip(got, ref)):
                    return Attention("sdpa", gqa), f"SDPA {kind} backend, GQA in the kernel ({gqa})"
            except (RuntimeError, TypeError):
                pass
    return Attention("sdpa", False), f"SDPA {kind} backend, key/value heads repeated before it"


class Trainer:
    """One variant's model, optimizer and step on one device."""

    def __init__(self, shape, variant, device, args):
        self.shape, self.v, self.device, self.args = shape, VARIANTS[variant], device, args
        self.name = variant
        self.attention, attn_note = probe_attention(self.v["attention"], shape, device)
        self.bf16 = self.v["params"] == "bf16"
        cpu = device.type != "cuda"
        self.compiled = self.v["compiled"] and not cpu
        ce_fn = ce_chunk
        if self.compiled:
            ce_fn = torch.compile(ce_chunk, dynamic=False)
        model = build_on(device, lambda: Llama(shape, self.attention, self.v["loss"], args.ce_chunk, ce_fn))
        init_weights(model, args.seed)
        fused = {"fused": True} if not cpu else {}
        opt_kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **fused)
        if self.bf16:
            self.masters = [p.detach().clone().float() for p in model.parameters()]
            for m in self.masters:
                m.grad = torch.zeros_like(m)
            model.to(torch.bfloat16)
            self.opt = torch.optim.AdamW(self.masters, **opt_kw)
        else:
            self.masters = None
            self.opt = torch.optim.AdamW(model.parameters(), **opt_kw)
        self.params = list(model.parameters())
        self.model = model
        if self.compiled:
            if args.compile_scope == "whole":
                model.head_loss = torch._dynamo.disable(model.head_loss)
                self.fwd = torch.compile(model, dynamic=False)
            else:
                for blk in model.blocks:
                    blk.compile(dynamic=False)
                self.fwd = model
        else:
            self.fwd = model
        self.note = "; ".join([attn_note,
                               "bf16 params, fp32 masters" if self.bf16 else "fp32 params, bf16 autocast",
                               f"compiled ({args.compile_scope})" if self.compiled else
                               ("eager (no compile on the CPU)" if self.v["compiled"] else "eager"),
                               f"chunked CE ({args.ce_chunk} tokens)" if self.v["loss"] == "chunked" else "full fp32 logits"])

    def step(self, tokens, targets, cos, sin):
        """zero_grad, forward, loss, backward, AdamW; the loss (a device tensor)."""
        self.model.zero_grad(set_to_none=True)
        ctx = sdpa_backend(self.v["attention"], self.device)
        with ctx if ctx is not None else _null():
            if self.bf16:
                loss = self.fwd(tokens, targets, cos, sin)
            else:
                with torch.autocast(self.device.type, dtype=torch.bfloat16):
                    loss = self.fwd(tokens, targets, cos, sin)
            loss.backward()
        if self.bf16:
            grads = [p.grad for p in self.params]
            _foreach_copy([m.grad for m in self.masters], grads)
            self.opt.step()
            with torch.no_grad():
                _foreach_copy(self.params, self.masters)
        else:
            self.opt.step()
        return loss


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _foreach_copy(dst, src):
    """dst[i] = src[i] (casting): one multi-tensor launch where this torch has it (2.2+)."""
    if hasattr(torch, "_foreach_copy_"):
        torch._foreach_copy_(dst, src)
    else:
        for d, s in zip(dst, src):
            d.copy_(s)


def time_steps(tr, batch, seq, args):
    """Median step seconds and the loss of the first and last step, at micro-batch batch."""
    dev = tr.device
    g = torch.Generator().manual_seed(args.seed + 1)
    data = torch.randint(1, tr.shape["vocab"], (batch, seq + 1), generator=g).to(dev)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    act = torch.bfloat16 if tr.bf16 else torch.float32
    cos, sin = rope_tables(tr.shape, seq, dev, act)
    times, losses = [], []
    for i in range(args.warmup + args.steps):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = tr.step(tokens, targets, cos, sin)
            end.record()
            end.synchronize()
            dt = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            loss = tr.step(tokens, targets, cos, sin)
            dt = time.perf_counter() - t0
        losses.append(float(loss))
        if i >= args.warmup:
            times.append(dt)
    return statistics.median(times), losses


def add_row(rows, row, args):
    """Keep a row, and append it to --json at once: a run stopped at its time box keeps its rows."""
    rows.append(row)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")


def first_line(exc):
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def run_shape(model_name, shape, seqs, variant, device, args, peak, rows):
    try:
        tr = Trainer(shape, variant, device, args)
    except RuntimeError as exc:  # cannot even hold the weights (OOM is a RuntimeError): every row fails
        for seq in seqs:
            add_row(rows, dict(model=model_name, variant=variant, seq=seq, error=first_line(exc)), args)
        return
    for seq in seqs:
        batch = args.batch or step_flops.default_batch(shape, seq)
        row = dict(model=model_name, variant=variant, seq=seq, note=tr.note)
        while True:
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            try:
                step_s, losses = time_steps(tr, batch, seq, args)
                break
            except OOM:
                tr.model.zero_grad(set_to_none=True)
                row.setdefault("oom_batches", []).append(batch)
                if batch == 1:
                    row["error"] = "out of memory at b = 1"
                    break
                batch //= 2
            except RuntimeError as exc:  # a backend refusing the shape, a compile failure: this row only
                row["error"] = first_line(exc)
                break
        if "error" in row:
            add_row(rows, row, args)
            continue
        if tr.compiled:  # one graph per block shape is the plan; 30 would mean a recompile per block
            try:
                from torch._dynamo.utils import counters
                row["dynamo_graphs_so_far"] = int(counters["stats"]["unique_graphs"])
            except (ImportError, KeyError, TypeError):
                pass
        tok_s = batch * seq / step_s
        m, m_full = step_flops.mfu(shape, seq, tok_s, peak)
        row.update(batch=batch, tokens_per_step=batch * seq, step_ms=1e3 * step_s, tokens_per_s=tok_s, mfu=m,
                   mfu_full=m_full, loss_first=losses[0], loss_last=losses[-1])
        if device.type == "cuda":
            row.update(max_allocated_gib=torch.cuda.max_memory_allocated(device) / 2**30,
                       max_reserved_gib=torch.cuda.max_memory_reserved(device) / 2**30)
        if not all(math.isfinite(x) for x in losses):
            row["error"] = f"non-finite loss: {losses}"
        add_row(rows, row, args)
        print(f"  {model_name} {variant} s={seq} b={batch}: {1e3 * step_s:.2f} ms, {tok_s:.0f} tokens/s, "
              f"loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    del tr
    if device.type == "cuda":
        torch.cuda.empty_cache()


def pct(x):
    return f"{100 * x:.1f}%" if x is not None else "-"


def print_table(rows):
    print("| model | variant | s | b | step ms | tokens/s | MFU | MFU (full attn) | max alloc GiB | max reserved GiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['variant']} | {r['seq']} | - | - | - | - | - | - | FAILED: {r['error']} |")
            continue
        mem = (f"{r['max_allocated_gib']:.1f} | {r['max_reserved_gib']:.1f}" if "max_allocated_gib" in r else "- | -")
        oom = f" (OOM at b = {', '.join(map(str, r['oom_batches']))})" if r.get("oom_batches") else ""
        print(f"| {r['model']} | {r['variant']} | {r['seq']} | {r['batch']}{oom} | {r['step_ms']:.2f} | "
              f"{r['tokens_per_s']:.0f} | {pct(r['mfu'])} | {pct(r['mfu_full'])} | {mem} |")
    best = {}
    for r in rows:
        if "error" not in r and r["tokens_per_s"] > best.get((r["model"], r["seq"]), {}).get("tokens_per_s", 0):
            best[(r["model"], r["seq"])] = r
    for (model, seq), r in best.items():
        print(f"strongest PyTorch at {model} s={seq}: {r['variant']}, {r['tokens_per_s']:.0f} tokens/s, MFU {pct(r['mfu'])}")
    notes = {}
    for r in rows:
        if "note" in r:
            notes.setdefault(r["variant"], r["note"])
    for v, n in notes.items():
        print(f"  {v}: {n}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a tiny shape (h 64, 2 layers, V 300, s 32): a smoke run")
    ap.add_argument("--model", default=",".join(step_flops.SHAPES), help="comma-separated: " + ", ".join(step_flops.SHAPES))
    ap.add_argument("--seq", type=int, action="append", help="these sequence lengths (default: each shape's own)")
    ap.add_argument("--batch", type=int, default=0, help="micro-batch size (default: tokens per micro-batch / s, step_flops.py)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=10, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--ce-chunk", type=int, default=4096, help="tokens per chunk of the chunked cross-entropy")
    ap.add_argument("--compile-scope", choices=("blocks", "whole"), default="blocks")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the device's dense bf16 peak (default: by its name)")
    ap.add_argument("--json", help="append one JSON object per row to this file")
    args = ap.parse_args()
    variants = args.variants.split(",")
    models = args.model.split(",")
    for v in variants:
        if v not in VARIANTS:
            print(f"gpu_torch_step: --variants: unknown variant '{v}' (variants: {', '.join(VARIANTS)})", file=sys.stderr)
            return 2
    for m in models:
        if m not in step_flops.SHAPES:
            print(f"gpu_torch_step: --model: unknown shape '{m}' (shapes: {', '.join(step_flops.SHAPES)})", file=sys.stderr)
            return 2
    if args.steps < 1 or args.warmup < 0 or args.batch < 0 or args.ce_chunk < 1 or any(s < 2 for s in args.seq or []):
        print("gpu_torch_step: --steps and --ce-chunk must be >= 1, --warmup and --batch >= 0, --seq >= 2", file=sys.stderr)
        return 2
    if args.device == "cuda":
        if not torch.cuda.is_available() or not hasattr(F, "scaled_dot_product_attention"):
            print(f"gpu_torch_step: skipped: torch {torch.__version__} has no CUDA device or no scaled_dot_product_attention")
            return 77
        device = torch.device("cuda")
        name = torch.cuda.get_device_name(device)
    else:
        device, name = torch.device("cpu"), "cpu"
    peak = args.peak_tflops or step_flops.peak_tflops(name)
    print(f"device: {name} (peak {peak or 'unknown'} TFLOP/s dense bf16); torch {torch.__version__}; "
          f"{args.steps} timed steps after {args.warmup}, median", flush=True)
    shapes = [("tiny", TINY)] if args.tiny else [(m, step_flops.SHAPES[m]) for m in models]
    rows = []
    for model_name, shape in shapes:
        seqs = args.seq or list(shape["seqs"])
        for v in variants:
            run_shape(model_name, shape, seqs, v, device, args, peak, rows)
    print_table(rows)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
