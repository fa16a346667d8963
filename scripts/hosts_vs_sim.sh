#!/bin/bash
# Paced multi-host run vs the simulator (issue 16; issue 19's paced comparison): K = 2 emulated
# hosts x G = 2 ranks (scripts/netns_hosts.sh: network namespaces on a bridge, each host's
# interface shaped by HTB to RATE towards the other host, unshaped inside a host), the ranks as
# processes over tcp, compute paced to --device-tflops as scripts/pace_check.sh does (each
# compute op lasts at least its FLOPs / that rate, far above what the CPU needs, so the rate is
# the device's). Train gets no --link-bandwidth: the shaped host interface is the node's NIC,
# shared by the host's ranks as the kernel shares it (docs/transports.md). For each strategy,
# the measured tokens/s (rank 0's mean step over the steps after the first, from --metrics)
# beside `weipipe simulate` for the same cluster: --ranks-per-node 2 --link-bandwidth RATE (one
# NIC per direction per host, shared by its flows) --node-link-bandwidth NODE_BW.
# A benchmark, not a test: an overloaded machine makes the runs slower than predicted.
#
# usage: scripts/hosts_vs_sim.sh [WEIPIPE]   (default build/weipipe)
# knobs (environment): MODEL (model flags), MB (micro-batches), STEPS, TFLOPS, RATE (between
#   hosts, weipipe's spelling), NODE_BW (inside a host; 0 = unlimited), LINK_LAT (the simulator's
#   one-way latency between hosts; train adds none), STRATEGIES
# Exit 77 where namespaces cannot be made (netns_hosts.sh says why).
set -eu
cd "$(dirname "$0")/.."
W=${1:-build/weipipe}
MODEL=${MODEL:---num-layers 4 --hidden-size 128 --num-attention-heads 4 --num-query-groups 4 --ffn-hidden-size 352 --seq-length 256 --micro-batch-size 2 --vocab-size 256}
MB=${MB:-4}
STEPS=${STEPS:-4}
TFLOPS=${TFLOPS:-0.002}
RATE=${RATE:-16Mbit}
NODE_BW=${NODE_BW:-0}
LINK_LAT=${LINK_LAT:-0}
STRATEGIES=${STRATEGIES:-weipipe-hier weipipe-interleave tawpipe 1f1b}
[ -x "$W" ] || { echo "hosts_vs_sim: no weipipe binary at $W (build first, or pass its path)" >&2; exit 2; }
W=$(realpath "$W")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# shellcheck disable=SC2086
common="$MODEL --ranks-per-node 2 --num-microbatches $MB --device-tflops $TFLOPS"
sim_flags="$common --nranks 4 --link-bandwidth $RATE --link-latency $LINK_LAT --node-link-bandwidth $NODE_BW"
tokens=$(awk -v m="$MODEL" -v mb="$MB" 'BEGIN { n = split(m, a, " ");
  for (i = 1; i < n; i++) { if (a[i] == "--seq-length") s = a[i + 1]; if (a[i] == "--micro-batch-size") b = a[i + 1] }
  print s * b * mb }')
echo "cluster: 2 hosts x 2 ranks, $RATE each direction between hosts (HTB on each host's interface), unshaped inside a host"
echo "setting: $common, $STEPS steps; simulate: $sim_flags"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo
echo "| strategy | measured tokens/s | simulate tokens/s | simulator vs measured | measured step | simulated step |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for st in $STRATEGIES; do
  # shellcheck disable=SC2086
  sim=$("$W" simulate $sim_flags --strategy "$st" --format csv | awk -F, -v s="$st" '$1 == s {print $2}')
  [ -n "$sim" ] || { echo "hosts_vs_sim: simulate gave no row for $st" >&2; exit 1; }
  rm -f "$TMP/m.jsonl"
  rc=0
  # shellcheck disable=SC2086
  WEIPIPE=$W scripts/netns_hosts.sh -k 2 -g 2 -r "$RATE" -- $common --strategy "$st" --steps "$STEPS" --threads 1 \
    --data tests/data/tiny_train.bin --lr-decay-style constant --timeout 120s --quiet --metrics "$TMP/m.jsonl" > "$TMP/out" 2>&1 || rc=$?
  [ $rc = 77 ] && { cat "$TMP/out" >&2; exit 77; }
  [ $rc = 0 ] || { echo "hosts_vs_sim: $st failed ($rc): $(tail -5 "$TMP/out")" >&2; exit 1; }
  meas=$(sed -n 's/.*"seconds": \([^,]*\),.*/\1/p' "$TMP/m.jsonl" | awk 'NR > 1 {s += $1; n++} END {if (n) printf "%.6f", s / n}')
  [ -n "$meas" ] || { echo "hosts_vs_sim: $st: no step times in --metrics" >&2; exit 1; }
  awk -v st="$st" -v m="$meas" -v s="$sim" -v t="$tokens" 'BEGIN {
    printf "| %s | %.0f | %.0f | %+.1f%% | %.3f s | %.3f s |\n", st, t / m, t / s, 100 * (m / s - 1), m, s }'
done
