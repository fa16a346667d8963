#!/bin/bash
# train's command-line contract: bad input exits 2 naming the flag; a predicted peak above
# --device-memory is refused with 2; --trace writes one span per compute action of the run;
# SIGTERM saves a checkpoint at the next step boundary and exits 0, and the run resumes from it.
source "$(dirname "$0")/runtime_lib.sh"
expect2() { # expect2 WHAT-IN-MESSAGE ARGS...
  local want=$1; shift
  train "$@" 2> "$TMP/err"; local rc=$?
  [ $rc = 2 ] || fail "train $* exited $rc, expected 2: $(cat "$TMP/err")"
  grep -q -- "$want" "$TMP/err" || fail "train $*: message does not name $want: $(cat "$TMP/err")"
}
expect2 --strategy --strategy bogus
expect2 --steps --steps 0
expect2 --device-tflops --device-tflops -1
expect2 --device-memory --nranks 2 --transport local --device-memory 64K
expect2 --num-microbatches --nranks 2 --strategy weipipe-interleave --num-microbatches 3 --transport local
echo "bad input: exit 2 naming the flag"

train --nranks 2 --strategy wzb1 --num-microbatches 4 --steps 2 --transport local --trace "$TMP/t.json" || fail "trace run"
for op in F B W; do # 2 steps x 4 micro-batches x 2 chunks of each op (wzb1 splits B and W)
  n=$(grep -o "\"name\": *\"$op([0-9]*,[0-9]*)" "$TMP/t.json" | wc -l)
  [ "$n" = 16 ] || fail "trace holds $n $op spans, expected 16"
done
echo "trace: 16 spans each of F, B and W"

"$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --nranks 2 --strategy weipipe-interleave \
  --transport local --steps 1000000 --save "$TMP/ck" &
pid=$!
trap 'kill $pid 2> /dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 200); do [ -e "$TMP/ck" ] && break; sleep 0.05; done # the run is training
sleep 2
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 0 ] || fail "SIGTERM: exit $rc, expected 0"
latest=$(cat "$TMP/ck/latest") || fail "SIGTERM: no checkpoint written"
k=${latest#step-}
train --nranks 2 --strategy weipipe-interleave --transport local --steps $((k + 1)) --save "$TMP/ck" --resume auto \
  --metrics "$TMP/m.jsonl" || fail "resume after SIGTERM"
grep -q "\"step\": $((k + 1))," "$TMP/m.jsonl" || fail "resumed run did not run step $((k + 1))"
echo "SIGTERM: saved $latest, exit 0, resumed at step $((k + 1))"
