#!/bin/bash
# Payload bytes each rank sends per step, counted by the transport (tp_stats), equal the
# validator's count for the same lists exactly, for every strategy on 4 ranks (M = 4 and 8), and
# with tied embeddings (their T pieces, src/schedule/tie.c) for some on 3 ranks.
source "$(dirname "$0")/runtime_lib.sh"
check_bytes() { # ranks, tag, train flags
  local N=$1 tag=$2
  "$W" train --config "$CFG" --data "$DATA" --threads 1 --nranks $N "${@:3}" \
    --transport local --steps 2 2> "$TMP/out" > /dev/null || { cat "$TMP/out"; fail "$tag: train failed"; }
  sed -n '/payload bytes\/step/,$p' "$TMP/out" | awk -v tag="$tag" -v N=$N 'NR > 1 {
      n++; if ($4 != $5 || $5 == 0) bad = bad " rank " $1 ": measured " $4 " schedule " $5 }
    END { if (n != N || bad != "") { print "FAIL " tag ":" bad " (" n " ranks)"; exit 1 }
          print tag ": measured bytes per step equal the schedule on all " N " ranks" }'
}
for M in 4 8; do
  for S in 1f1b weipipe-naive weipipe-interleave wzb1 wzb2 gpipe zb-h1 zb-h2 seq1f1b interleaved-1f1b fsdp; do
    shape=() # interleaved-1f1b: two chunks per rank need 8 layers
    [ $S = interleaved-1f1b ] && shape=(--num-layers 8)
    check_bytes 4 "$S M=$M" --num-microbatches $M --strategy $S "${shape[@]}" || exit 1
  done
done
for S in 1f1b weipipe-naive wzb2 fsdp tawpipe; do
  check_bytes 3 "tied $S M=6" --tie-word-embeddings --num-microbatches 6 --strategy $S || exit 1
done
