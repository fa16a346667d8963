#!/bin/bash
# MFU without pacing: --peak-tflops alone gives every step's mfu in --metrics as
# model_flops_per_step / seconds / (peak x ranks), recomputed here from the same line; without
# it the CPU's measured GEMM rate is the peak (mfu a number in (0, 1]); --device-tflops paces
# only and is not what MFU is measured against. With --doc-mask the step's FLOPs charge attention
# for the pairs the documents keep: the masked run's model_flops_per_step falls short of the
# unmasked one's by exactly 12 b M s(s+1)/2 nh hd L (1 - share), share measured here in Python
# on the shard's first 64 windows (each line of the fortunes a document, boundary 10).
source "$(dirname "$0")/runtime_lib.sh"
check() { # FILE PEAK_TFLOPS|"" : every step line's mfu against the closed form
  awk -v peak="$2" -v n="$3" '
    /"run"/ { if (match($0, /"model_flops_per_step": [^,]*/)) flops = substr($0, RSTART + 24, RLENGTH - 24) + 0
              if (match($0, /"peak_flops": [^,]*/)) pf = substr($0, RSTART + 14, RLENGTH - 14); next }
    /"loss"/ { steps++
      match($0, /"seconds": [^,]*/); s = substr($0, RSTART + 11, RLENGTH - 11) + 0
      match($0, /"mfu": [^,]*/); m = substr($0, RSTART + 7, RLENGTH - 7)
      if (m == "null") { print "mfu null at step " steps; bad = 1; next }
      if (peak != "") { want = flops / s / (peak * 1e12 * n); d = m - want; if (d < 0) d = -d
        if (d > 1e-3 * want) { print "step " steps ": mfu " m ", want " want; bad = 1 } }
      else if (!(m > 0 && m <= 1)) { print "step " steps ": mfu " m " not in (0, 1]"; bad = 1 } }
    END { if (!steps || !flops) { print "no steps or no model_flops_per_step"; bad = 1 }; exit bad }' "$1"
}
"$W" train --config "$CFG" --data "$DATA" --threads 1 --steps 3 --peak-tflops 0.002 --metrics "$TMP/a.jsonl" 2>"$TMP/a.err" ||
  fail "--peak-tflops run" # not --quiet: the progress line
check "$TMP/a.jsonl" 0.002 1 || fail "--peak-tflops 0.002: mfu differs from flops / s / peak"
grep -q "MFU [0-9.]*%" "$TMP/a.err" || { cat "$TMP/a.err"; fail "no MFU on the console"; }
grep -q '"peak_flops": 2000000000' "$TMP/a.jsonl" || fail "run line: peak_flops is not 2e9"
train --steps 3 --nranks 2 --transport local --peak-tflops 0.002 --metrics "$TMP/b.jsonl" 2>/dev/null || fail "2 ranks"
check "$TMP/b.jsonl" 0.002 2 || fail "two ranks: mfu against 2 x the peak"
"$W" train --config "$CFG" --data "$DATA" --threads 1 --steps 2 --metrics "$TMP/c.jsonl" 2>"$TMP/c.err" ||
  fail "run without --peak-tflops"
check "$TMP/c.jsonl" "" 1 || fail "measured CPU peak: mfu"
grep -q "measured GEMM" "$TMP/c.err" || { cat "$TMP/c.err"; fail "the console does not say where the peak came from"; }
# pacing is not the peak: --device-tflops with --peak-tflops, mfu still against --peak-tflops
train --steps 2 --device-tflops 0.5 --peak-tflops 0.002 --metrics "$TMP/d.jsonl" 2>/dev/null || fail "paced run"
check "$TMP/d.jsonl" 0.002 1 || fail "--device-tflops changed what mfu is measured against"
train --steps 1 --num-microbatches 2 --metrics "$TMP/u.jsonl" 2>/dev/null || fail "unmasked run"
train --steps 1 --num-microbatches 2 --doc-mask --doc-boundary-id 10 --metrics "$TMP/m.jsonl" 2>/dev/null || fail "masked run"
flops() { sed -n 's/.*"model_flops_per_step": \([^,]*\),.*/\1/p' "$1" | head -n 1; }
python3 - "$DATA" "$(flops "$TMP/u.jsonl")" "$(flops "$TMP/m.jsonl")" <<'PY' || fail "masked model_flops_per_step"
import array
import sys
tok = array.array("H", open(sys.argv[1], "rb").read()[1024:])  # version 1: uint16 after 256 int32
s, b, M, nh, hd, L = 32, 2, 2, 4, 16, 4  # configs/tiny.ini
causal, share, n = s * (s + 1) / 2, 0.0, min(64, (len(tok) - 1) // s)
for i in range(n):
    w, lo, pairs = tok[i * s:i * s + s], 0, 0
    for t in range(s):
        if t > 0 and w[t] == 10:
            lo = t
        pairs += t - lo + 1
    share += pairs / causal / n
unmasked, masked = float(sys.argv[2]), float(sys.argv[3])
want = 12 * b * M * causal * nh * hd * L * (1 - share)
print(f"--doc-mask: attention share {share:.6f} over {n} windows; FLOPs per step {masked:.6g}, unmasked {unmasked:.6g},"
      f" short by {unmasked - masked:.6g} (closed form {want:.6g})")
sys.exit(0 if 0 < share < 0.9 and abs((unmasked - masked) - want) <= 1e-9 * unmasked else 1)
PY
echo "mfu: closed form on 1 and 2 ranks, measured CPU peak, pacing apart: $(sed -n 's/.*"mfu": \([^,]*\),.*/\1/p' "$TMP/c.jsonl" | tr '\n' ' ')"
