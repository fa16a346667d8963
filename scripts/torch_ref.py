#!/usr/bin/python3
"""Independent PyTorch reference for weipipe's model: checks a `weipipe check --out DIR` dump.

Written from the Hugging Face LlamaForCausalLM conventions, not from weipipe's C code, so
that the two implementations share nothing but the definition of the model:

    x = embed_tokens[inputs]
    per block: x += o_proj(attn(RoPE(q_proj(n)), RoPE(k_proj(n)), v_proj(n))), n = RMSNorm(x)
               x += down_proj(silu(gate_proj(n)) * up_proj(n)),                 n = RMSNorm(x)
    loss = mean cross-entropy(lm_head(RMSNorm(x)), targets)

Autograd gives d(mean loss)/d(param) in float64 (default); every tensor of the dump's
gradient is compared by ||c - t|| / ||t|| (c: the dump, t: torch) and the loss by
|c - t| / |t|. Exit 0 when every relative error is <= --tol (1e-4 by default: fp32
arithmetic in the C code leaves ~1e-6 on these model sizes, a wrong formula leaves >1e-2),
1 when one is larger, 2 when the dump is malformed, 77 when torch cannot be imported.

Run with Debian's /usr/bin/python3 (torch 1.13; it has no scaled_dot_product_attention, so
attention is written out).
"""
import argparse
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as exc:  # the caller (a test) reads 77 as "skipped"
    print(f"torch_ref: skipped: cannot import torch/numpy with {sys.executable}: {exc}")
    sys.exit(77)

EXIT_OK, EXIT_MISMATCH, EXIT_BAD_INPUT = 0, 1, 2


class DumpError(Exception):
    """A dump that cannot be read; the message names the file and the field."""


# ----------------------------------------------------------------------------- config

def read_ini(path):
    """INI `key = value` lines; [section] headers and # or ; comments are ignored."""
    values = {}
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, raw in enumerate(f, 1):
                line = raw.strip()
                if not line or line[0] in "#;" or line.startswith("["):
                    continue
                if "=" not in line:
                    raise DumpError(f"{path}:{lineno}: expected 'key = value', got '{line}'")
                key, value = line.split("=", 1)
                values[key.strip()] = value.strip()
    except OSError as exc:
        raise DumpError(f"{path}: {exc.strerror}") from exc
    return values


def default_ffn(hidden):
    """--ffn-hidden-size 0: 8h/3 rounded up to a multiple of 32 (docs/model.md)."""
    return (8 * hidden // 3 + 31) // 32 * 32


def model_config(values, where):
    """The model shape from INI values (keys spelled as weipipe's flags)."""
    def get(key, kind, default=None):
        if key not in values:
            if default is None:
                raise DumpError(f"{where}: missing key '{key}'")
            return default
        try:
            return kind(values[key])
        except ValueError as exc:
            raise DumpError(f"{where}: {key} = '{values[key]}' is not a {kind.__name__}") from exc

    cfg = {
        "layers": get("num-layers", int),
        "hidden": get("hidden-size", int),
        "ffn": get("ffn-hidden-size", int, 0),
        "heads": get("num-attention-heads", int),
        "kv_heads": get("num-query-groups", int, 0),
        "seq": get("seq-length", int),
        "batch": get("micro-batch-size", int),
        "vocab": get("vocab-size", int),
        "rope_theta": get("rope-theta", float, 10000.0),
        "norm_eps": get("norm-eps", float, 1e-5),
        # rope_scaling type llama3 (0: none), weipipe's --rope-* flags
        "rope_factor": get("rope-scaling-factor", float, 0.0),
        "rope_low": get("rope-low-freq-factor", float, 1.0),
        "rope_high": get("rope-high-freq-factor", float, 4.0),
        "rope_original": get("rope-original-max-positions", float, 8192.0),
        # tie_word_embeddings: the head is the embedding, one tensor
        "tied": str(values.get("tie-word-embeddings", "false")).lower() in ("true", "1", "yes"),
        # --doc-mask: attention stays inside documents, each starting at a doc-boundary-id token
        "doc_mask": str(values.get("doc-mask", "false")).lower() in ("true", "1", "yes"),
        "doc_boundary": get("doc-boundary-id", int, -1),
        # --doc-positions restart: RoPE positions count from each document's start
        "doc_restart": str(values.get("doc-positions", "continue")) == "restart",
    }
    if cfg["ffn"] == 0:
        cfg["ffn"] = default_ffn(cfg["hidden"])
    if cfg["kv_heads"] == 0:
        cfg["kv_heads"] = cfg["heads"]
    for key in ("layers", "hidden", "ffn", "heads", "kv_heads", "seq", "batch", "vocab"):
        if cfg[key] <= 0:
            raise DumpError(f"{where}: {key} = {cfg[key]} must be positive")
    if cfg["hidden"] % cfg["heads"] or cfg["heads"] % cfg["kv_heads"]:
        raise DumpError(f"{where}: hidden-size {cfg['hidden']}, num-attention-heads {cfg['heads']}"
                        f" and num-query-groups {cfg['kv_heads']} do not divide")
    cfg["head_dim"] = cfg["hidden"] // cfg["heads"]
    if cfg["head_dim"] % 2:
        raise DumpError(f"{where}: head dim {cfg['head_dim']} is odd; RoPE pairs halves")
    return cfg


def hf_shapes(cfg):
    """Every parameter of LlamaForCausalLM: name -> shape, in a stable order."""
    h, f, hd = cfg["hidden"], cfg["ffn"], cfg["head_dim"]
    q, kv = cfg["heads"] * hd, cfg["kv_heads"] * hd
    shapes = {"model.embed_tokens.weight": (cfg["vocab"], h)}
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (q, h)
        shapes[p + "self_attn.k_proj.weight"] = (kv, h)
        shapes[p + "self_attn.v_proj.weight"] = (kv, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, q)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (f, h)
        shapes[p + "mlp.up_proj.weight"] = (f, h)
        shapes[p + "mlp.down_proj.weight"] = (h, f)
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (cfg["vocab"], h)
    return shapes


# ----------------------------------------------------------------------------- the model

def rms_norm(x, weight, eps):
    """HF LlamaRMSNorm: normalise in (at least) fp32, then scale in the input dtype."""
    compute = torch.promote_types(x.dtype, torch.float32)
    xc = x.to(compute)
    xc = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xc.to(x.dtype)


def llama3_inv_freq(inv_freq, factor, low, high, original):
    """transformers' _compute_llama3_parameters (modeling_rope_utils.py), in float64."""
    low_wavelen, high_wavelen = original / low, original / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_tables(seq, head_dim, theta, dtype, cfg=None):
    """cos, sin [seq, head_dim]: angle pos * theta^(-2i/hd), the i < hd/2 half repeated twice;
    with cfg's rope_factor > 0 the frequencies are scaled as Llama 3.x's rope_scaling llama3."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if cfg is not None and cfg.get("rope_factor", 0.0) > 0:
        inv_freq = llama3_inv_freq(inv_freq, cfg["rope_factor"], cfg["rope_low"], cfg["rope_high"], cfg["rope_original"])
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def attention(n, p, cfg, cos, sin, causal_mask):
    """Grouped-query causal attention of one block; n [b, s, h] -> [b, s, h]."""
    b, s, _ = n.shape
    nh, nkv, hd = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    q = F.linear(n, p["self_attn.q_proj.weight"]).view(b, s, nh, hd).transpose(1, 2)
    k = F.linear(n, p["self_attn.k_proj.weight"]).view(b, s, nkv, hd).transpose(1, 2)
    v = F.linear(n, p["self_attn.v_proj.weight"]).view(b, s, nkv, hd).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    # HF repeat_kv: query head j reads kv head j // (nh / nkv).
    k = k.repeat_interleave(nh // nkv, dim=1)
    v = v.repeat_interleave(nh // nkv, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)            # [b, nh, s, s]
    probs = torch.softmax(scores.masked_fill(causal_mask, float("-inf")), dim=-1)
    out = (probs @ v).transpose(1, 2).reshape(b, s, nh * hd)      # [b, s, nh*hd]
    return F.linear(out, p["self_attn.o_proj.weight"])


def mlp(n, p):
    gate = F.linear(n, p["mlp.gate_proj.weight"])
    up = F.linear(n, p["mlp.up_proj.weight"])
    return F.linear(F.silu(gate) * up, p["mlp.down_proj.weight"])


def doc_starts(inputs, cfg):
    """[b, s]: where each token's document starts (the last boundary token at or before it, else 0)."""
    b, s = inputs.shape
    pos = torch.arange(s).expand(b, s)
    starts = torch.where(inputs == cfg["doc_boundary"], pos, torch.zeros_like(pos))
    return torch.cummax(starts, dim=1).values


def positions(inputs, cfg):
    """[b, s] RoPE positions: 0.. through the sequence, or with --doc-mask --doc-positions restart
    each token's offset in its document (transformers' position_ids packing)."""
    b, s = inputs.shape
    pos = torch.arange(s).expand(b, s)
    return pos - doc_starts(inputs, cfg) if cfg["doc_mask"] and cfg.get("doc_restart") else pos


def hidden_mask(inputs, cfg):
    """True where query i may not see key j, [b, 1, s, s]: above the diagonal and, with
    --doc-mask, before the start of i's document (the last boundary token at or before i)."""
    b, s = inputs.shape
    causal = torch.ones(s, s, dtype=torch.bool).triu(1).expand(b, 1, s, s)
    if not cfg["doc_mask"]:
        return causal
    pos = torch.arange(s).expand(b, s)
    lo = doc_starts(inputs, cfg)                                     # [b, s]: document start of each query
    return causal | (pos.view(b, 1, 1, s) < lo.view(b, 1, s, 1))


def llama_loss(params, cfg, inputs, targets):
    """Mean next-token cross-entropy of LlamaForCausalLM; params: HF name -> tensor."""
    b, s = inputs.shape
    dtype = params["lm_head.weight"].dtype
    cos, sin = rope_tables(s, cfg["head_dim"], cfg["rope_theta"], dtype, cfg)
    at = positions(inputs, cfg)                                    # [b, s]
    cos, sin = cos[at].unsqueeze(1), sin[at].unsqueeze(1)          # [b, 1, s, hd]: broadcast over heads
    causal_mask = hidden_mask(inputs, cfg)                         # [b, 1, s, s]
    eps = cfg["norm_eps"]
    x = params["model.embed_tokens.weight"][inputs]                # [b, s, h]
    for i in range(cfg["layers"]):
        p = {name[len(f"model.layers.{i}."):]: t for name, t in params.items()
             if name.startswith(f"model.layers.{i}.")}
        x = x + attention(rms_norm(x, p["input_layernorm.weight"], eps), p, cfg, cos, sin, causal_mask)
        x = x + mlp(rms_norm(x, p["post_attention_layernorm.weight"], eps), p)
    logits = F.linear(rms_norm(x, params["model.norm.weight"], eps), params["lm_head.weight"])
    return F.cross_entropy(logits.reshape(b * s, -1), targets.reshape(b * s))


# ----------------------------------------------------------------------------- the dump

def read_array(path, dtype, count):
    try:
        data = np.fromfile(path, dtype=dtype)
    except OSError as exc:
        raise DumpError(f"{path}: {exc.strerror}") from exc
    if count is not None and data.size != count:
        raise DumpError(f"{path}: {data.size} elements, expected {count}")
    return data


def read_tensor_table(path, shapes):
    """tensors.tsv -> name -> (offset, numel); checks every HF tensor is there with its shape."""
    table = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise DumpError(f"{path}: {exc.strerror}") from exc
    for lineno, line in enumerate(lines, 1):
        fields = line.split("\t")
        if not line.strip() or line.startswith("#"):
            continue
        if len(fields) != 4:
            raise DumpError(f"{path}:{lineno}: expected name, rows, cols, offset")
        name = fields[0]
        try:
            rows, cols, offset = int(fields[1]), int(fields[2]), int(fields[3])
        except ValueError:
            if lineno == 1:
                continue  # a header line
            raise DumpError(f"{path}:{lineno}: rows, cols and offset must be integers") from None
        if name not in shapes:
            raise DumpError(f"{path}:{lineno}: '{name}' is not a parameter of this model")
        if name in table:
            raise DumpError(f"{path}:{lineno}: '{name}' listed twice")
        want = shapes[name]
        got = (rows,) if len(want) == 1 and cols == 1 else (rows, cols)
        if got != want:
            raise DumpError(f"{path}:{lineno}: '{name}' is {rows}x{cols}, expected {want}")
        table[name] = (offset, rows * cols)
    missing = [n for n in shapes if n not in table]
    if missing:
        raise DumpError(f"{path}: missing {len(missing)} tensors, first '{missing[0]}'")
    return table


def read_dump(dump_dir):
    cfg = model_config(read_ini(os.path.join(dump_dir, "config.ini")),
                       os.path.join(dump_dir, "config.ini"))
    shapes = hf_shapes(cfg)
    table = read_tensor_table(os.path.join(dump_dir, "tensors.tsv"), shapes)
    numel = max(off + n for off, n in table.values())
    flat_params = read_array(os.path.join(dump_dir, "params.bin"), "<f4", None)
    flat_grads = read_array(os.path.join(dump_dir, "grads.bin"), "<f4", flat_params.size)
    if flat_params.size < numel:
        raise DumpError(f"{dump_dir}/params.bin: {flat_params.size} floats, tensors.tsv needs {numel}")
    tokens = cfg["batch"] * cfg["seq"]
    inputs = read_array(os.path.join(dump_dir, "inputs.bin"), "<i4", tokens)
    targets = read_array(os.path.join(dump_dir, "targets.bin"), "<i4", tokens)
    for name, arr in (("inputs.bin", inputs), ("targets.bin", targets)):
        if arr.min() < 0 or arr.max() >= cfg["vocab"]:
            raise DumpError(f"{dump_dir}/{name}: token ids outside [0, {cfg['vocab']})")
    try:
        with open(os.path.join(dump_dir, "loss.txt"), encoding="utf-8") as f:
            loss = float(f.read().split()[0])
    except (OSError, ValueError, IndexError) as exc:
        raise DumpError(f"{dump_dir}/loss.txt: no loss value ({exc})") from exc

    def split(flat):
        return {name: flat[off:off + n].reshape(shapes[name]) for name, (off, n) in table.items()}

    return {"cfg": cfg, "params": split(flat_params), "grads": split(flat_grads),
            "inputs": inputs.reshape(cfg["batch"], cfg["seq"]),
            "targets": targets.reshape(cfg["batch"], cfg["seq"]), "loss": loss}


# ----------------------------------------------------------------------------- comparison

def rel_err(got, want):
    """||got - want|| / ||want|| in float64; a zero reference only matches zeros."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    den = np.linalg.norm(want)
    num = np.linalg.norm(got - want)
    if not np.isfinite(num):
        return math.inf
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return float(num / den)


def torch_loss_and_grads(dump, dtype):
    params = {name: torch.tensor(arr, dtype=dtype, requires_grad=True)
              for name, arr in dump["params"].items()}
    if dump["cfg"]["tied"]:
        # one leaf for both uses: its .grad is the sum, reported under both names
        if not np.array_equal(dump["params"]["lm_head.weight"], dump["params"]["model.embed_tokens.weight"]):
            raise DumpError("tie-word-embeddings: the dump's lm_head.weight differs from model.embed_tokens.weight")
        params["lm_head.weight"] = params["model.embed_tokens.weight"]
    inputs = torch.from_numpy(dump["inputs"].astype(np.int64))
    targets = torch.from_numpy(dump["targets"].astype(np.int64))
    loss = llama_loss(params, dump["cfg"], inputs, targets)
    loss.backward()
    return loss.item(), {name: t.grad.numpy() for name, t in params.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump_dir", help="directory written by `weipipe check --out DIR`")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                    help="torch arithmetic (default float64: the reference's own error is negligible)")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="largest accepted relative error (default 1e-4, meant for fp32 dumps)")
    args = ap.parse_args()

    try:
        dump = read_dump(args.dump_dir)
    except DumpError as exc:
        print(f"torch_ref: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    cfg = dump["cfg"]
    try:
        t_loss, t_grads = torch_loss_and_grads(dump, getattr(torch, args.dtype))
    except DumpError as exc:
        print(f"torch_ref: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    rows = [("loss", abs(dump["loss"] - t_loss) / abs(t_loss) if t_loss else math.inf)]
    rows += [(name, rel_err(dump["grads"][name], t_grads[name])) for name in dump["grads"]]
    width = max(len(name) for name, _ in rows)
    print(f"model: L={cfg['layers']} h={cfg['hidden']} ffn={cfg['ffn']} heads={cfg['heads']}"
          f" kv_heads={cfg['kv_heads']} s={cfg['seq']} b={cfg['batch']} V={cfg['vocab']}"
          f"; torch {torch.__version__} {args.dtype}")
    print(f"loss: dump {dump['loss']:.9g}  torch {t_loss:.9g}")
    print(f"{'tensor':<{width}}  rel err (||dump - torch|| / ||torch||)")
    for name, err in rows:
        print(f"{name:<{width}}  {err:.3e}{'  FAIL' if not err <= args.tol else ''}")
    worst_name, worst = max(rows, key=lambda r: r[1] if not math.isnan(r[1]) else math.inf)
    verdict = "PASS" if all(err <= args.tol for _, err in rows) else "FAIL"
    print(f"max rel err {worst:.3e} ({worst_name}); tolerance {args.tol:g}: {verdict}")
    return EXIT_OK if verdict == "PASS" else EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(main())
