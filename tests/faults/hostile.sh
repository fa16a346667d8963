#!/bin/bash
# Strangers at a running job's ports: every listener of every rank (data and rendezvous) gets
# random bytes, a well-formed handshake with a guessed secret, one with a wrong protocol
# version, a handshake cut short, a silent connection and a 256 KiB blast. Each is refused and
# logged; the job is not disturbed (its losses equal an unattacked run's bit for bit). Every
# listener is bound to --bind's address (127.0.0.1 by default), not to every interface.
source "$(dirname "$0")/faults_lib.sh"
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
command -v ss > /dev/null || { echo "skip: ss (iproute2) is not installed"; exit 77; }
common=(--nranks 3 --strategy weipipe-interleave --steps 100 --timeout 10s)
train "${common[@]}" --metrics "$TMP/calm.jsonl" || fail "the unattacked run"

# Link latency keeps the attacked job running while the attacker works (a quiet machine runs
# 100 tiny steps in about a second); pacing changes no arithmetic, so the losses must still match.
start_job "$TMP/log" "${common[@]}" --link-latency 2ms --metrics "$TMP/attacked.jsonl"
wait_ranks 3
# Once the first step is reported the rendezvous is over (its listener closed) and every rank
# listens for data: those are the ports to attack.
for _ in $(seq 600); do
  [ -s "$TMP/attacked.jsonl" ] && break
  sleep 0.05
done
listen=$(ss -ltnpH | grep -E "pid=($(echo $KIDS | tr ' ' '|')),")
n=$(echo "$listen" | grep -c .)
[ "$n" -ge 3 ] || { kill $LAUNCHER; fail "found $n listening sockets of the ranks: $listen"; }
addrs=$(echo "$listen" | awk '{print $4}')
wild=$(echo "$addrs" | grep -v '^127\.0\.0\.1:')
[ -z "$wild" ] || { kill $LAUNCHER; fail "listeners not bound to 127.0.0.1: $wild"; }
ports=$(echo "$addrs" | sed 's/.*://' | tr '\n' ' ')
# The attacker knows the job id (not a secret: it names the job), so that a guessed secret is
# what gets refused.
job=$(tr '\0' '\n' < /proc/${KIDS%% *}/environ | sed -n 's/^WEIPIPE_JOB_ID=//p')
$PY - "$job" $ports <<'PY' || { kill $LAUNCHER; fail "the attacker failed"; }
import os, random, socket, struct, sys, time, zlib
random.seed(5)
job = sys.argv[1].encode()
def hs(version=4, secret=b"guessed-secret"):  # wire.h's version 4: crc32 of bytes 0..227 at 228
    h = bytearray(232)
    h[0:8] = b"WEIPIPE\n"
    struct.pack_into("<HHIIHHI", h, 8, version, 1, 0, 3, 0, 1, 1 << 20)
    h[32:32 + len(job)], h[96:96 + len(secret)] = job, secret
    struct.pack_into("<I", h, 228, zlib.crc32(bytes(h[:228])))
    return bytes(h)
attacks = [("random bytes", bytes(random.randrange(256) for _ in range(232)), True),
           ("guessed secret", hs(), True),
           ("wrong version", hs(version=7), True),
           ("cut handshake", hs()[:100], True),
           ("silent", b"", False),
           ("256 KiB blast", os.urandom(256 << 10), True)]
held = []
for port in map(int, sys.argv[2:]):
    for name, data, close in attacks:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            s.sendall(data)
        except OSError:
            pass  # refused mid-send: the listener hung up on us, as it should
        (s.close() if close else held.append(s))
time.sleep(1.0)
for s in held:
    s.close()
print(f"{len(attacks)} attacks on each of {len(sys.argv) - 2} listening ports")
PY
wait $LAUNCHER || { cat "$TMP/log"; fail "the attacked job failed"; }
refused=$(grep -c "refused a connection" "$TMP/log")
[ "$refused" -ge $(( $(echo $ports | wc -w) * 4 )) ] || { cat "$TMP/log"; fail "only $refused refusals logged"; }
[ "$(losses_from "$TMP/attacked.jsonl" 1)" = "$(losses_from "$TMP/calm.jsonl" 1)" ] || fail "the attacked run's losses differ from the calm run's"
echo "listeners: $(echo $addrs | tr '\n' ' ')(all 127.0.0.1); $refused refusals logged, e.g.:"
grep "refused a connection" "$TMP/log" | sed 's/.*: refused a connection from [0-9.:]*: //' | sort | uniq -c
echo "the attacked job finished with the calm run's 100 losses, bit for bit"
