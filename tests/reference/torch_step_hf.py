#!/usr/bin/python3
"""The PyTorch side of the whole-step comparison (scripts/gpu_torch_step.py) is a real Llama:
its model, with Hugging Face's LlamaForCausalLM weights copied in (q/k/v and gate/up fused into
one matrix each, the head tied to the embedding), gives transformers' logits, loss and every
parameter gradient; its chunked cross-entropy (the LM head's gradients computed in the forward,
chunk by chunk, a ragged last chunk) gives the same loss and gradients as the plain one; its
bf16 step leaves every bf16 parameter equal to its fp32 master rounded; the MFU's count of matrix
parameters (scripts/step_flops.py) is transformers' at both real shapes.

Float64 on the CPU, shapes of GQA 3:1 with odd sizes, multi-query and plain multi-head attention.
transformers computes RMSNorm and the RoPE tables in fp32 even for a float64 model, and so does
the script's model: agreement is at fp32 rounding (below 1e-6); the tolerances are 1e-5 on
gradients and logits, 1e-7 on the loss, where a wrong head order, a wrong split or a missing
RoPE gives errors above 1e-2. On the GPU the script's attention is SDPA and its norm F.rms_norm
(this torch may have neither; the table's notes say which ran). Exit 0 pass, 1 fail, 77 without
transformers or torch.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import hfenv  # noqa: E402

hfenv.use_transformers()  # run again under setup.sh's venv when this Python lacks transformers
try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:
    print(f"torch_step_hf: skipped: no torch or transformers for {sys.executable}: {exc}")
    sys.exit(77)
import gpu_torch_step as ts  # noqa: E402

GRAD_TOL, LOSS_TOL = 1e-5, 1e-6
# (layers, h, ffn, heads, kv heads, s, b, V)
SHAPES = [(2, 72, 100, 6, 2, 19, 2, 301), (2, 48, 96, 4, 1, 16, 3, 200), (1, 64, 160, 4, 4, 33, 1, 97)]
fails = 0


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def expect(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


def shape_dict(L, h, f, nh, nkv, V):
    return dict(hidden=h, layers=L, heads=nh, kv_heads=nkv, ffn=f, vocab=V, rope_theta=10000.0, norm_eps=1e-5)


def copy_from_hf(ours, hf):
    """transformers' weights into the script's model (fused rows: q, k, v; gate, up)."""
    with torch.no_grad():
        ours.embed.weight.copy_(hf.model.embed_tokens.weight)
        ours.norm.copy_(hf.model.norm.weight)
        for blk, lay in zip(ours.blocks, hf.model.layers):
            a, m = lay.self_attn, lay.mlp
            blk.wqkv.weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
            blk.wo.weight.copy_(a.o_proj.weight)
            blk.w13.weight.copy_(torch.cat([m.gate_proj.weight, m.up_proj.weight]))
            blk.w2.weight.copy_(m.down_proj.weight)
            blk.attn_norm.copy_(lay.input_layernorm.weight)
            blk.ffn_norm.copy_(lay.post_attention_layernorm.weight)


def hf_grads_as_ours(hf):
    """transformers' gradients named and fused as the script's parameters are."""
    g = {"embed.weight": hf.model.embed_tokens.weight.grad, "norm": hf.model.norm.weight.grad}
    for i, lay in enumerate(hf.model.layers):
        a, m = lay.self_attn, lay.mlp
        g[f"blocks.{i}.wqkv.weight"] = torch.cat([a.q_proj.weight.grad, a.k_proj.weight.grad, a.v_proj.weight.grad])
        g[f"blocks.{i}.wo.weight"] = a.o_proj.weight.grad
        g[f"blocks.{i}.w13.weight"] = torch.cat([m.gate_proj.weight.grad, m.up_proj.weight.grad])
        g[f"blocks.{i}.w2.weight"] = m.down_proj.weight.grad
        g[f"blocks.{i}.attn_norm"] = lay.input_layernorm.weight.grad
        g[f"blocks.{i}.ffn_norm"] = lay.post_attention_layernorm.weight.grad
    return g


def check(shape, seed):
    L, h, f, nh, nkv, s, b, V = shape
    cfg = LlamaConfig(hidden_size=h, intermediate_size=f, num_hidden_layers=L, num_attention_heads=nh,
                      num_key_value_heads=nkv, vocab_size=V, rms_norm_eps=1e-5, rope_theta=10000.0,
                      tie_word_embeddings=True, max_position_embeddings=max(64, s), attn_implementation="eager")
    torch.manual_seed(seed)
    hf = LlamaForCausalLM(cfg).double()
    with torch.no_grad():  # weights far from 0.02 so attention is far from uniform, norms not all 1
        for name, p in hf.named_parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    tokens = torch.randint(1, V, (b, s + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    hf_logits = hf.lm_head(hf.model(input_ids=inputs).last_hidden_state)  # float64 (forward() upcasts to fp32)
    hf_loss = torch.nn.functional.cross_entropy(hf_logits.reshape(b * s, V), targets.reshape(b * s))
    hf_loss.backward()
    hf_own = hf(input_ids=tokens, labels=tokens).loss  # transformers' own shift and loss (fp32)
    want = hf_grads_as_ours(hf)
    sd = shape_dict(L, h, f, nh, nkv, V)
    tag = f"L={L} h={h} ffn={f} heads={nh}/{nkv} s={s} b={b} V={V}"
    attn = ts.Attention("sdpa" if hasattr(torch.nn.functional, "scaled_dot_product_attention") else "math", False)
    for loss_kind, chunk in (("full", 0), ("chunked", 7), ("chunked", b * s), ("chunked", 1000)):
        ours = ts.Llama(sd, attn, loss_kind, chunk or 1).double()
        copy_from_hf(ours, hf)
        cos, sin = ts.rope_tables(sd, s, torch.device("cpu"), torch.float64)
        if loss_kind == "full":
            lg = ours.logits(inputs, cos, sin)
            expect(rel(lg, hf_logits) < GRAD_TOL, f"{tag}: logits rel err {rel(lg, hf_logits):.2e}")
        loss = ours(inputs, targets, cos, sin)
        loss.backward()
        lerr = abs(loss.item() - hf_loss.item()) / hf_loss.item()
        grads = {n: p.grad for n, p in ours.named_parameters()}
        worst_name, worst = max(((n, rel(grads[n], want[n])) for n in want), key=lambda r: r[1])
        expect(set(grads) == set(want) and lerr < LOSS_TOL and worst < GRAD_TOL,
               f"{tag} {loss_kind} CE{f' (chunks of {chunk})' if chunk else ''}: loss {loss.item():.6f} rel err "
               f"{lerr:.1e}, max grad rel err {worst:.1e} in {worst_name}")
    # the check can fail: gate and up swapped in the fused matrix (a plausible slip) is far off
    with torch.no_grad():
        for blk in ours.blocks:
            blk.w13.weight.copy_(torch.cat(blk.w13.weight.chunk(2)[::-1]))
    swapped = abs(ours(inputs, targets, cos, sin).item() - hf_loss.item()) / hf_loss.item()
    expect(swapped > 1e-3, f"{tag}: gate and up swapped: loss rel err {swapped:.1e}, caught")
    own_err = abs(hf_own.item() - loss.item()) / loss.item()
    expect(own_err < 1e-6, f"{tag}: LlamaForCausalLM(labels=...)'s own loss (fp32 logits) {hf_own.item():.6f}, rel err {own_err:.1e}")


def check_flop_count():
    """scripts/step_flops.py's matrix parameters per layer at both real shapes (one layer, a small
    vocabulary: the layer's dimensions are what the count can get wrong) against the 2-D parameters
    of transformers' LlamaForCausalLM built from the same config.json fields."""
    import step_flops
    for name, shape in step_flops.SHAPES.items():
        small = dict(shape, layers=1, vocab=1000)
        cfg = LlamaConfig(hidden_size=shape["hidden"], intermediate_size=shape["ffn"], num_hidden_layers=1,
                          num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"], vocab_size=1000,
                          tie_word_embeddings=True)
        hf = LlamaForCausalLM(cfg)
        want = sum(p.numel() for p in hf.parameters() if p.dim() == 2)
        got = step_flops.matmul_params(small)
        expect(got == want, f"{name}: matrix parameters of one layer and a tied 1000-row head {got:,} (transformers {want:,})")
        del hf


def check_bf16_ce():
    """The chunked cross-entropy on bf16 inputs (as the bf16 variants run it: bf16 logits per chunk,
    fp32 softmax, dw summed in bf16) against the float64 loss of the same bf16 values: within bf16
    rounding (measured 5e-3 on the gradients)."""
    torch.manual_seed(5)
    n, h, V = 50, 48, 1000
    x = (torch.randn(n, h) * 2).to(torch.bfloat16).requires_grad_(True)
    w = (torch.randn(V, h) * 0.3).to(torch.bfloat16).requires_grad_(True)
    t = torch.randint(0, V, (n,))
    loss = ts.ChunkedLinearCE.apply(x, w, t, 16, ts.ce_chunk)
    (loss * 2).backward()  # an incoming gradient other than 1 scales both
    x64, w64 = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    ref = torch.nn.functional.cross_entropy(x64 @ w64.t(), t)
    (ref * 2).backward()
    lerr, dx, dw = abs(loss.item() - ref.item()) / ref.item(), rel(x.grad.double(), x64.grad), rel(w.grad.double(), w64.grad)
    expect(x.grad.dtype == torch.bfloat16 and lerr < 1e-2 and dx < 2e-2 and dw < 2e-2,
           f"bf16 chunked CE (n={n}, V={V}, chunks of 16) against float64: loss rel err {lerr:.1e}, dx {dx:.1e}, dw {dw:.1e}")


def check_masters():
    """One bf16 step of the script's Trainer: masters moved by AdamW, each bf16 parameter their rounding."""
    import argparse
    args = argparse.Namespace(ce_chunk=24, lr=1e-2, seed=3, compile_scope="blocks", steps=1, warmup=0)
    tr = ts.Trainer(ts.TINY, "bf16-cudnn-eager", torch.device("cpu"), args)
    before = [m.clone() for m in tr.masters]
    step_s, losses = ts.time_steps(tr, 2, 32, args)
    moved = min((m - m0).abs().max().item() for m, m0 in zip(tr.masters, before))
    exact = all(torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(tr.params, tr.masters))
    expect(moved > 0 and exact and all(p.dtype == torch.bfloat16 for p in tr.params),
           f"bf16 step: every master moved (least max change {moved:.1e}), every bf16 parameter its master rounded: {exact}")


def main():
    torch.set_num_threads(1)
    for seed, shape in enumerate(SHAPES):
        check(shape, seed)
    check_bf16_ce()
    check_masters()
    check_flop_count()
    print("PASS" if not fails else f"FAILED ({fails})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
