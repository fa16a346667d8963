#!/bin/bash
# A rank SIGKILLed while a checkpoint is being written (a step-K.tmp directory exists): the
# previous complete checkpoint stays the latest and verifies, the half-written one is never
# loaded, and --resume from the survivor reproduces the uninterrupted run's losses bit for bit.
# Each victim (rank 0, which commits, and rank 1, which only writes its shard) is tried until a
# kill lands inside a save (a bigger model than tiny makes the write window a few ms wide).
source "$(dirname "$0")/faults_lib.sh"
N=3 STEPS=12
common=(--nranks $N --strategy weipipe-interleave --hidden-size 128 --ffn-hidden-size 352 --timeout 4s --steps $STEPS)
train "${common[@]}" --metrics "$TMP/full.jsonl" || fail "the uninterrupted run"
for V in 0 1; do
  landed=0
  for attempt in $(seq 10); do
    save="$TMP/save-$V-$attempt"
    mkdir -p "$save"
    start_job "$TMP/log" "${common[@]}" --save "$save" --save-every 1 --keep-last 100
    wait_ranks $N
    victim=$(pid_of_rank $V) || { kill $LAUNCHER; fail "rank $V not found among [$KIDS]"; }
    shopt -s nullglob
    # Once a save after the first is under way, freeze the ranks; if the .tmp directory is
    # still there (the save did not finish meanwhile), kill the victim, then let the rest go on.
    killed=0
    while [ $killed = 0 ] && kill -0 $LAUNCHER 2>/dev/null; do
      tmps=("$save"/step-*.tmp)
      [ ${#tmps[@]} -gt 0 ] && [ -e "$save/latest" ] || continue
      kill -STOP $KIDS 2>/dev/null
      tmps=("$save"/step-*.tmp)
      [ ${#tmps[@]} -gt 0 ] && { kill -9 "$victim"; killed=1; }
      kill -CONT $KIDS 2>/dev/null
    done
    wait $LAUNCHER
    rc=$?
    no_leftovers
    tmps=("$save"/step-*.tmp)
    shopt -u nullglob
    [ $killed = 1 ] || continue # the run ended before a save was caught: try again
    [ $rc -ne 0 ] || fail "the job exited 0 after rank $V was killed"
    [ ${#tmps[@]} -gt 0 ] || fail "rank $V was killed inside a save, yet no .tmp directory is left"
    landed=1
    break
  done
  [ $landed = 1 ] || fail "rank $V: 10 kills all missed the checkpoint writes"
  step=$(verify_latest "$save")
  K=${step#step-}
  [ "$step" != none ] && [ "$save/${tmps[0]##*/}" != "$save/$step.tmp" ] || fail "latest ($step) is the half-written ${tmps[0]##*/}"
  [ "$K" -lt $STEPS ] || fail "the killed run reached step $K of $STEPS before the kill; nothing to resume"
  train "${common[@]}" --save "$save" --resume auto --metrics "$TMP/resumed-$V.jsonl" > "$TMP/resume.log" 2>&1 || { cat "$TMP/resume.log"; fail "resume from $step"; }
  want=$(losses_from "$TMP/full.jsonl" $((K + 1)))
  got=$(losses_from "$TMP/resumed-$V.jsonl" $((K + 1)))
  [ -n "$got" ] && [ "$got" = "$want" ] || fail "rank $V killed in ${tmps[0]##*/}: losses after resuming from $step differ:
$got
uninterrupted:
$want"
  echo "rank $V killed while ${tmps[0]##*/} was written (attempt $attempt): latest is $step and verifies; resumed losses of steps $((K + 1))-$STEPS equal the uninterrupted run's bit for bit"
done
