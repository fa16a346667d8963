#!/bin/bash
# Every step's learning rate in --metrics against the closed form (docs/training.md), computed
# here in awk: each decay style with warm-up, --lr below the old absolute floor (the default
# --min-lr follows --lr: 0.1 x), a run cut in two by --resume, and several strategies on threads.
source "$(dirname "$0")/runtime_lib.sh"
# closed form: steps k = 0..S-1 (metrics say k+1), warm-up W, decay style D, peak P, floor F
want() { awk -v S="$1" -v W="$2" -v D="$3" -v P="$4" -v F="$5" 'BEGIN {
  pi = atan2(0, -1)
  for (k = 0; k < S; k++) {
    if (k < W) r = P * (k + 1) / W
    else if (D == "constant") r = P
    else { p = (k - W) / (S - W); s = D == "linear" ? 1 - p : (1 + cos(pi * p)) / 2; r = F + (P - F) * s }
    printf "%d %.17g\n", k + 1, r
  } }'; }
rates() { sed -n 's/.*"step": \([0-9]*\),.*"lr": \([^,]*\),.*/\1 \2/p' "$1"; }
# every line within 1e-12 relative (both sides are doubles; awk's cos is libm's too)
compare() { paste -d' ' <(want "$@") <(rates "$M") | awk -v tag="$tag" '{
  if ($1 != $3) { print "FAIL: " tag ": step " $1 " vs metrics step " $3; bad = 1; next }
  d = $2 - $4; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2
  if (d > 1e-12 * (m > 1e-12 ? m : 1e-12)) { print "FAIL: " tag ": step " $1 " lr " $4 ", want " $2; bad = 1 } }
  END { exit bad }' || exit 1
  [ "$(rates "$M" | wc -l)" = "$1" ] || fail "$tag: $(rates "$M" | wc -l) metrics lines, want $1"; }
NS=8 NW=2
for style in constant linear cosine; do
  for run in "1 1f1b" "2 weipipe-interleave" "4 fsdp"; do
    set -- $run
    tag="$style/$1-$2" M="$TMP/m-$style-$1.jsonl"
    common=(--nranks $1 --strategy $2 --transport local --steps $NS --warmup-steps $NW --lr-decay-style $style --lr 1e-5)
    train "${common[@]}" --metrics "$M" || fail "$tag: run"
    compare $NS $NW $style 1e-5 1e-6
    # cut at step 3, resumed: the same rates (the schedule does not restart)
    R="$TMP/r-$style-$1.jsonl"
    train "${common[@]}" --steps 3 --save "$TMP/ck-$style-$1" --metrics "$R" || fail "$tag: first part"
    train "${common[@]}" --save "$TMP/ck-$style-$1" --resume auto --metrics "$R" || fail "$tag: resumed part"
    M=$R; tag="$tag resumed"; compare $NS $NW $style 1e-5 1e-6
  done
  echo "$style: every step's rate matches the closed form (3 strategies, whole and resumed)"
done
# an explicit floor: --min-lr 3e-6 with the peak 1e-5, linear
tag=explicit M="$TMP/explicit.jsonl"
train --steps $NS --warmup-steps $NW --lr-decay-style linear --lr 1e-5 --min-lr 3e-6 --metrics "$M" || fail "$tag: run"
compare $NS $NW linear 1e-5 3e-6
# a floor above the peak is refused with exit 2 naming --min-lr
out=$(train --steps 4 --lr 1e-5 --min-lr 1e-4 2>&1); rc=$?
[ $rc = 2 ] && [[ $out == *--min-lr* ]] || fail "--min-lr above --lr: exit $rc, '$out'"
echo "explicit --min-lr follows the closed form; one above --lr is refused: $out"
