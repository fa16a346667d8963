"""One FLOP count and one peak table for both sides of the whole-step comparison (issue 38):
scripts/gpu_torch_step.py (PyTorch) and scripts/gpu_check.py (weipipe's `train` runs) import
this, so a ratio of their MFUs is a ratio of their tokens/s. Only the standard library.

The count is the standard one (PaLM's appendix B, Megatron-LM's): 6 x the parameters that take
part in a matrix product x tokens (the embedding lookup is no product; the tied LM head is one),
plus causal attention's two products, QK^T and PV: 12 x layers x heads x head size x s per token
for forward and backward over the full square, halved for the causal triangle ("standard"), and
the full square beside it, as some reports count it.
"""

# The two shapes of the comparison: their Hugging Face config.json (HuggingFaceTB/SmolLM2-135M,
# meta-llama/Llama-3.2-1B). Llama 3.2's rope_scaling changes the RoPE tables only, not the work.
SHAPES = {
    "smollm2-135m": dict(hidden=576, layers=30, heads=9, kv_heads=3, ffn=1536, vocab=49152, rope_theta=100000.0,
                         norm_eps=1e-5, config="configs/smollm2-135m-shape.ini", seqs=(2048, 4096), tokens=32768),
    "llama32-1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256, rope_theta=500000.0,
                       norm_eps=1e-5, config="configs/llama32-1b-shape.ini", seqs=(2048, 4096, 8192), tokens=16384),
}
# seqs: the sequence lengths compared; tokens: b x s of one micro-batch, the default b = tokens / s.
# Sized for an H100 80 GB with room to spare (bf16 activations of about 0.8 MB per token at 135M,
# 1.8 MB at 1B, plus 12-16 bytes per parameter of weights, gradients, masters and moments, plus the
# current PyTorch variant's whole fp32 logits: 6.4 GB at 135M, 8.4 GB at 1B, twice with their
# gradient); the PyTorch script halves b on an out-of-memory error and says so.


def default_batch(shape, seq):
    return max(1, shape["tokens"] // seq)

# Dense bf16/fp16 tensor-core TFLOP/s from NVIDIA's datasheets (the sparse figures halved), matched
# by a piece of the device's name, the most specific first: src/runtime/peak.c's table.
PEAKS = [("GH200", 989.0), ("H200", 989.0), ("H100 NVL", 835.0), ("H100 PCIe", 756.0), ("H100", 989.0),
         ("H800", 989.0), ("B200", 2250.0), ("A100", 312.0), ("A800", 312.0), ("L40S", 362.0), ("L4", 121.0),
         ("A10", 125.0), ("RTX 4090", 165.0)]


def peak_tflops(name):
    """The dense bf16 peak of a device by its name; 0.0 when the table does not know it."""
    for part, tflops in PEAKS:
        if part in name:
            return tflops
    return 0.0


def matmul_params(shape):
    """Parameters that take part in a matrix product, per step of one token: q, k, v, o, gate,
    up, down in every layer and the LM head (counted once even when tied to the embedding)."""
    h, hd = shape["hidden"], shape["hidden"] // shape["heads"]
    attn = h * (shape["heads"] + 2 * shape["kv_heads"]) * hd + shape["heads"] * hd * h
    return shape["layers"] * (attn + 3 * h * shape["ffn"]) + shape["vocab"] * h


def flops_per_token(shape, seq, causal=True):
    """Forward + backward FLOPs per trained token at sequence length seq."""
    hd = shape["hidden"] // shape["heads"]
    attn = 12.0 * shape["layers"] * shape["heads"] * hd * seq
    return 6.0 * matmul_params(shape) + (attn / 2 if causal else attn)


def mfu(shape, seq, tokens_per_s, peak):
    """(MFU with causal attention halved, MFU over the full square) as fractions; None without a peak."""
    if not peak or not tokens_per_s:
        return None, None
    return (tokens_per_s * flops_per_token(shape, seq, True) / (peak * 1e12),
            tokens_per_s * flops_per_token(shape, seq, False) / (peak * 1e12))
