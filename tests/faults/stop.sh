#!/bin/bash
# A stalled peer (SIGSTOP) is detected by the progress timeout, not waited on forever: every
# other rank exits naming it within about --timeout. Before that, rank 0's stall report prints
# the whole ring as one grid (each rank's action and the buffer and peer it waits for; the
# stopped rank as "no answer"). SIGUSR1 prints the same grid on demand while the job runs on.
source "$(dirname "$0")/faults_lib.sh"
TIMEOUT=3
for V in 2 0; do
  start_job "$TMP/log" --nranks 3 --strategy weipipe-interleave --steps 1000000 --timeout ${TIMEOUT}s
  wait_ranks 3
  sleep 0.7
  victim=$(pid_of_rank $V) || { kill $LAUNCHER; fail "rank $V not found among [$KIDS]"; }
  t0=$(now)
  kill -STOP "$victim"
  while kill -0 $LAUNCHER 2>/dev/null; do # the ranks' ends, seen as lines in the launcher's log
    [ -z "${t_end:-}" ] && grep -q '^\[rank [0-9]\] weipipe: error:' "$TMP/log" && t_end=$(elapsed "$t0")
    sleep 0.05
  done
  wait $LAUNCHER
  rc=$? took=$(elapsed "$t0")
  kill -CONT "$victim" 2>/dev/null
  [ $rc -ne 0 ] || fail "the job exited 0 with rank $V stopped"
  # At least one surviving rank names the silent rank. Silence cascades: a rank blocked on the
  # stopped one is itself silent to the ranks waiting on it, so with equal timeouts another
  # survivor may name that intermediate rank (the stall grid printed before shows the truth);
  # one still waiting when the launcher's grace period ends is killed unreported (aborts
  # travel through rank 0, so a stopped rank 0 cannot relay them).
  named=0
  for r in 0 1 2; do
    [ $r = $V ] && continue
    grep -Eq "^\[rank $r\] .*error: .*rank(\(s\))? $V\b" "$TMP/log" && named=$((named + 1))
  done
  [ $named -ge 1 ] || { cat "$TMP/log"; fail "no surviving rank named rank $V"; }
  # Rank 0 stopped inside a collective is declared dead after 2 x --timeout + 5 s (the other
  # ranks must outwait rank 0's own --timeout for a slow rank, ring/control_tcp.c); else --timeout.
  bound=$([ $V = 0 ] && echo $((2 * TIMEOUT + 5)) || echo $TIMEOUT)
  awk -v e="${t_end:-99}" -v t=$TIMEOUT -v b=$bound 'BEGIN {exit !(e >= t && e < b + 3)}' || { cat "$TMP/log"; fail "the other ranks ended ${t_end:-never}s after the stop (--timeout ${TIMEOUT}s, bound ${bound}s)"; }
  if [ $V != 0 ]; then # rank 0 prints the grid; a stopped rank 0 cannot (the errors name it instead)
    grep -q "^\[rank 0\] stall report (rank 0 made no progress for" "$TMP/log" || { cat "$TMP/log"; fail "no stall report"; }
    grep -q "^\[rank 0\] rank $V: (no answer within .*stopped or dead?)" "$TMP/log" || { cat "$TMP/log"; fail "the grid does not show rank $V as not answering"; }
    for r in 0 1 2; do
      [ $r = $V ] || grep -q "^\[rank 0\] rank $r: step [0-9]* .*\[for " "$TMP/log" || { cat "$TMP/log"; fail "the grid lacks rank $r's step and action"; }
    done
    sed -n 's/^\[rank 0\] \(stall report\|rank [0-9]:\)/\1/p' "$TMP/log"
  fi
  no_leftovers
  echo "rank $V stopped: detected ${t_end}s later ($named of 2 other ranks named it before the job ended) (--timeout ${TIMEOUT}s, bound ${bound}s), the job in ${took}s with exit $rc"
  unset t_end
done

# SIGUSR1 to rank 1: the grid on demand, and the job finishes normally.
# (after rank 0's first metrics line: every rank has then installed its handler, which comes
# after loading; a fixed sleep lost that race on a loaded machine and SIGUSR1 killed rank 1)
start_job "$TMP/log" --nranks 3 --strategy wzb1 --steps 60 --timeout ${TIMEOUT}s --metrics "$TMP/usr1.jsonl"
wait_ranks 3
for _ in $(seq 400); do grep -q '"step"' "$TMP/usr1.jsonl" 2>/dev/null && break; sleep 0.05; done
kill -USR1 "$(pid_of_rank 1)"
wait $LAUNCHER || { cat "$TMP/log"; fail "the job failed after SIGUSR1"; }
grep -q "^\[rank 1\] stall report (SIGUSR1): where every rank stands" "$TMP/log" || { cat "$TMP/log"; fail "no grid after SIGUSR1"; }
[ "$(grep -c "^\[rank 1\] rank [012]: " "$TMP/log")" = 3 ] || { cat "$TMP/log"; fail "the SIGUSR1 grid does not have 3 rank lines"; }
echo "SIGUSR1 to rank 1: grid printed, the job went on and finished"
