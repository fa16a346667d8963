#!/usr/bin/env bash
# --graphs (kernels/replay.h) on every strategy: each compute action's model calls are kept, keyed
# and replayed from the second sight of a key on (CUDA: a graph; the CPU backend replays its own
# record of the calls, which is what runs here). Held, per strategy, to the same run without:
# every step's loss and the final checkpoint bit for bit (ckpt_diff at tolerance 0), and the run
# must have replayed something (a replay path that never ran would pass the comparison).
# Also: N = 1 and 4, mixed and fp32, a resume, and document masks (their mask is built on the host
# from each micro-batch's tokens: those forwards run as without, and the run says why).
source "$(dirname "$0")/runtime_lib.sh"
strategies=$("$W" simulate --help 2>&1 | sed -n 's/^ *--strategy *{\([^}]*\)}.*/\1/p' | tr '|' ' ')
[ "$(wc -w <<< "$strategies")" -ge 14 ] || fail "found too few strategies in 'weipipe simulate --help': $strategies"
# one pair of runs, --graphs false then true; $1 a tag, the rest train's flags
pair() {
  local tag=$1 out
  shift
  train "$@" --graphs false --save "$TMP/$tag-off" --metrics "$TMP/$tag-off.jsonl" || fail "$tag: --graphs false exited $?"
  out=$("$W" train --config "$CFG" --data "$DATA" --threads 1 --timeout 60s "$@" --graphs true --save "$TMP/$tag-on" \
        --metrics "$TMP/$tag-on.jsonl" 2>&1) || fail "$tag: --graphs true exited $?: $(tail -3 <<< "$out")"
  line=$(grep -a '^graphs: ' <<< "$out") || fail "$tag: no 'graphs:' line in the summary"
  [ "$(losses "$TMP/$tag-off.jsonl")" = "$(losses "$TMP/$tag-on.jsonl")" ] || fail "$tag: the losses differ with --graphs"
  step=$(basename "$(ls -d "$TMP/$tag-off"/step-* | sort -V | tail -1)")
  diffl=$("$DIFF" "$TMP/$tag-off/$step" "$TMP/$tag-on/$step" 0) || fail "$tag: the weights differ with --graphs: $diffl"
  echo "$tag: same losses and weights; $line"
}
replayed() { sed -n 's/^graphs: \([0-9]*\) of .*/\1/p' <<< "$line"; }
for S in $strategies; do
  [ "$S" = auto ] || [ "$S" = all ] && continue
  shape=()
  case $S in interleaved-1f1b|zb-v) shape=(--num-layers 8 --num-chunks 4) ;; esac # two chunks per rank
  pair "$S-n2" --steps 4 --nranks 2 --transport local --strategy "$S" "${shape[@]}"
  [ "$(replayed)" -gt 0 ] || fail "$S: nothing replayed: $line"
done
pair one-fp32 --steps 4 --nranks 1 --strategy 1f1b --precision fp32
[ "$(replayed)" -gt 0 ] || fail "one rank fp32: nothing replayed: $line"
pair wzb2-n4 --steps 4 --nranks 4 --transport local --strategy wzb2 --num-microbatches 8
[ "$(replayed)" -gt 0 ] || fail "wzb2 N=4: nothing replayed: $line"
# a resume with --graphs continues as the run without does (recordings start anew after it)
train --steps 2 --nranks 2 --transport local --strategy weipipe-interleave --save "$TMP/res" || fail "resume's first half"
pair resumed --steps 4 --nranks 2 --transport local --strategy weipipe-interleave --resume "$TMP/res/step-2"
# document masks read the tokens on the host: their forwards run as without (the backward spans
# may replay), and the line names the call
pair docs --steps 3 --nranks 2 --transport local --strategy 1f1b --num-microbatches 4 --doc-mask --doc-boundary-id 10
grep -aq "first eager one after step 2: kern_to_host (F of chunk" <<< "$line" ||
  fail "document masks: expected the forwards eager for kern_to_host: $line"
echo "graphs: every strategy the same bits with and without"
