#!/bin/bash
# --trace of a real run holds every device action and every transfer of the run, in the
# simulator's Chrome-trace format (one process per rank, compute track, a send and a receive
# track per channel, a wait track): checked by trace_check against the lists themselves, over
# threads (one file) and tcp processes (a file per rank), paced and unpaced. Under
# --device-tflops every compute span lasts at least its FLOPs / speed.
# Extra argument: TRACE_CHECK.
source "$(dirname "$0")/runtime_lib.sh"
CHECK=$5
run() { # run NAME TRAIN-ARGS...: train with a trace, then check it against the same flags
  local name=$1; shift
  train --trace "$TMP/$name.json" "$@" || fail "train $*"
  "$CHECK" "$TMP/$name.json" train --config "$CFG" --data "$DATA" "$@" || fail "$name: trace_check"
}
run interleave --nranks 4 --strategy weipipe-interleave --num-microbatches 4 --steps 2 --transport local \
  --device-tflops 0.002
run wzb1 --nranks 3 --strategy wzb1 --num-microbatches 6 --steps 2 --transport local
run 1f1b-tcp --nranks 4 --strategy 1f1b --num-microbatches 8 --steps 2 --transport tcp --device-tflops 0.004
run wzb2-tcp --nranks 2 --strategy wzb2 --num-microbatches 2 --steps 3 --transport tcp
# checkpoints: one SAVE span per shard written (steps 2 and 3), beside LOAD, ZERO, ACC, UPDATE
run save --nranks 2 --strategy weipipe-interleave --steps 3 --transport local --save "$TMP/ck" --save-every 2
grep -q '"name":"SAVE"' "$TMP/save.json" || grep -q '"name": "SAVE"' "$TMP/save.json" || fail "no SAVE span in save.json"

# One clock across ranks (ring/clock_sync.h): rank r's clock is skewed by r * 0.5 s; the offsets
# each rank estimated must remove the skew to within the residual they state, the per-rank
# files and their trace-merge must pass the causality check, and the same files put back on each
# rank's own clock (--local-clocks) must fail it: the check can fail, and the correction is what
# makes it pass.
ARGS=(--nranks 3 --strategy 1f1b --num-microbatches 6 --steps 2)
WEIPIPE_TEST_CLOCK_SKEW=0.5 run skew-tcp "${ARGS[@]}" --transport tcp
WEIPIPE_TEST_CLOCK_SKEW=0.5 run skew-local "${ARGS[@]}" --transport local
"$W" trace-merge --quiet "$TMP/merged.json" "$TMP/skew-tcp.json" "$TMP/skew-tcp.rank-1.json" "$TMP/skew-tcp.rank-2.json" \
  || fail "trace-merge"
"$CHECK" "$TMP/merged.json" train --config "$CFG" --data "$DATA" "${ARGS[@]}" || fail "merged trace: trace_check"
/usr/bin/python3 - "$TMP/merged.json" <<'PY' || fail "merged trace: offsets or process names"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
clock = {e["pid"]: e["args"] for e in ev if e["ph"] == "M" and e["name"] == "weipipe_clock"}
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert sorted(clock) == [0, 1, 2] and sorted(names) == [0, 1, 2], (clock, names)
for r, c in clock.items():
    err = abs(c["offset_s"] + 0.5 * r)  # the truth: rank 0's clock minus rank r's is -r * 0.5 s
    assert err <= c["residual_s"] + 1e-9, f"rank {r}: offset {c['offset_s']} misses -{0.5 * r} by {err} > residual {c['residual_s']}"
    assert names[r].startswith(f"rank {r} @ "), names[r]
print("offsets within residual:", {r: (c["offset_s"], c["residual_s"]) for r, c in clock.items()})
PY
"$W" trace-merge --quiet --local-clocks "$TMP/local.json" "$TMP/skew-tcp.json" "$TMP/skew-tcp.rank-1.json" \
  "$TMP/skew-tcp.rank-2.json" || fail "trace-merge --local-clocks"
"$CHECK" "$TMP/local.json" train --config "$CFG" --data "$DATA" "${ARGS[@]}" >"$TMP/local.out" 2>&1 \
  && fail "trace_check passed a trace on skewed local clocks"
grep -q "clocks disagree" "$TMP/local.out" || { cat "$TMP/local.out"; fail "trace_check failed for another reason"; }
# bad input: a rank in two files, a file that is not a trace (exit 2, no output left)
"$W" trace-merge --quiet "$TMP/bad.json" "$TMP/skew-tcp.json" "$TMP/skew-tcp.json" 2>/dev/null; [ $? = 2 ] || fail "duplicate rank"
"$W" trace-merge --quiet "$TMP/bad.json" "$CFG" 2>/dev/null; [ $? = 2 ] || fail "not a trace"
[ ! -e "$TMP/bad.json" ] || fail "a failed trace-merge left its output"
echo "trace: common clock, trace-merge and causality ok"
