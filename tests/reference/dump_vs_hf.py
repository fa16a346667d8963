#!/usr/bin/python3
"""A `weipipe check` dump judged by Hugging Face's own LlamaForCausalLM, not by torch_ref.py:

    dump_vs_hf.py DUMP_DIR

The dump's config.ini becomes a LlamaConfig (rope_scaling llama3 and tie_word_embeddings
included), the dump's parameters are copied in (float64), and HF's loss and parameter
gradients on the dump's tokens are compared with the dump's: relative error <= 1e-4 (the dump
is fp32; HF builds its RoPE tables in fp32). With tied embeddings HF has one tensor, whose
gradient the dump must hold under both names. Exit 0 pass, 1 fail, 77 without transformers.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import torch_ref  # noqa: E402  (exits 77 itself without torch)
from torch_ref import torch  # noqa: E402

try:
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:
    print(f"dump_vs_hf: skipped: no transformers for {sys.executable}: {exc}")
    sys.exit(77)

TOL = 1e-4


def main():
    dump = torch_ref.read_dump(sys.argv[1])
    cfg = dump["cfg"]
    scaling = None
    if cfg["rope_factor"] > 0:
        scaling = {"rope_type": "llama3", "factor": cfg["rope_factor"], "low_freq_factor": cfg["rope_low"],
                   "high_freq_factor": cfg["rope_high"],
                   "original_max_position_embeddings": int(cfg["rope_original"])}
    hc = LlamaConfig(hidden_size=cfg["hidden"], intermediate_size=cfg["ffn"], num_hidden_layers=cfg["layers"],
                     num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"], vocab_size=cfg["vocab"],
                     rms_norm_eps=cfg["norm_eps"], rope_theta=cfg["rope_theta"], tie_word_embeddings=cfg["tied"],
                     max_position_embeddings=max(cfg["seq"], 2 * int(cfg["rope_original"])), rope_scaling=scaling,
                     attn_implementation="eager")
    model = LlamaForCausalLM(hc).double()
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.from_numpy(dump["params"][name].astype("float64")))
    inputs = torch.from_numpy(dump["inputs"].astype("int64"))
    targets = torch.from_numpy(dump["targets"].astype("int64"))
    mask, position_ids = None, None
    if cfg["doc_mask"] and cfg["doc_restart"]:
        # position_ids packing (DataCollatorWithFlattening): each document's positions from 0
        position_ids = torch_ref.positions(inputs, cfg)
    if cfg["doc_mask"]:
        # transformers' own form of packed documents: a block-diagonal causal 4D float mask,
        # 0 where a query sees a key and the dtype's minimum elsewhere (positions continue)
        mask = torch.zeros(inputs.shape[0], 1, inputs.shape[1], inputs.shape[1], dtype=torch.float64)
        mask.masked_fill_(torch_ref.hidden_mask(inputs, cfg), torch.finfo(torch.float64).min)
    logits = model.lm_head(model.model(input_ids=inputs, attention_mask=mask, position_ids=position_ids).last_hidden_state)  # float64
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab"]), targets.reshape(-1))
    loss.backward()
    rows = [("loss", abs(dump["loss"] - loss.item()) / abs(loss.item()))]
    rows += [(n, torch_ref.rel_err(dump["grads"][n], p.grad.numpy())) for n, p in params.items()]
    if cfg["tied"]:  # HF lists the one tensor as the embedding; the dump must give it under both names
        rows.append(("lm_head.weight (tied)",
                     torch_ref.rel_err(dump["grads"]["lm_head.weight"], params["model.embed_tokens.weight"].grad.numpy())))
    worst_name, worst = max(rows, key=lambda r: r[1])
    ok = all(err <= TOL for _, err in rows)
    print(f"transformers LlamaForCausalLM{' llama3' if scaling else ''}{' tied' if cfg['tied'] else ''}"
          f"{' doc-mask' if cfg['doc_mask'] else ''}{' restart' if cfg['doc_restart'] else ''}: loss dump"
          f" {dump['loss']:.9g} vs {loss.item():.9g}; max rel err {worst:.3e} ({worst_name}), tolerance {TOL:g}:"
          f" {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
