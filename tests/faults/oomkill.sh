#!/bin/bash
# A rank SIGKILLed without a goodbye after it has reported its memory at a step's exchange, as the
# OOM killer kills: the launcher and every surviving rank say whether the OOM killer did it, from
# the counts (ring/launch/oom.h): this cgroup's oom_kill count, and the host's (/proc/vmstat),
# which every OOM kill on the host raises. Here the kill comes from the test (a person's kill -9),
# so where the host's count stayed put both must say it was not the OOM killer, and the survivors
# give the dead rank's last reported resident and allocated figures; where the count moved (an
# OOM kill elsewhere on the host meanwhile) they must hedge, and never claim this cgroup's count
# rose. tests/ring/test_units.c holds the verdict itself to every case on fake counts.
source "$(dirname "$0")/faults_lib.sh"
N=3 V=1
start_job "$TMP/log" --nranks $N --strategy weipipe-interleave --steps 1000000 --timeout 4s --metrics "$TMP/m.jsonl"
wait_ranks $N
for _ in $(seq 200); do grep -q '"step": 3,' "$TMP/m.jsonl" 2>/dev/null && break; sleep 0.05; done
grep -q '"step": 3,' "$TMP/m.jsonl" || { kill $LAUNCHER; cat "$TMP/log"; fail "no step 3 in the metrics"; }
victim=$(pid_of_rank $V) || { kill $LAUNCHER; fail "rank $V not found among [$KIDS]"; }
host0=$(awk '$1 == "oom_kill" {print $2}' /proc/vmstat)
kill -9 "$victim"
wait $LAUNCHER
rc=$?
host1=$(awk '$1 == "oom_kill" {print $2}' /proc/vmstat)
[ $rc -ne 0 ] || { cat "$TMP/log"; fail "the job exited 0"; }
if [ -n "$host0" ] && [ "$host0" = "$host1" ]; then
  verdict="not by the OOM killer \(no OOM kill on this host meanwhile: /proc/vmstat oom_kill stayed at $host0\)"
  survivor="not killed by the OOM killer \(no OOM kill on this host meanwhile: /proc/vmstat oom_kill stayed at $host0\); "
else # no count to read, or an OOM kill somewhere on the host meanwhile: hedged
  verdict="most likely the kernel's OOM killer"
  survivor="killed, by the kernel's OOM killer most likely \([^)]*"
fi
grep -Eq "^weipipe: error: rank $V failed first: killed by SIGKILL, $verdict" "$TMP/log" ||
  { cat "$TMP/log"; fail "the launcher's verdict is not '$verdict'"; }
for r in $(seq 0 $((N - 1))); do
  [ $r = $V ] && continue
  line=$(grep "^\[rank $r\] .*error: " "$TMP/log")
  grep -Eq "rank $V \([^)]*\) (closed the control connection without saying goodbye|lost the control connection: [^:]*): ${survivor}it last reported [0-9.]+ MiB resident, [0-9.]+ MiB allocated at step [0-9]+" <<< "$line" ||
    { cat "$TMP/log"; fail "rank $r does not name rank $V's death with the verdict and its memory"; }
  grep -q "this cgroup's oom_kill count went" <<< "$line" && fail "rank $r claims the cgroup's OOM count rose: $line"
done
no_leftovers
grep "OOM" "$TMP/log" | head -2
echo "rank $V SIGKILLed after step 3 (host oom_kill $host0 -> $host1): the launcher and both survivors give the verdict, the survivors with its last figures"
