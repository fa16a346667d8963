#!/bin/bash
# weipipe-hier and tawpipe (K nodes x G ranks, --ranks-per-node G) through the one executor, 3
# optimizer steps (tawpipe's C = N chunks: an 8-layer model, against 8-layer references):
#  - equivalence at K in {1,2,3}, G in {1,2,4} with N = K*G <= 8, M in {N, 2N}: in fp32 every
#    final master tensor equals the single-rank 1f1b run's within 1e-5 relative (only the order of
#    fp32 gradient sums differs); in mixed precision every step's loss within 3e-4 relative of the
#    single-rank mixed run (the tolerance of equivalence.sh: a lap's gradient is a bf16 sum, as in
#    weipipe-interleave, tawpipe's local reduction adds bf16 gradients one at a time into the
#    owner's fp32 accumulator, and the node sums that cross nodes are fp32);
#  - bytes: the payload each rank sends per step, counted by the transport, equals the
#    validator's count for the same lists (as bytes.sh): weipipe-hier at 2 x 2 and 3 x 2, tawpipe at
#    2 x 2 and 3 x 1;
#  - resume into another strategy and N: weipipe-hier on 3 x 2 -> 1f1b on 2 ranks, fsdp on
#    2 -> weipipe-hier on 3 x 1, tawpipe on 2 x 1 -> weipipe-hier on 3 x 1; losses of steps
#    4..6 equal a one-rank uninterrupted run within 1e-5 relative (fp32), as resplit.sh.
# A fifth argument 'subset' (sanitized builds, meson.build) keeps K x G in {1x2, 2x2, 3x1} at M = N,
# one byte count and one resume per strategy.
source "$(dirname "$0")/runtime_lib.sh"
mode=${5:-full}
shapes=("1 1" "1 2" "1 4" "2 1" "2 2" "2 4" "3 1" "3 2") mults="1 2"
bytes_cases=("weipipe-hier 2 2" "weipipe-hier 3 2" "tawpipe 2 2" "tawpipe 3 1")
resumes=("6 weipipe-hier:3 2 1f1b" "2 fsdp 3 weipipe-hier:1" "2 tawpipe:1 3 weipipe-hier:1")
if [ "$mode" = subset ]; then
  shapes=("1 2" "2 2" "3 1") mults=1
  bytes_cases=("weipipe-hier 3 2" "tawpipe 2 2")
  resumes=("6 weipipe-hier:3 2 1f1b" "2 tawpipe:1 3 weipipe-hier:1")
fi
FP32_TOL=1e-5 MIXED_TOL=3e-4
common=(--steps 3 --lr-decay-style constant --transport local)
for S in weipipe-hier tawpipe; do
for KG in "${shapes[@]}"; do
  set -- $KG
  K=$1 G=$2 N=$(($1 * $2))
  layers=()
  [ $S = tawpipe ] && layers=(--num-layers 8)
  for k in $mults; do
    M=$((k * N))
    ref=$TMP/ref-$S-$M
    if [ ! -d "$ref" ]; then
      train "${common[@]}" "${layers[@]}" --nranks 1 --strategy 1f1b --num-microbatches $M --precision fp32 --save "$ref" || fail "reference M=$M"
      train "${common[@]}" "${layers[@]}" --nranks 1 --strategy 1f1b --num-microbatches $M --metrics "$ref-mixed.jsonl" || fail "mixed reference M=$M"
    fi
    tag="$S K=$K G=$G M=$M"
    out=$TMP/$S-$K-$G-$M
    run=("${common[@]}" "${layers[@]}" --nranks $N --ranks-per-node $G --strategy $S --num-microbatches $M)
    train "${run[@]}" --precision fp32 --save "$out" || fail "$tag fp32"
    line=$("$DIFF" "$out/step-3" "$ref/step-3" $FP32_TOL) || fail "$tag fp32: $line"
    echo "$tag fp32: $line"
    train "${run[@]}" --metrics "$out.jsonl" || fail "$tag mixed"
    cmp=$(paste <(losses "$out.jsonl") <(losses "$ref-mixed.jsonl") |
      awk -v tol=$MIXED_TOL '{d = $1 - $2; if (d < 0) d = -d; r = d / $2; if (r > m) m = r; n++}
                             END {printf "%d %.3e %s", n, m, (n == 3 && m <= tol) ? "ok" : "bad"}')
    echo "$tag mixed: steps, max loss relative difference: $cmp"
    case $cmp in *ok) ;; *) fail "$tag mixed losses differ: $cmp" ;; esac
  done
done
done

for SKG in "${bytes_cases[@]}"; do
  set -- $SKG
  N=$(($2 * $3))
  "$W" train --config "$CFG" --data "$DATA" --threads 1 --nranks $N --ranks-per-node $3 --num-microbatches $((2 * N)) \
    --strategy $1 --transport local --steps 2 2> "$TMP/out" > /dev/null || { cat "$TMP/out"; fail "bytes $1 K=$2 G=$3: train failed"; }
  sed -n '/payload bytes\/step/,$p' "$TMP/out" | awk -v tag="$1 K=$2 G=$3" -v N=$N 'NR > 1 {
      n++; if ($4 != $5 || $5 == 0) bad = bad " rank " $1 ": measured " $4 " schedule " $5 }
    END { if (n != N || bad != "") { print "FAIL " tag ":" bad " (" n " ranks)"; exit 1 }
          print tag ": measured bytes per step equal the schedule on all " N " ranks" }' || exit 1
done

rcommon=(--transport local --lr-decay-style constant --precision fp32 --num-microbatches 6)
train "${rcommon[@]}" --nranks 1 --strategy 1f1b --steps 6 --metrics "$TMP/full.jsonl" || fail "uninterrupted run"
for run in "${resumes[@]}"; do
  set -- $run
  first=(--nranks $1 --strategy ${2%%:*}) second=(--nranks $3 --strategy ${4%%:*})
  [ "${2#*:}" != "$2" ] && first+=(--ranks-per-node ${2#*:})
  [ "${4#*:}" != "$4" ] && second+=(--ranks-per-node ${4#*:})
  tag="$2 N=$1 -> $4 N=$3"
  ck=$TMP/ck-$1-${2%%:*}-$3-${4%%:*}
  train "${rcommon[@]}" "${first[@]}" --steps 3 --save "$ck" || fail "$tag: first half"
  train "${rcommon[@]}" "${second[@]}" --steps 6 --save "$ck" --resume auto --metrics "$ck.jsonl" || fail "$tag: second half"
  paste <(losses "$TMP/full.jsonl" | tail -n 3) <(losses "$ck.jsonl") |
    awk -v tag="$tag" '{d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r; n++}
         END {printf "%s: steps compared %d, max relative loss difference %.3e (tolerance 1e-5)\n", tag, n, m
              if (n != 3 || m > 1e-5) { print "FAIL"; exit 1 } }' || exit 1
done
echo "weipipe-hier and tawpipe equal the single-rank run"
