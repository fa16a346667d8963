#!/usr/bin/python3
"""scripts/gpu_torch_step.py's CPU smoke path (--device cpu --tiny): every variant's whole step
(zero_grad, forward, chunked or full cross-entropy, backward, AdamW with or without fp32 masters)
runs on a tiny shape, its row is in the table and the JSON, its loss is finite and falls over the
steps on the one batch it reads, and the strongest variant is named. What the GPU run will execute
but for SDPA's CUDA backends, torch.compile and the fused AdamW (the CPU path says so per row).

    torch_step_smoke.py SOURCE_ROOT      (exit 0 pass, 1 fail, 77 without torch)
"""
import json
import math
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
try:
    import torch  # noqa: F401
except ImportError as exc:
    print(f"torch_step_smoke: skipped: no torch for {sys.executable}: {exc}")
    sys.exit(77)
sys.path.insert(0, os.path.join(root, "scripts"))
import gpu_torch_step  # noqa: E402

fail = 0


def expect(ok, what):
    global fail
    print(("ok: " if ok else "FAIL: ") + what)
    fail |= not ok


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "rows.jsonl")
    p = subprocess.run([sys.executable, os.path.join(root, "scripts", "gpu_torch_step.py"), "--device", "cpu", "--tiny",
                        "--steps", "3", "--warmup", "1", "--ce-chunk", "24", "--lr", "1e-2", "--json", out],
                       capture_output=True, text=True, timeout=120)
    print(p.stdout + p.stderr)
    expect(p.returncode == 0, f"exit {p.returncode}")
    rows = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
by_variant = {r["variant"]: r for r in rows}
expect(sorted(by_variant) == sorted(gpu_torch_step.VARIANTS), f"one row per variant: {sorted(by_variant)}")
for v, r in by_variant.items():
    expect(r["tokens_per_s"] > 0 and math.isfinite(r["loss_first"]) and r["loss_last"] < r["loss_first"],
           f"{v}: {r['tokens_per_s']:.0f} tokens/s, loss {r['loss_first']:.4f} -> {r['loss_last']:.4f} over 4 steps")
expect("strongest PyTorch at tiny s=32: " in p.stdout, "the strongest variant is named")
print("PASS" if not fail else "FAILED")
sys.exit(1 if fail else 0)
