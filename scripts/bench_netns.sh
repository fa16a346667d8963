#!/bin/bash
# A transfer of X bytes over a link of Y bit/s should take about X/Y. Measured two ways:
#  netns: kernel links (scripts/netns_ring.sh: two network namespaces, HTB-shaped veth pairs),
#         one TCP connection, the sender's clock at its first byte to the receiver's last byte;
#  pace:  weipipe's own tcp transport with --link-bandwidth (tests/ring/bench_link, loopback).
# Prints one line per repeat: measured, X/Y, ratio. A benchmark: nothing is asserted.
# usage: scripts/bench_netns.sh [BUILD_DIR] [REPEATS]   (default: $WEIPIPE_BUILD or build; 3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${WEIPIPE_BUILD:-build}}
repeats=${2:-3}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
bench="$build/tests/ring/bench_link"
[ -x "$bench" ] || ninja -C "$build" tests/ring/bench_link >/dev/null

# Rank 1 listens, rank 0 sends its start time (CLOCK_MONOTONIC, shared by all namespaces of the
# machine) and then X bytes; rank 1 prints the time from that start to the last byte.
transfer='
import os, socket, struct, sys, time
n, reps, rate = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
peer = "10.77.0.2"
if os.environ["RANK"] == "1":
    srv = socket.create_server((peer, 5001))
    for _ in range(reps):
        c, _ = srv.accept()
        got, t0 = 0, None
        hdr = b""
        while len(hdr) < 8:
            hdr += c.recv(8 - len(hdr))
        (t0,) = struct.unpack("d", hdr)
        while got < n:
            b = c.recv(1 << 20)
            if not b:
                sys.exit("sender closed early")
            got += len(b)
        took = time.monotonic() - t0
        c.sendall(b"k")
        c.close()
        print("netns %10d bytes: %8.4f s, expected %8.4f s (X/Y), ratio %.3f" % (n, took, n * 8 / rate, took / (n * 8 / rate)), flush=True)
else:
    buf = bytes(n)
    for _ in range(reps):
        for _ in range(500):
            try:
                s = socket.create_connection((peer, 5001))
                break
            except OSError:
                time.sleep(0.01)
        else:
            sys.exit("cannot reach " + peer)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.sendall(struct.pack("d", time.monotonic()))
        s.sendall(buf)
        s.recv(1)
        s.close()
'

case_() {   # X RATE BITS_PER_S
    echo "== $1 at $2"
    scripts/netns_ring.sh -n 2 -r "$2" -x -- "$py" -c "$transfer" "$(numfmt --from=iec "$1")" "$repeats" "$3" 2>/dev/null |
        sed -n 's/^\[rank 1\] //p'
    "$bench" tcp "$1" "$2" 0 1 "$repeats" | sed -n 's/^tcp  */pace  /p'
}
case_ 8M 100Mbit 1e8
case_ 64M 1Gbit 1e9
case_ 256M 4Gbit 4e9
