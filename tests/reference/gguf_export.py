#!/usr/bin/env python3
"""`weipipe export --format gguf` read back by llama.cpp's gguf package (GGUFReader) and by
transformers' GGUF loader: the same logits as the Hugging Face export of the same checkpoint.

    gguf_export.py WEIPIPE DATA_SHARD

A small GQA model (2 layers, h 64, 4 heads, 2 KV heads, V 256) trains 2 steps; it is exported
as safetensors and as GGUF at f32, f16 and bf16. GGUFReader must find general.architecture llama,
the llama.* hyperparameters and every tensor in the dtype asked; transformers' LlamaForCausalLM
from the GGUF (Q/K un-permuted by transformers' own reverse_permute) must give the safetensors
export's logits: exactly at f32, within the dtype's rounding of the weights at f16/bf16 (the
safetensors export at the same --precision is the reference then). Exit 77 without the venv.
"""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
try:
    import hfenv

    hfenv.use_transformers()
    import numpy as np
    import torch
    import gguf
    import gguf.quants
    from transformers import AutoModelForCausalLM, LlamaForCausalLM
except (ImportError, SystemExit) as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and gguf into its venv)")
    sys.exit(77)

MODEL = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--num-query-groups", "2",
         "--ffn-hidden-size", "96", "--vocab-size", "256", "--seq-length", "32"]


def patch_bf16():
    """transformers 4.44 reads F32, F16 and some quants; BF16 through gguf-py's own dequantization."""
    import transformers.modeling_gguf_pytorch_utils as mgu

    orig = mgu.load_dequant_gguf_tensor

    def load(shape, ggml_type, data, n_bytes):
        if ggml_type == gguf.GGMLQuantizationType.BF16:
            return gguf.quants.dequantize(data, gguf.GGMLQuantizationType.BF16).reshape(shape[::-1])
        return orig(shape, ggml_type, data, n_bytes)

    mgu.load_dequant_gguf_tensor = load


def run(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def main():
    weipipe, shard = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    patch_bf16()
    fail = 0
    ids = torch.tensor([[(i * 37 + 11) % 256 for i in range(24)]])
    with tempfile.TemporaryDirectory(prefix="wp-gguf-out-") as tmp:
        ck = os.path.join(tmp, "ck")
        run(weipipe, "train", "--data", shard, "--steps", "2", "--save", ck, "--precision", "fp32", "--quiet", *MODEL)
        for prec, gtype, tol in [("fp32", "F32", 0.0), ("mixed", "F16", 0.0), ("bf16", "BF16", 0.0)]:
            hf, gg = os.path.join(tmp, "hf-" + prec), os.path.join(tmp, prec + ".gguf")
            run(weipipe, "export", ck, hf, "--precision", prec, "--quiet")
            run(weipipe, "export", ck, gg, "--format", "gguf", "--precision", prec, "--quiet")
            if os.path.exists(gg + ".tmp"):
                print(f"FAIL: {gg}.tmp left behind")
                fail = 1
            r = gguf.GGUFReader(gg)
            arch = r.fields["general.architecture"].contents()
            layers = r.fields["llama.block_count"].contents()
            kvh = r.fields["llama.attention.head_count_kv"].contents()
            types = {t.tensor_type.name for t in r.tensors}
            ok = arch == "llama" and layers == 2 and kvh == 2 and types <= {gtype, "F32"} and len(r.tensors) == 2 + 9 * 2 + 1
            print(f"{prec}: GGUFReader: {arch}, {layers} layers, {kvh} KV heads, {len(r.tensors)} tensors of {sorted(types)}")
            fail |= not ok
            ref = LlamaForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
            mine = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=os.path.basename(gg), torch_dtype=torch.float32).eval()
            with torch.no_grad():
                a, b = ref(ids).logits, mine(ids).logits
            diff = float((a - b).abs().max())
            print(f"{prec}: logits GGUF vs safetensors export: max |diff| {diff:g}")
            fail |= not diff <= tol
    return int(fail)


if __name__ == "__main__":
    sys.exit(main())
