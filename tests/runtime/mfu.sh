#!/bin/bash
# MFU without pacing: --peak-tflops alone gives every step's mfu in --metrics as
# model_flops_per_step / seconds / (peak x ranks), recomputed here from the same line; without
# it the CPU's measured GEMM rate is the peak (mfu a number in (0, 1]); --device-tflops paces
# only and is not what MFU is measured against.
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
echo "mfu: closed form on 1 and 2 ranks, measured CPU peak, pacing apart: $(sed -n 's/.*"mfu": \([^,]*\),.*/\1/p' "$TMP/c.jsonl" | tr '\n' ' ')"
