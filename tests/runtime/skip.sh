#!/bin/bash
# Mixed precision with an absurd initial loss scale: fp16 gradients overflow, every rank skips
# the step together (global decision after REDUCE), the scale halves each time, and the masters
# stay bit-identical to the initial ones (compared with a run at lr 0); once the scale fits, the
# step is taken. The metrics stay valid JSON (a non-finite norm is null).
source "$(dirname "$0")/runtime_lib.sh"
common=(--nranks 2 --strategy weipipe-interleave --transport local --steps 3)
train "${common[@]}" --loss-scale 1e30 --metrics "$TMP/m.jsonl" --save "$TMP/skip" || fail "overflowing run"
train "${common[@]}" --lr 0 --min-lr 0 --save "$TMP/still" || fail "lr 0 run"
line=$("$DIFF" "$TMP/skip/step-3" "$TMP/still/step-3" 0) || fail "skipped steps changed the masters: $line"
echo "3 skipped steps: masters unchanged ($line)"
n=$(grep -c '"grad_norm": null, "loss_scale": [0-9]*, "skipped": true' "$TMP/m.jsonl")
[ "$n" = 3 ] || fail "$n of 3 steps reported as skipped with a null norm: $(cat "$TMP/m.jsonl")"
scales=$(sed -n 's/.*"loss_scale": \([^,]*\),.*/\1/p' "$TMP/m.jsonl" | tr '\n' ' ')
[ "$scales" = "16777216 8388608 4194304 " ] || fail "loss scales $scales, expected halving from 2^24"
train "${common[@]}" --steps 6 --loss-scale 1e30 --resume auto --save "$TMP/skip" --metrics "$TMP/m2.jsonl" || fail "resumed"
grep -q '"skipped": false' "$TMP/m2.jsonl" || fail "no step was taken after the scale shrank: $(cat "$TMP/m2.jsonl")"
echo "loss scales $scales; a later step is taken once the scale fits"
