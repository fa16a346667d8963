#!/bin/bash
# inf/NaN in one rank's gradients (the test hook WEIPIPE_INJECT_NONFINITE, src/faults/nonfinite.h):
# the step is skipped on every rank alike (the masters after it equal those before it, bit for
# bit, on every rank's chunks), the loss scale halves, training then goes on; gradients that
# stay non-finite stop every rank after --max-skipped-steps skips in a row with one clear message.
source "$(dirname "$0")/faults_lib.sh"
common=(--nranks 3 --strategy weipipe-interleave --lr-decay-style constant --timeout 10s)
for V in 1 2; do
  train "${common[@]}" --steps 1 --save "$TMP/one-$V" || fail "1 step"
  WEIPIPE_INJECT_NONFINITE=$V,1 train "${common[@]}" --steps 2 --save "$TMP/two-$V" --metrics "$TMP/m-$V.jsonl" || fail "2 steps, NaN in rank $V's gradient at the second"
  line=$("$DIFF" "$TMP/two-$V/step-2" "$TMP/one-$V/step-1" 0) || fail "the skipped step changed the masters: $line"
  grep -q '^{"step": 2, .*"grad_norm": null, "loss_scale": 65536, "skipped": true' "$TMP/m-$V.jsonl" || fail "step 2 not reported skipped: $(cat "$TMP/m-$V.jsonl")"
  WEIPIPE_INJECT_NONFINITE=$V,1 train "${common[@]}" --steps 4 --metrics "$TMP/m4-$V.jsonl" || fail "4 steps with one NaN"
  scales=$(sed -n 's/.*"loss_scale": \([^,]*\), "skipped": \([a-z]*\).*/\1 \2/p' "$TMP/m4-$V.jsonl" | tr '\n' ' ')
  [ "$scales" = "65536 false 65536 true 32768 false 32768 false " ] || fail "loss scales and skips $scales"
  echo "NaN in rank $V's gradient at step 2: skipped on every rank (masters equal the step-1 ones: $line); scales and skips: $scales"
done

t0=$(now)
WEIPIPE_INJECT_NONFINITE=2,3,-1 train "${common[@]}" --steps 100 --max-skipped-steps 5 > "$TMP/log" 2>&1
rc=$? took=$(elapsed "$t0")
[ $rc = 1 ] || { cat "$TMP/log"; fail "persistent NaN: exit $rc, expected 1"; }
# Every rank reaches the same verdict after step 8's exchange; one still waiting for that
# exchange's result when a faster rank's abort arrives says it through that rank ("... REDUCE: rank
# 1 failed: steps 4-8 ..."): the same words, relayed (seen under ASan on a loaded machine).
n=$(grep -cE '^\[rank [012]\] weipipe: error: (rank [012] step [0-9]+ action [0-9]+ REDUCE: rank [012] failed: )?steps 4-8 all had non-finite gradients and were skipped \(loss scale now 2048\): stopping after --max-skipped-steps 5' "$TMP/log")
[ "$n" = 3 ] || { cat "$TMP/log"; fail "$n of 3 ranks stopped with the message"; }
echo "NaN from step 4 on: all 3 ranks stopped after 5 skipped steps (4-8), exit 1, in ${took}s"
