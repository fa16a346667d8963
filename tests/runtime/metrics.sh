#!/bin/bash
# --metrics JSON lines (docs/runtime.md): every line strict JSON (Python's json with NaN and
# Infinity refused), a first {"run": ...} line describing the run, step lines with a Unix
# timestamp, tokens seen and MFU (checked against the model's FLOPs counted here from the flags,
# independently of layout_chunk_flops), and a run whose loss and validation loss are NaN
# (--init-std 1e38 in fp32 overflows the logits) written with nulls.
source "$(dirname "$0")/runtime_lib.sh"
common=(--nranks 2 --strategy 1f1b --num-microbatches 2 --val-data "$DATA" --lr-decay-style constant)
t0=$(date +%s.%N)
train "${common[@]}" --steps 3 --eval-every 2 --peak-tflops 0.01 --metrics "$TMP/ok.jsonl" 2>/dev/null || fail "train"
train "${common[@]}" --steps 2 --eval-every 1 --precision fp32 --init-std 1e38 --metrics "$TMP/nan.jsonl" 2>/dev/null \
  || fail "train with a NaN loss"
t1=$(date +%s.%N)
/usr/bin/python3 - "$TMP/ok.jsonl" "$TMP/nan.jsonl" "$t0" "$t1" <<'PY' || fail "metrics lines"
import json, math, sys

def no_constant(name):
    raise ValueError(f"{name} is not JSON")

def lines(path):
    with open(path) as f:
        return [json.loads(l, parse_constant=no_constant) for l in f]

ok, nan = lines(sys.argv[1]), lines(sys.argv[2])
t0, t1 = float(sys.argv[3]), float(sys.argv[4])
for rows in (ok, nan):
    run = rows[0]["run"]
    assert run["ranks"] == 2 and run["micro_batches"] == 2, run
    assert run["flags"]["strategy"] == "1f1b" and run["flags"]["nranks"] == 2, run["flags"]
    assert run["commit"] and run["commit"] != "@VCS_TAG@" and run["version"], run
    assert all("run" not in r for r in rows[1:])
    times = [r["run"]["time"] if "run" in r else r["time"] for r in rows]
    assert times == sorted(times) and t0 - 1 <= times[0] and times[-1] <= t1 + 1, (t0, times, t1)

# the model's FLOPs per step: 2 per multiply-add, forward + input gradient + weight gradient of
# every matrix product (3x the forward), causal attention scores and values (forward, and twice
# that backward); per micro-batch of mb x seq tokens
f = ok[0]["run"]["flags"]
h, L, ffn, V = f["hidden-size"], f["num-layers"], f["ffn-hidden-size"], f["vocab-size"]
hd = h // f["num-attention-heads"]
kv = f["num-query-groups"] * hd
macs = L * (2 * h * h + 2 * h * kv + 3 * h * ffn) + V * h
mb, s = f["micro-batch-size"], f["seq-length"]
pairs = mb * s * (s + 1) / 2
per_mb = 6 * mb * s * macs + 3 * 4 * pairs * h * L
want = per_mb * ok[0]["run"]["micro_batches"]
assert ok[0]["run"]["model_flops_per_step"] == want, (ok[0]["run"]["model_flops_per_step"], want)
peak = 0.01e12 * 2
assert ok[0]["run"]["peak_flops"] == peak and nan[0]["run"]["peak_flops"] > 0  # --peak-tflops; else the measured CPU GEMM rate

steps = [r for r in ok if "loss" in r]
assert [r["step"] for r in steps] == [1, 2, 3]
seen = 0
for r in steps:
    seen += r["tokens"]
    assert r["tokens"] == 2 * mb * s and r["tokens_seen"] == seen, r
    mfu = want / r["seconds"] / peak
    assert abs(r["mfu"] - mfu) <= 1e-3 * mfu + 1e-9, (r["mfu"], mfu)  # seconds are written with 6 decimals
    assert isinstance(r["loss"], float) and math.isfinite(r["loss"])
    # launch-boundness figures: on the CPU the host's issue time is the work itself, measured
    # between the device timers' marks on the same clock, so never above their span (1e-6: the
    # two are printed rounded to microseconds), and both inside the step
    assert 0 < r["issue_s"] <= r["device_s"] + 1e-6 and r["device_s"] <= r["seconds"] + 1e-6, r
vals = [r for r in ok if "val_loss" in r]
assert [r["step"] for r in vals] == [2] and isinstance(vals[0]["val_loss"], float)

steps = [r for r in nan if "loss" in r]
vals = [r for r in nan if "val_loss" in r]
assert len(steps) == 2 and len(vals) == 2
assert all(r["loss"] is None and r["grad_norm"] is None and r["skipped"] is True and r["mfu"] > 0 for r in steps), steps  # mfu: against the measured CPU peak
assert all(r["val_loss"] is None for r in vals), vals
print(f"metrics: {len(ok)} + {len(nan)} lines strict JSON; model FLOPs/step {want:.0f} as counted here; "
      f"MFU {[round(r['mfu'], 3) for r in ok if 'mfu' in r]}; NaN loss and val loss written as null")
PY
echo "metrics ok"
