#!/bin/bash
# train --tensorboard (docs/runtime.md): the event files read back with TensorBoard's own reader
# (tb_check.py, PyPI tensorboard from setup.sh's venv; 77 without it) and every scalar compared
# with the --metrics file of the same runs: 2 ranks over --transport local with validation every
# 2 steps, 1 rank with validation every step, a run whose losses are NaN, and a resume from step 3 of a run that went on to
# step 5 (two files; TensorBoard must show the resumed run's steps 4..6, not the first run's 4
# and 5). A --tensorboard that is a file exits 2 naming it.
source "$(dirname "$0")/runtime_lib.sh"
CHECK="$(dirname "$0")/tb_check.py"
check() { /usr/bin/python3 "$CHECK" "$@"; rc=$?; [ $rc -eq 77 ] && { echo "skipped: no tensorboard module"; exit 77; }; return $rc; }
if ! "$W" train --help 2>&1 | grep -q -- --tensorboard; then fail "train --help does not list --tensorboard"; fi
common=(--lr-decay-style constant --val-data "$DATA")

train "${common[@]}" --nranks 2 --strategy 1f1b --transport local --num-microbatches 2 --steps 4 --eval-every 2 \
  --metrics "$TMP/two.jsonl" --tensorboard "$TMP/two" 2>"$TMP/err" || { cat "$TMP/err"; fail "2 ranks"; }
check "$TMP/two.jsonl" "$TMP/two" 1 1,2,3,4 2,4 || fail "2 ranks: TensorBoard against the metrics"

train "${common[@]}" --nranks 1 --steps 3 --eval-every 1 --metrics "$TMP/one.jsonl" --tensorboard "$TMP/one/run" \
  2>"$TMP/err" || { cat "$TMP/err"; fail "1 rank"; }
check "$TMP/one.jsonl" "$TMP/one/run" 1 1,2,3 1,2,3 || fail "1 rank: TensorBoard against the metrics"

# NaN loss and validation loss (fp32 logits overflow): null in the metrics, non-finite scalars
train "${common[@]}" --nranks 1 --steps 2 --eval-every 1 --precision fp32 --init-std 1e38 --metrics "$TMP/nan.jsonl" \
  --tensorboard "$TMP/nan" 2>"$TMP/err" || { cat "$TMP/err"; fail "NaN run"; }
grep -q '"loss": null' "$TMP/nan.jsonl" || fail "NaN run: no null loss in the metrics"
check "$TMP/nan.jsonl" "$TMP/nan" 1 1,2 1,2 || fail "NaN run: TensorBoard against the metrics"

# the first run saves at 3 and goes on to 5 (as if it had died there); the second resumes at 3
res=(--nranks 2 --strategy 1f1b --transport local --eval-every 2 --metrics "$TMP/res.jsonl" --tensorboard "$TMP/res")
train "${common[@]}" "${res[@]}" --steps 5 --save-every 3 --save "$TMP/ck" 2>"$TMP/err" || { cat "$TMP/err"; fail "resume: first run"; }
train "${common[@]}" "${res[@]}" --steps 6 --resume "$TMP/ck/step-3" 2>"$TMP/err" || { cat "$TMP/err"; fail "resume: second run"; }
check "$TMP/res.jsonl" "$TMP/res" 2 1,2,3,4,5,6 2,4,6 || fail "resume: TensorBoard against the metrics"

: >"$TMP/file"
train "${common[@]}" --steps 1 --tensorboard "$TMP/file" >"$TMP/out" 2>"$TMP/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" = 1 ] && grep -q -- "--tensorboard $TMP/file" "$TMP/err" \
  || { cat "$TMP/err"; fail "--tensorboard FILE: exit $rc, want 2 and one line naming it"; }
echo "tensorboard ok"
