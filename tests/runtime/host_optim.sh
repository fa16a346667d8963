#!/bin/bash
# --optimizer-memory host (optim.h: wp_optim_place): the owners' masters, moments and fp32
# accumulator in host memory apart from the backend's, updated by an optimizer's own CPU kernel
# context, the working copy and the gradients staged across. On the CPU backend the arithmetic is
# the same calls on the same bits, so the final state equals the device-resident run's bit for
# bit: every master (ckpt_diff at tolerance 0) and every rank's shard (masters and both moments,
# cmp). Every strategy at N = 2, M = 4, fp32, 3 steps; tied embeddings (the TOUT/TIN pieces and
# the optimizer's own fold) on the strategies that move the tie; N = 3 and N = 4 in mixed
# precision; and resume both ways: saved with host at step 2 and resumed with device to step 4,
# and the reverse, each equal to the uninterrupted device run.
source "$(dirname "$0")/runtime_lib.sh"
base=(--steps 3 --lr-decay-style constant --transport local)
# same DEVICE-DIR HOST-DIR TAG: masters bit for bit, and each rank's shard byte for byte
same() {
  local line
  line=$("$DIFF" "$1" "$2" 0) || fail "$3: masters differ: $line"
  local n=0
  for f in "$1"/rank-*.safetensors; do
    cmp -s "$f" "$2/$(basename "$f")" || fail "$3: $(basename "$f") differs (masters or moments)"
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || fail "$3: no rank shards in $1"
  echo "$3: bit-identical ($n shards; $line)"
}
run_pair() { # TAG ARGS...: the run with device and with host placement, compared at step 3
  local tag=$1
  shift
  train "${base[@]}" "$@" --optimizer-memory device --save "$TMP/$tag-dev" || fail "$tag device"
  train "${base[@]}" "$@" --optimizer-memory host --save "$TMP/$tag-host" || fail "$tag host"
  same "$TMP/$tag-dev/step-3" "$TMP/$tag-host/step-3" "$tag"
}
for S in 1f1b weipipe-naive weipipe-interleave wzb1 wzb2 gpipe zb-h1 zb-h2 zb-v interleaved-1f1b seq1f1b fsdp \
         weipipe-hier tawpipe; do
  shape=()
  case $S in interleaved-1f1b | zb-v) shape=(--num-layers 8 --num-chunks 4) ;; esac
  run_pair "$S-2" "${shape[@]}" --nranks 2 --strategy $S --num-microbatches 4 --precision fp32
done
for S in weipipe-interleave fsdp 1f1b; do
  run_pair "tied-$S-2" --tie-word-embeddings --nranks 2 --strategy $S --num-microbatches 4 --precision fp32
done
run_pair "wzb2-3-mixed" --nranks 3 --strategy wzb2 --num-microbatches 6
run_pair "fsdp-4-mixed" --nranks 4 --strategy fsdp --num-microbatches 4
# resume either way: the first half saved with one placement, the second run with the other
common=(--nranks 2 --strategy weipipe-interleave --transport local --lr-decay-style constant --num-microbatches 4
        --precision fp32)
train "${common[@]}" --steps 4 --optimizer-memory device --save "$TMP/full" || fail "uninterrupted run"
for first in host device; do
  second=device
  [ $first = device ] && second=host
  ck=$TMP/ck-$first
  train "${common[@]}" --steps 2 --optimizer-memory $first --save "$ck" || fail "first half with $first"
  train "${common[@]}" --steps 4 --optimizer-memory $second --save "$ck" --resume auto || fail "resumed with $second"
  same "$TMP/full/step-4" "$ck/step-4" "saved with $first, resumed with $second"
done
echo "host placement equals device placement on every strategy"
