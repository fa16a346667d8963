#!/bin/bash
# A checkpoint written on one split resumes on another (other chunking, other owners, whole
# chunks vs ZeRO-3 slices of every chunk): weipipe-interleave on 4 ranks -> 1f1b on 2, fsdp on 4
# (shards hold tensor parts) -> 1f1b on 2, and 1f1b on 2 -> fsdp on 4. The losses of steps 4..6
# equal a one-rank uninterrupted run within 1e-5 relative (fp32; only the order of fp32 sums
# differs).
source "$(dirname "$0")/runtime_lib.sh"
common=(--transport local --lr-decay-style constant --precision fp32 --num-microbatches 4)
train "${common[@]}" --nranks 1 --strategy 1f1b --steps 6 --metrics "$TMP/full.jsonl" || fail "uninterrupted run"
for run in "4 weipipe-interleave 2 1f1b" "4 fsdp 2 1f1b" "2 1f1b 4 fsdp"; do
  set -- $run
  tag="$2 N=$1 -> $4 N=$3"
  ck=$TMP/ck-$1-$2-$3-$4
  train "${common[@]}" --nranks $1 --strategy $2 --steps 3 --save "$ck" || fail "$tag: first half"
  train "${common[@]}" --nranks $3 --strategy $4 --steps 6 --save "$ck" --resume auto --metrics "$ck.jsonl" ||
    fail "$tag: second half"
  paste <(losses "$TMP/full.jsonl" | tail -n 3) <(losses "$ck.jsonl") |
    awk -v tag="$tag" '{d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r; n++}
         END {printf "%s: steps compared %d, max relative loss difference %.3e (tolerance 1e-5)\n", tag, n, m
              if (n != 3 || m > 1e-5) { print "FAIL"; exit 1 } }' || exit 1
done
