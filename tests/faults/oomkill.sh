#!/bin/bash
# A rank that dies as the OOM killer kills (SIGKILL, no goodbye) after it has reported its
# memory at a step's exchange: the launcher names SIGKILL as the OOM killer's, and every surviving
# rank names the dead one as killed, by the OOM killer most likely, with the resident and
# allocated figures it last reported (or, where this cgroup counts OOM kills and the count rose,
# as killed by the OOM killer). Run under a cgroup memory limit, the count rises for real; here
# the kill comes from the test, so the message must not claim the count rose.
source "$(dirname "$0")/faults_lib.sh"
N=3 V=1
start_job "$TMP/log" --nranks $N --strategy weipipe-interleave --steps 1000000 --timeout 4s --metrics "$TMP/m.jsonl"
wait_ranks $N
for _ in $(seq 200); do grep -q '"step": 3,' "$TMP/m.jsonl" 2>/dev/null && break; sleep 0.05; done
grep -q '"step": 3,' "$TMP/m.jsonl" || { kill $LAUNCHER; cat "$TMP/log"; fail "no step 3 in the metrics"; }
victim=$(pid_of_rank $V) || { kill $LAUNCHER; fail "rank $V not found among [$KIDS]"; }
kill -9 "$victim"
wait $LAUNCHER
rc=$?
[ $rc -ne 0 ] || { cat "$TMP/log"; fail "the job exited 0"; }
grep -q "^weipipe: error: rank $V failed first: killed by .*OOM killer" "$TMP/log" ||
  { cat "$TMP/log"; fail "the launcher does not name the OOM killer"; }
for r in $(seq 0 $((N - 1))); do
  [ $r = $V ] && continue
  line=$(grep "^\[rank $r\] .*error: " "$TMP/log")
  grep -Eq "rank $V \([^)]*\) (closed the control connection without saying goodbye|lost the control connection: [^:]*): killed, by the kernel's OOM killer most likely \(it last reported [0-9.]+ MiB resident, [0-9.]+ MiB allocated at step [0-9]+\)" <<< "$line" ||
    { cat "$TMP/log"; fail "rank $r does not name rank $V's death with its memory"; }
  grep -q "oom_kill count went" <<< "$line" && fail "rank $r claims the cgroup's OOM count rose: $line"
done
no_leftovers
grep "OOM" "$TMP/log" | head -2
echo "rank $V SIGKILLed after step 3: the launcher and both survivors name the OOM killer, the survivors with its last figures"
