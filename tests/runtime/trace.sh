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
