#!/bin/bash
# scripts/plot_metrics.py on a real metrics file of train (run line, validation lines, a skipped
# step with null values), headless (matplotlib's Agg): it writes a PNG with the panels the file
# has, on each x axis. Skipped (77) when matplotlib is not installed.
# Extra argument: PLOT_METRICS (the script).
source "$(dirname "$0")/runtime_lib.sh"
PLOT=$5
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || { echo "matplotlib not installed: skipped"; exit 77; }
common=(--nranks 2 --strategy 1f1b --num-microbatches 2 --val-data "$DATA" --eval-every 2 --device-tflops 0.01)
train "${common[@]}" --steps 4 --metrics "$TMP/m.jsonl" 2>/dev/null || fail "train"
WEIPIPE_INJECT_NONFINITE=1,1 train "${common[@]}" --steps 4 --metrics "$TMP/skip.jsonl" 2>/dev/null || fail "train, a skipped step"
grep -q '"grad_norm": null' "$TMP/skip.jsonl" || fail "no null in $TMP/skip.jsonl"
for x in step tokens_seen time; do
  MPLBACKEND=Agg /usr/bin/python3 "$PLOT" "$TMP/m.jsonl" "$TMP/skip.jsonl" --x $x -o "$TMP/$x.png" >"$TMP/out" 2>&1 \
    || { cat "$TMP/out"; fail "plot_metrics --x $x"; }
  grep -q "skipped" "$TMP/out" && { cat "$TMP/out"; fail "plot_metrics skipped a line train wrote"; }
  grep -q "panels loss, grad_norm, lr, tokens_per_s, mfu -> " "$TMP/out" || { cat "$TMP/out"; fail "panels"; }
  [ "$(head -c 8 "$TMP/$x.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$x.png is not a PNG"
done
# run as a program it finds Debian's matplotlib (#!/usr/bin/python3, not a venv's python3 on PATH)
[ -x "$PLOT" ] || fail "$PLOT is not executable"
MPLBACKEND=Agg "$PLOT" "$TMP/m.jsonl" -o "$TMP/direct.png" >"$TMP/direct" 2>&1 || { cat "$TMP/direct"; fail "$PLOT as a program"; }
# a python without matplotlib (-S: no site packages) is named in the refusal
/usr/bin/python3 -S "$PLOT" "$TMP/m.jsonl" -o "$TMP/none.png" >"$TMP/none" 2>&1 && fail "plot_metrics without matplotlib succeeded"
grep -q "/usr/bin/python3 has no matplotlib" "$TMP/none" || { cat "$TMP/none"; fail "the refusal does not name the python"; }
echo "plot_metrics: $(cat "$TMP/out")"
