#!/bin/bash
# Wrong pairings and a lost host, on emulated hosts (scripts/netns_hosts.sh, K network
# namespaces of 2 ranks each, started with a launcher's variables and nothing else):
#  - a rank whose MASTER_ADDR is unreachable (no route from its host) exits 2 with one line
#    naming MASTER_ADDR; the job fails;
#  - two jobs with different ids on the same hosts and port (torchrun variables: same
#    MASTER_PORT; Slurm: job ids 71 and 20071, whose derived ports collide) while the first one's
#    rendezvous is open: each rank of the second exits 1 with one line saying so (never told
#    the first job's id), and the first job trains;
#  - a rank started with another --strategy, or another config (--hidden-size), fails the
#    rendezvous at once with one line naming the flag and its value; rank 0 (no secret: it
#    may be a stranger) names it and its own value when --connect-timeout ends the wait;
#  - WEIPIPE_PEERS=launcher (Slurm's host[1-2], resolved) lets the job form; WEIPIPE_PEERS=host1
#    makes rank 0 drop host2's ranks unread and name them missing;
#  - under torchrun's agent store the rendezvous is at MASTER_PORT + 1; a stranger holding it
#    is one line naming WEIPIPE_PORT, which then moves the job;
#  - host2 of 3 loses its ranks (every process of its namespace SIGKILLed mid-step; then again
#    with the host unplugged first, so that only silence tells): every other rank exits
#    non-zero within --timeout (+ 3 s) naming the lost ranks 2, 3 and host2's address, no
#    process of the job is left, and the last checkpoint verifies.
# Skips (77) where network namespaces cannot be made.
source "$(dirname "$0")/faults_lib.sh"
HOSTS=$(realpath "$(dirname "$0")/../../scripts/netns_hosts.sh")
export WEIPIPE=$W
unshare -rnpfm --mount-proc true 2> /dev/null || { echo "SKIP: cannot create network namespaces (unshare -rnpfm)"; exit 77; }
ARGS=(--config "$CFG" --data "$DATA" --threads 1 --quiet --steps 3 --connect-timeout 5s --timeout 30s)
hosts() { # hosts OUT HARNESS-OPTIONS... -- TRAIN-ARGS...: netns_hosts.sh's output in OUT, its status in RC
  local out=$1; shift
  "$HOSTS" "$@" > "$out" 2>&1
  RC=$?
}
# one_error OUT TAG PATTERN: TAG's output has exactly one error line, and it matches PATTERN
one_error() {
  local lines
  lines=$(grep "^\[$2\] .*error:" "$1")
  [ "$(echo "$lines" | grep -c .)" = 1 ] && echo "$lines" | grep -q -- "$3" ||
    { cat "$1"; fail "[$2]: not one error line matching '$3'"; }
}
status_of() { sed -n "s/^netns_hosts.sh: $2 ([^)]*) exited with status //p" "$1"; } # '' = 0

# 1. MASTER_ADDR unreachable from rank 3's host
hosts "$TMP/u" -k 2 -g 2 -c env -e "3:MASTER_ADDR=10.99.0.1" -- "${ARGS[@]}"
[ $RC != 0 ] && [ "$(status_of "$TMP/u" "rank 3")" = 2 ] || { cat "$TMP/u"; fail "unreachable MASTER_ADDR: rank 3 did not exit 2"; }
one_error "$TMP/u" "rank 3" "MASTER_ADDR '10.99.0.1' is unreachable from this host: .*Network is unreachable"
echo "rank 3 with MASTER_ADDR=10.99.0.1: exit 2: $(grep '^\[rank 3\].*error:' "$TMP/u" | sed 's/.*error: //')"

# 2. two jobs, different ids, same hosts and port
for c in env slurm; do
  ids=(-j jobA -J jobB) first=jobA second=jobB
  [ $c = slurm ] && ids=(-j 71 -J 20071) first=71.0 second=20071.0
  hosts "$TMP/j" -k 2 -g 2 -c $c "${ids[@]}" -d 3:3 -- "${ARGS[@]}"
  [ $RC = 0 ] || { cat "$TMP/j"; fail "$c: the first job failed ($RC)"; }
  for r in 0 1 2 3; do
    [ "$(status_of "$TMP/j" "job2 rank $r")" = 1 ] || { cat "$TMP/j"; fail "$c: the second job's rank $r did not exit 1"; }
    # the first job's id is for its own ranks only: never told to another job's
    one_error "$TMP/j" "job2 rank $r" "rendezvous of another job (this job is '$second'"
    ! grep -q "^\[job2 rank $r\].*'$first'" "$TMP/j" || { cat "$TMP/j"; fail "$c: job2 rank $r was told the first job's id"; }
  done
  echo "$c: two jobs at one port: the second's 4 ranks exit 1 saying so (not told '$first'), the first trains; e.g. $(grep '^\[job2 rank 0\].*error:' "$TMP/j" | sed 's/.*error: //')"
done

# 3. a rank with another --strategy, or another config
sed 's/^hidden-size *=.*/hidden-size = 32/' "$CFG" > "$TMP/other.ini"
grep -q '^hidden-size = 32' "$TMP/other.ini" || echo "hidden-size = 32" >> "$TMP/other.ini"
for case in "slurm|3:--strategy 1f1b|--strategy (rank 0 has --strategy 'weipipe-interleave')|--strategy differs (rank 3 has --strategy '1f1b'|3" \
            "env|2:--config $TMP/other.ini|--hidden-size (rank 0 has --hidden-size '64')|--hidden-size differs (rank 2 has --hidden-size '32'|2"; do
  IFS='|' read -r c extra at0 atr r <<< "$case"
  hosts "$TMP/f" -k 2 -g 2 -c $c -o "$extra" -- "${ARGS[@]}" --strategy weipipe-interleave
  [ $RC != 0 ] || { cat "$TMP/f"; fail "$c, rank $r with '$extra': the job exited 0"; }
  for q in 0 1 2 3; do [ -n "$(status_of "$TMP/f" "rank $q")" ] || { cat "$TMP/f"; fail "$c: rank $q exited 0"; }; done
  # no WEIPIPE_SECRET: rank 0 cannot tell that rank from a stranger, so it waits (--connect-timeout)
  one_error "$TMP/f" "rank 0" "did not join within 5 s; rank $r (10.78.0.2:[0-9]*) came with other job flags than rank 0: $at0"
  one_error "$TMP/f" "rank $r" "rank $r was started with other job flags than rank 0: $atr"
  echo "$c, rank $r with $extra: rank 0 and rank $r name it: $(grep "^\[rank $r\].*error:" "$TMP/f" | sed 's/.*error: //')"
done

# 3b. WEIPIPE_PEERS: =launcher (Slurm's host[1-2], resolved through the hosts' /etc/hosts) lets
# the job form; =host1 drops host2's ranks unread (they retry until --connect-timeout), and rank
# 0 logs them and names them missing.
peers=(); for q in 0 1 2 3; do peers+=(-e "$q:WEIPIPE_PEERS=launcher"); done
hosts "$TMP/pl" -k 2 -g 2 -c slurm "${peers[@]}" -- "${ARGS[@]}"
[ $RC = 0 ] || { cat "$TMP/pl"; fail "WEIPIPE_PEERS=launcher: the job failed ($RC)"; }
! grep -q "not an address of the job's hosts" "$TMP/pl" || { cat "$TMP/pl"; fail "WEIPIPE_PEERS=launcher refused a rank"; }
peers=(); for q in 0 1 2 3; do peers+=(-e "$q:WEIPIPE_PEERS=host1"); done
hosts "$TMP/p1" -k 2 -g 2 -c slurm "${peers[@]}" -- "${ARGS[@]}"
[ $RC != 0 ] || { cat "$TMP/p1"; fail "WEIPIPE_PEERS=host1: the job formed with host2's ranks"; }
grep -q "^\[rank 0\].*refused a connection from 10.78.0.2:[0-9]*: not an address of the job's hosts (WEIPIPE_PEERS)" "$TMP/p1" &&
  grep -q "^\[rank 0\].*rank(s) 2, 3 did not join" "$TMP/p1" || { cat "$TMP/p1"; fail "WEIPIPE_PEERS=host1: rank 0 did not refuse host2's ranks"; }
echo "WEIPIPE_PEERS=launcher (host[1-2]): the job trains; =host1: host2's ranks refused: $(grep '^\[rank 0\].*error:' "$TMP/p1" | sed 's/.*error: //' | cut -c1-160)"

# 4. the rendezvous port under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True):
# MASTER_PORT + 1; held there by a process that is not weipipe: one line saying so; WEIPIPE_PORT
# picks another. (On loopback: no namespace needed.)
P=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-60999)
python3 -c "import socket, sys, time
s = socket.socket(); s.bind(('127.0.0.1', $P + 1)); s.listen(); print('ready', flush=True); time.sleep(60)" > "$TMP/holder" &
holder=$!
cleanup_extra="kill $holder 2> /dev/null"
for _ in $(seq 100); do grep -q ready "$TMP/holder" && break; sleep 0.1; done
agent() { # agent RANK ENV...: a rank of a torchrun job of 2 whose agent store holds MASTER_PORT
  local r=$1; shift
  env -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$P \
    TORCHELASTIC_RUN_ID=agent TORCHELASTIC_USE_AGENT_STORE=True "$@" "$W" train "${ARGS[@]}"
}
agent 0 > "$TMP/p0" 2>&1; rc=$?
[ $rc = 1 ] && [ "$(grep -c error: "$TMP/p0")" = 1 ] &&
  grep -q "error: rank 0 cannot listen at 127.0.0.1:$((P + 1)) (port from MASTER_PORT+1, as torchrun's agent store holds MASTER_PORT): another process, not a weipipe rendezvous, holds it; set WEIPIPE_PORT" "$TMP/p0" ||
  { cat "$TMP/p0"; fail "MASTER_PORT+1 held by another process: exit $rc"; }
echo "torchrun's agent store: port MASTER_PORT+1; held by a stranger: $(sed -n 's/.*error: //p' "$TMP/p0")"
agent 0 WEIPIPE_PORT=$((P + 2)) > "$TMP/p0" 2>&1 & a0=$!
agent 1 WEIPIPE_PORT=$((P + 2)) > "$TMP/p1" 2>&1 || { cat "$TMP/p1"; fail "WEIPIPE_PORT: rank 1"; }
wait $a0 || { cat "$TMP/p0"; fail "WEIPIPE_PORT: rank 0"; }
grep -q "reaches 127.0.0.1:$((P + 2)) may join" "$TMP/p0" || { cat "$TMP/p0"; fail "WEIPIPE_PORT not used"; }
kill $holder 2> /dev/null; wait $holder 2> /dev/null
echo "WEIPIPE_PORT=$((P + 2)): the job meets there"

# 5. a host lost mid-step
TIMEOUT=4
for unplug in "" -X; do
  save="$TMP/save$unplug"
  hosts "$TMP/k" -k 3 -g 2 -c slurm -j 4242 -K 1 $unplug -W "$TMP/m$unplug:3" -- --config "$CFG" --data "$DATA" --threads 1 \
    --quiet --num-layers 6 --steps 1000000 --timeout ${TIMEOUT}s --save "$save" --save-every 1 --keep-last 2 --metrics "$TMP/m$unplug"
  what="host2 killed${unplug:+ (unplugged first)}"
  [ $RC != 0 ] || { cat "$TMP/k"; fail "$what: exit 0"; }
  grep -q "^netns_hosts.sh: killed host2 (10.78.0.2)" "$TMP/k" || { cat "$TMP/k"; fail "$what: no kill"; }
  took=$(sed -n 's/^netns_hosts.sh: the last process ended \(.*\) s after the kill/\1/p' "$TMP/k")
  awk -v t="$took" -v T=$TIMEOUT 'BEGIN {exit !(t != "" && t < T + 3)}' || { cat "$TMP/k"; fail "$what: ended ${took}s after the kill"; }
  for r in 0 1 4 5; do
    [ "$(status_of "$TMP/k" "rank $r")" = 1 ] || { cat "$TMP/k"; fail "$what: rank $r did not exit 1"; }
    one_error "$TMP/k" "rank $r" "\(rank(s)\|ranks\) 2, 3.*10\.78\.0\.2\|10\.78\.0\.2.*ranks 2, 3"
  done
  for p in /proc/[0-9]*; do # nothing of this job survives the harness
    [ "$(readlink "$p/exe" 2> /dev/null)" = "$W" ] && tr '\0' '\n' < "$p/environ" 2> /dev/null | grep -qx SLURM_JOB_ID=4242 &&
      fail "$what: process ${p#/proc/} of the job is still alive"
  done
  step=$(verify_latest "$save")
  [ "$step" != none ] || fail "$what: no checkpoint"
  echo "$what: ranks 0, 1, 4, 5 exit 1 ${took}s after the kill (--timeout ${TIMEOUT}s), e.g. $(grep '^\[rank 4\].*error:' "$TMP/k" | sed 's/.*error: //'); last checkpoint $step verifies"
done
