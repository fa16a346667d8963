#!/bin/sh
# Emulated slow links: a transfer of X bytes at bandwidth B with latency L should take about
# X/B + L, over both transports. Prints one line per repeat (measured, expected, ratio).
# usage: scripts/bench_link.sh [BUILD_DIR]   (default: $WEIPIPE_BUILD or build)
set -eu
cd "$(dirname "$0")/.."
build=${1:-${WEIPIPE_BUILD:-build}}
bench="$build/tests/ring/bench_link"
[ -x "${BENCH:-$bench}" ] || ninja -C "$build" tests/ring/bench_link >/dev/null
for transport in local tcp; do
    "${BENCH:-$bench}" "$transport" 8M 100Mbit 20ms 1 3
    "${BENCH:-$bench}" "$transport" 64M 1Gbit 20ms 2 3
    "${BENCH:-$bench}" "$transport" 1K 1Gbit 50ms 1 3
    "${BENCH:-$bench}" "$transport" 64M 10Gbit 100us 4 3
done
