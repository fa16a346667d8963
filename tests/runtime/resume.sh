#!/bin/bash
# Save at step 3, resume, run to step 6: the losses of steps 4..6 equal those of an uninterrupted
# run bit for bit (the metrics print %.17g), on one rank and on two or four ranks as threads, in mixed
# precision (the loss scaler's state travels in the checkpoint too); fsdp on four ranks saves and
# loads slices of every chunk.
source "$(dirname "$0")/runtime_lib.sh"
for run in "1 1f1b" "2 weipipe-interleave" "2 wzb2" "4 fsdp"; do
  set -- $run
  N=$1 S=$2 tag=$1-$2
  common=(--nranks $N --strategy $S --transport local --lr-decay-style constant)
  train "${common[@]}" --steps 6 --metrics "$TMP/$tag-full.jsonl" || fail "$tag: uninterrupted run"
  train "${common[@]}" --steps 3 --save "$TMP/$tag-ck" || fail "$tag: first half"
  train "${common[@]}" --steps 6 --save "$TMP/$tag-ck" --resume auto --metrics "$TMP/$tag-resumed.jsonl" || fail "$tag: resumed half"
  want=$(losses "$TMP/$tag-full.jsonl" | tail -n 3) got=$(losses "$TMP/$tag-resumed.jsonl")
  [ "$(echo "$got" | wc -l)" = 3 ] || fail "$tag: resumed run wrote $(echo "$got" | wc -l) metrics lines, expected 3"
  [ "$want" = "$got" ] || fail "$tag: losses of steps 4..6 differ: uninterrupted [$want] resumed [$got]"
  echo "$tag: steps 4..6 bit-identical:" $got
done
