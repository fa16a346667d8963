#!/usr/bin/env python3
"""Damaged Hugging Face directories (issue 42, item 2): each must be refused, exit 2, with one line
naming the file and the tensor (both files where two disagree), never loaded with a tensor
silently left out or taken from whichever shard came first.

    hf_damaged.py WEIPIPE DATA_SHARD

The directories are written by transformers' own save_pretrained (a small random llama: 2 layers,
h 64, 4 heads, 2 KV heads, V 256), once as model.safetensors and once sharded (max_shard_size
100KB: model.safetensors.index.json and its shards), then altered with the safetensors package.
Controls (exit 0): both as saved; the single file with model.layers.N.self_attn.rotary_emb.inv_freq
added for each layer, as older transformers saved them (the one known buffer, allowed by name).
Refused: a third layer's tensor in a 2-layer model's file; a bias; an inv_freq for a layer the
model does not have; a tensor given in two shards; a tensor moved to another shard than the
index names; an index naming a tensor its shard does not hold; a shard's tensor the index does
not list. Before this test, main ran every one of them with exit 0.
Exit 77 without transformers or safetensors.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
try:
    import hfenv

    hfenv.use_transformers()
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import load_file, save_file
except (ImportError, SystemExit) as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and safetensors into its venv)")
    sys.exit(77)

L, H, HEADS, KV, FFN, V = 2, 64, 4, 2, 128, 256
INV_FREQ = "model.layers.{}.self_attn.rotary_emb.inv_freq"


def save(path, shard_size=None):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=H, intermediate_size=FFN, num_hidden_layers=L, num_attention_heads=HEADS,
                                   num_key_value_heads=KV, vocab_size=V, max_position_embeddings=64, tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(cfg)
    kw = {"max_shard_size": shard_size} if shard_size else {}
    model.save_pretrained(path, safe_serialization=True, **kw)


def edit(path, file, add=(), drop=()):
    """Rewrites DIR/file with tensors added (name, array) and dropped (names)."""
    f = os.path.join(path, file)
    t = load_file(f)
    for name in drop:
        del t[name]
    for name, a in add:
        t[name] = a
    save_file(t, f, metadata={"format": "pt"})


def index(path):
    return json.load(open(os.path.join(path, "model.safetensors.index.json")))


def set_index(path, j):
    json.dump(j, open(os.path.join(path, "model.safetensors.index.json"), "w"), indent=2)


def shard_of(path, name):
    return index(path)["weight_map"][name]


def main():
    weipipe, shard = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    fail = 0
    with tempfile.TemporaryDirectory(prefix="wp-hf-damaged-") as tmp:
        single, sharded = os.path.join(tmp, "single"), os.path.join(tmp, "sharded")
        save(single)
        save(sharded, "100KB")
        shards = sorted(set(index(sharded)["weight_map"].values()))
        if len(shards) < 3:
            print(f"FAIL: save_pretrained wrote {shards}: wanted at least 3 shards, the cases below need them")
            return 1
        hd = H // HEADS
        inv = (1.0 / 10000.0 ** (np.arange(0, hd, 2) / hd)).astype(np.float32)  # what older transformers saved

        def run(cmd, d, name):
            save_dir = os.path.join(tmp, name + "-save")
            argv = {"train": [weipipe, "train", "--init-from", d, "--data", shard, "--steps", "1", "--quiet", "--seq-length", "16",
                              "--save", save_dir],
                    "eval": [weipipe, "eval", d, "--data", shard, "--seq-length", "16", "--quiet"]}[cmd]
            return save_dir, subprocess.run(argv, capture_output=True, text=True)

        def copy(src, name):
            d = os.path.join(tmp, name)
            shutil.copytree(src, d)
            return d

        def rnd(*shape):
            return np.random.default_rng(1).normal(0, 0.02, shape).astype(np.float32)

        # controls: as saved, and with the known buffer
        with_inv = copy(single, "inv_freq")
        edit(with_inv, "model.safetensors", add=[(INV_FREQ.format(l), inv) for l in range(L)])
        for i, (cmd, d) in enumerate((("train", single), ("eval", sharded), ("train", with_inv), ("eval", with_inv))):
            _, r = run(cmd, d, f"control{i}")
            ok = r.returncode == 0
            print(f"{'ok' if ok else 'FAIL'}: control {os.path.basename(d)} ({cmd}): exit {r.returncode} {r.stderr.strip()}")
            fail |= not ok
        if fail:
            return 1

        first = "model.layers.0.mlp.up_proj.weight"
        a = shard_of(sharded, first)
        b = next(s for s in shards if s != a)
        moved = "model.layers.0.self_attn.q_proj.weight"
        ma = shard_of(sharded, moved)
        mb = next(s for s in shards if s != ma)
        t_a = load_file(os.path.join(sharded, a))

        def dup(d):
            edit(d, b, add=[(first, t_a[first])])

        def move(d):
            t = load_file(os.path.join(d, ma))[moved]
            edit(d, ma, drop=[moved])
            edit(d, mb, add=[(moved, t)])

        def lying_index(d):
            j = index(d)
            j["weight_map"][INV_FREQ.format(0)] = a
            set_index(d, j)

        def unlisted(d):
            edit(d, b, add=[(INV_FREQ.format(1), inv)])

        cases = [
            # (name, base, how to alter it, command, words the one line must hold)
            ("third_layer", single, lambda d: edit(d, "model.safetensors", add=[("model.layers.2.mlp.up_proj.weight", rnd(FFN, H))]),
             "train", ["model.safetensors", "model.layers.2.mlp.up_proj.weight", "unexpected"]),
            ("bias", single, lambda d: edit(d, "model.safetensors", add=[("model.layers.0.self_attn.q_proj.bias", rnd(H))]),
             "eval", ["model.safetensors", "model.layers.0.self_attn.q_proj.bias", "unexpected"]),
            ("inv_freq_past_layers", single, lambda d: edit(d, "model.safetensors", add=[(INV_FREQ.format(L), inv)]),
             "train", ["model.safetensors", INV_FREQ.format(L), "unexpected"]),
            ("name_in_two_shards", sharded, dup, "train", [a, b, first]),
            ("moved_to_other_shard", sharded, move, "eval", ["model.safetensors.index.json", moved, ma, mb]),
            ("index_lists_absent", sharded, lying_index, "train", ["model.safetensors.index.json", INV_FREQ.format(0), a]),
            ("shard_tensor_unlisted", sharded, unlisted, "eval", ["model.safetensors.index.json", INV_FREQ.format(1), b]),
        ]
        for name, base, alter, cmd, words in cases:
            d = copy(base, name)
            alter(d)
            save_dir, r = run(cmd, d, name)
            lines = r.stderr.strip().splitlines()
            saved = os.path.isdir(save_dir) and any(n.startswith("step-") for n in os.listdir(save_dir))
            ok = r.returncode == 2 and len(lines) == 1 and d in lines[0] and all(w in lines[0] for w in words) and not saved
            print(f"{'ok' if ok else 'FAIL'}: {name} ({cmd}): exit {r.returncode}: {r.stderr.strip()}"
                  + ("" if ok else f" (wanted exit 2, one line naming {d} and {words})"))
            fail |= not ok
    return int(fail)


if __name__ == "__main__":
    sys.exit(main())
