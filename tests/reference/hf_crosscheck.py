#!/usr/bin/python3
"""scripts/torch_ref.py against Hugging Face's own LlamaForCausalLM (when transformers is there),
also with rope_scaling llama3 and with tie_word_embeddings.

torch_ref.py is the oracle for weipipe's gradients, so its conventions (RoPE rotate_half,
repeat_kv head mapping, RMSNorm, untied head, shifted targets) are checked here against the
real thing: same float64 weights, same tokens, loss and every parameter gradient compared.
HF computes RMSNorm and the RoPE tables in fp32 even for a float64 model, so agreement is
at fp32 rounding level (measured max 3.6e-7); the tolerance is 1e-5 on gradients and 1e-7 on
the loss, while a wrong convention gives errors above 1e-2.
Exit 0 pass, 1 fail, 77 when transformers cannot be imported (run it with an interpreter
that has transformers, e.g. a venv with --system-site-packages over Debian's torch).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import hfenv  # noqa: E402

hfenv.use_transformers()  # run again under setup.sh's venv when this Python lacks transformers
import torch_ref  # noqa: E402  (exits 77 itself without torch)
from torch_ref import torch  # noqa: E402

try:
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:
    print(f"hf_crosscheck: skipped: no transformers for {sys.executable}: {exc}")
    sys.exit(77)

GRAD_TOL, LOSS_TOL = 1e-5, 1e-7
# (L, h, ffn, heads, kv heads, s, b, V): GQA 2:1, multi-query 3:1 with odd sizes, plain MHA.
SHAPES = [(2, 64, 160, 4, 2, 32, 2, 256), (3, 48, 100, 3, 1, 17, 3, 101), (2, 64, 96, 4, 4, 33, 1, 50)]


# Llama 3.x rope_scaling: head dim 16 with original 64 puts pairs in all three llama3 bands.
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def hf_model(shape, seed, scaling=None, tied=False):
    L, h, f, nh, nkv, s, _, V = shape
    cfg = LlamaConfig(hidden_size=h, intermediate_size=f, num_hidden_layers=L, num_attention_heads=nh,
                      num_key_value_heads=nkv, vocab_size=V, rms_norm_eps=1e-5, rope_theta=10000.0,
                      tie_word_embeddings=tied, max_position_embeddings=512 if scaling else max(64, s),
                      rope_scaling=scaling)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).double()
    with torch.no_grad():  # non-trivial norm weights, so their gradients are tested too
        for name, p in model.named_parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p) if "norm" in name else 0.05 * torch.randn_like(p))
    return model


def check(shape, seed, scaling=None, tied=False):
    L, h, f, nh, nkv, s, b, V = shape
    model = hf_model(shape, seed, scaling, tied)
    tokens = torch.randint(0, V, (b, s + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    # HF upcasts logits to fp32 in forward(); the head is applied here to stay in float64.
    logits = model.lm_head(model.model(input_ids=inputs).last_hidden_state)
    hf_loss = torch.nn.functional.cross_entropy(logits.reshape(b * s, V), targets.reshape(b * s))
    hf_loss.backward()
    hf_params = dict(model.named_parameters())

    ini = {"num-layers": L, "hidden-size": h, "ffn-hidden-size": f, "num-attention-heads": nh,
           "num-query-groups": nkv, "seq-length": s, "micro-batch-size": b, "vocab-size": V,
           "tie-word-embeddings": "true" if tied else "false"}
    if scaling:
        ini.update({"rope-scaling-factor": scaling["factor"], "rope-low-freq-factor": scaling["low_freq_factor"],
                    "rope-high-freq-factor": scaling["high_freq_factor"],
                    "rope-original-max-positions": scaling["original_max_position_embeddings"]})
    cfg = torch_ref.model_config(ini, "shape")
    shapes = torch_ref.hf_shapes(cfg)
    if tied:  # HF lists the tied head once, as the embedding
        del shapes["lm_head.weight"]
    if set(shapes) != set(hf_params) or any(tuple(hf_params[n].shape) != shapes[n] for n in shapes):
        print(f"FAIL {shape}: parameter names or shapes differ from HF's")
        return False
    params = {n: p.detach().clone().requires_grad_(True) for n, p in hf_params.items()}
    if tied:
        params["lm_head.weight"] = params["model.embed_tokens.weight"]
    loss = torch_ref.llama_loss(params, cfg, inputs, targets)
    loss.backward()
    loss_err = abs(loss.item() - hf_loss.item()) / abs(hf_loss.item())
    worst_name, worst = max(((n, torch_ref.rel_err(params[n].grad.numpy(), hf_params[n].grad.numpy()))
                             for n in hf_params), key=lambda r: r[1])
    ok = loss_err <= LOSS_TOL and worst <= GRAD_TOL
    print(f"{'ok  ' if ok else 'FAIL'} L={L} h={h} ffn={f} heads={nh}/{nkv} s={s} b={b} V={V}"
          f"{' llama3' if scaling else ''}{' tied' if tied else ''}: loss rel err"
          f" {loss_err:.2e} (tol {LOSS_TOL:g}), max grad rel err {worst:.2e} in {worst_name} (tol {GRAD_TOL:g})")
    return ok


def main():
    torch.set_num_threads(1)
    results = [check(shape, seed) for seed, shape in enumerate(SHAPES)]
    # Llama 3.2-style: llama3 rope scaling, and tied word embeddings (one tensor, summed gradient)
    results.append(check((2, 64, 160, 4, 2, 48, 2, 256), 11, LLAMA3, False))
    results.append(check((2, 64, 160, 4, 2, 48, 2, 256), 12, LLAMA3, True))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
