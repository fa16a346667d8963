#!/bin/bash
# scripts/netns_ring.sh: each rank in its own namespace with its address and one shaped HTB
# class per peer; launcher variables set; a rank's failure is the script's exit status; a
# 3-rank weipipe train over the namespaces gives the same losses, bit for bit, as over loopback;
# nothing outlives the script, whether it ends, gets SIGTERM, or its outer process gets SIGKILL.
# Skips (77) where user/network/PID namespaces or tc are unavailable. Timing is not asserted
# (scripts/bench_netns.sh measures the links).
# usage: netns.sh WEIPIPE SOURCE_ROOT
wp=$1 root=$2
case $wp in /*) ;; *) wp=$PWD/$wp ;; esac  # meson passes it relative to the build directory
cd "$root" || exit 1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ring=scripts/netns_ring.sh

rc=0
$ring -n 1 -x -- true >"$tmp/probe" 2>&1 || rc=$?
if [ "$rc" = 77 ]; then echo "skip: $(tail -n 1 "$tmp/probe")"; exit 77; fi
[ "$rc" = 0 ] || { cat "$tmp/probe"; echo "FAIL: a 1-rank probe exits $rc"; exit 1; }

# 1. addresses, launcher variables, shaping
$ring -n 3 -r 100Mbit -x -- sh -c 'echo "env $RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT ${#WEIPIPE_SECRET} $NETNS_ADDR {addr}";
    ip -4 -o addr show dev eth0 | awk "{print \"addr\", \$4}"; tc class show dev eth0 | grep -c "rate 100Mbit ceil 100Mbit" |
    sed "s/^/classes /"' >"$tmp/out" 2>"$tmp/err" || fail "3-rank probe exits non-zero: $(cat "$tmp/err")"
for r in 0 1 2; do
    a=10.77.0.$((r + 1))
    grep -qx "\[rank $r\] env $r 3 10.77.0.1 29500 32 $a $a" "$tmp/out" || fail "rank $r: environment wrong"
    grep -qx "\[rank $r\] addr $a/24" "$tmp/out" || fail "rank $r: not at $a/24"
    grep -qx "\[rank $r\] classes 2" "$tmp/out" || fail "rank $r: not 2 shaped classes (one per peer)"
done
[ "$fails" = 0 ] || cat "$tmp/out"

# 2. the exit status is the failing rank's
rc=0
$ring -n 3 -x -- sh -c '[ "$RANK" = 1 ] && exit 5; exit 0' >/dev/null 2>&1 || rc=$?
[ "$rc" = 5 ] || fail "rank 1 exits 5, the script exits $rc"
rc=0
$ring -n 2 -r nonsense -x -- true >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "a bad rate exits $rc, want 2"

# 3. training over the namespaces equals training over loopback
common=(--config configs/tiny.ini --steps 2 --strategy weipipe-interleave --num-microbatches 3 --quiet)
WEIPIPE=$wp $ring -n 3 -r 1Gbit -- "${common[@]}" --metrics "$tmp/netns.jsonl" >"$tmp/train" 2>&1 ||
    { fail "weipipe train over netns"; tail -5 "$tmp/train"; }
"$wp" train "${common[@]}" --transport tcp --nranks 3 --metrics "$tmp/lo.jsonl" >/dev/null 2>&1 ||
    fail "weipipe train over loopback"
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1" | tr '\n' ' '; }
l1=$(losses "$tmp/netns.jsonl") l2=$(losses "$tmp/lo.jsonl")
[ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "losses over netns '$l1' differ from loopback '$l2'"

# 4. nothing outlives the script (a unique sleep marks the ranks)
gone() { # gone MARK: true once no process has MARK on its command line (5 s at most)
    for _ in $(seq 50); do pgrep -f "$1" >/dev/null || return 0; sleep 0.1; done
    return 1
}
# started MARK: a rank runs "sleep MARK" (anchored: the script's own command line holds MARK too,
# and matching it would signal the script before its start-up is done)
started() { for _ in $(seq 100); do pgrep -f "^$1" >/dev/null && return 0; sleep 0.1; done; return 1; }
ends() { # ends PID WHAT: the script ends within 10 s of its signal (else it is killed, and that fails)
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null; return 0; }; sleep 0.1; done
    fail "$2: the script still runs 10 s after the signal"
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}
for sig in TERM KILL; do
    mark="9$$.$RANDOM"
    $ring -n 2 -x -- sleep "$mark" >/dev/null 2>&1 &
    pid=$!
    started "sleep $mark" || fail "SIG$sig: ranks never started"
    kill -s "$sig" "$pid"
    ends "$pid" "SIG$sig"
    gone "sleep $mark" || fail "SIG$sig to the script left rank processes running"
done
# SIGTERM at several moments of the start-up (one of them could leave a process blocked opening
# the script's pipe forever)
for delay in 0 0.02 0.1 0.3; do
    mark="7$$.$RANDOM"
    $ring -n 2 -x -- sleep "$mark" >/dev/null 2>&1 &
    pid=$!
    sleep "$delay"
    kill -s TERM "$pid"
    ends "$pid" "SIGTERM after ${delay} s"
    gone "$mark" || fail "SIGTERM ${delay} s after the start left a process running"
done
mark="8$$.$RANDOM"
$ring -n 2 -x -- sh -c "[ \$RANK = 0 ] && exit 0; exec sleep $mark" >/dev/null 2>&1 &
pid=$!
started "sleep $mark" && kill -s TERM "$pid"
ends "$pid" "SIGTERM while one rank still runs"
gone "sleep $mark" || fail "a rank left running after the script ended"

echo "netns: $fails failures"
[ "$fails" = 0 ]
