#!/bin/bash
# A rank SIGKILLed at a random point of a step, 20 trials (seeded choice of strategy, ring size,
# victim and delay; checkpoints every step so that some kills land in a save): every surviving
# rank exits non-zero naming the lost rank, the job ends within --timeout, no process of the
# job is left, and the last checkpoint on disk verifies (manifest, sizes, CRC-32, tensors).
source "$(dirname "$0")/faults_lib.sh"
TRIALS=${FAULTS_TRIALS:-20}
TIMEOUT=4
RANDOM=7 # the seed of the trial choices
strategies=(1f1b weipipe-naive weipipe-interleave wzb1 wzb2)
worst=0
# kill_victim N V DELAY WHAT SAYS: after the job's N ranks exist and DELAY seconds, SIGKILL rank
# V and wait for the job: it exits non-zero within --timeout, every other rank's error matches
# SAYS (a grep pattern, "V" standing for the victim's number), no process is left. Sets rc, took.
kill_victim() {
  local n=$1 v=$2 delay=$3 what=$4 says=$5 victim t0 r
  wait_ranks "$n"
  sleep "$delay"
  victim=$(pid_of_rank "$v") || { kill $LAUNCHER; fail "$what: rank $v not found among [$KIDS]"; }
  t0=$(now)
  kill -9 "$victim"
  wait $LAUNCHER
  rc=$? took=$(elapsed "$t0")
  [ $rc -ne 0 ] || { cat "$TMP/log"; fail "$what: the job exited 0"; }
  awk -v e="$took" -v t=$TIMEOUT 'BEGIN {exit !(e < t + 1)}' || { cat "$TMP/log"; fail "$what: the job took ${took}s to end (--timeout ${TIMEOUT}s)"; }
  for r in $(seq 0 $((n - 1))); do
    [ "$r" = "$v" ] && continue
    grep -q "^\[rank $r\] .*error: .*${says//V/$v}" "$TMP/log" || { cat "$TMP/log"; fail "$what: rank $r's error does not match '${says//V/$v}'"; }
  done
  no_leftovers
}
# First, a rank killed before it joined the rendezvous (WEIPIPE_TEST_JOIN_DELAY holds it back):
# nothing of it ever reaches the others, who would wait --connect-timeout (30 s) for it, past the
# launcher's grace period, and be killed without a word. The launcher's notice (ring/net/notice.h)
# tells them at once. Rank 0 (the rendezvous' host) and another.
for V in 0 2; do
  export WEIPIPE_TEST_JOIN_DELAY=$V:60
  start_job "$TMP/log" --nranks 3 --strategy 1f1b --steps 1000000 --timeout ${TIMEOUT}s --connect-timeout 30
  unset WEIPIPE_TEST_JOIN_DELAY
  kill_victim 3 $V 0.3 "rank $V killed before it joined" "rank V ended (killed by signal 9"
  echo "rank $V killed before it joined: exit $rc after ${took}s, both other ranks said it was killed"
done
for trial in $(seq "$TRIALS"); do
  S=${strategies[RANDOM % 5]} N=$((3 + RANDOM % 2))
  V=$((RANDOM % N)) delay=$(awk -v r=$RANDOM 'BEGIN {printf "%.2f", 0.2 + r / 32768}')
  save="$TMP/save-$trial"
  start_job "$TMP/log" --nranks $N --strategy $S --steps 1000000 --timeout ${TIMEOUT}s --save "$save" --save-every 1 --keep-last 2
  what="trial $trial ($S, N=$N, rank $V killed after ${delay}s)"
  kill_victim $N $V "$delay" "$what" "rank V\b"
  step=$(verify_latest "$save")
  worst=$(awk -v a=$worst -v b=$took 'BEGIN {print (b > a ? b : a)}')
  echo "$what: exit $rc after ${took}s, every other rank named rank $V, no process left, last checkpoint $step verifies"
done
echo "$TRIALS kills: slowest end of the job ${worst}s after the kill (--timeout ${TIMEOUT}s)"
