#!/bin/bash
# Does the simulator predict a paced real run? For each strategy at N ranks, over the local
# (threads) and tcp (processes) transports, train with --device-tflops (compute pacing,
# src/runtime/compute_pace.h) and --link-bandwidth/--link-latency (link pacing, ring/link/link_model.h), and compare
# the measured step time (rank 0's mean over the steps after the first, from --metrics) with
# `weipipe simulate` for the same flags, and with the prediction train prints at its end (the
# same simulator, fed this run's measured optimizer-op times, which train does not pace).
# A benchmark, not a test: the numbers depend on how loaded the machine is (pacing is a lower
# bound per op, so an overloaded machine makes runs slower than predicted, never faster).
#
# usage: scripts/pace_check.sh [WEIPIPE]   (default build/weipipe)
# knobs (environment): MODEL (model flags), NRANKS, MB (micro-batches), STEPS, TFLOPS, LINK_BW,
#                      LINK_LAT, STRATEGIES, TRANSPORTS, EXTRA (more train/simulate flags)
# The default model has compute actions of 30-300 ms at the default speed and, on the default
# link, about as much transfer as compute per step (1F1B somewhat more, weight passing less).
set -eu
cd "$(dirname "$0")/.."
W=${1:-build/weipipe}
MODEL=${MODEL:---num-layers 4 --hidden-size 32 --num-attention-heads 2 --num-query-groups 2 --ffn-hidden-size 88 --seq-length 512 --micro-batch-size 4 --vocab-size 256}
NRANKS=${NRANKS:-4}
MB=${MB:-4}
STEPS=${STEPS:-3}
TFLOPS=${TFLOPS:-0.001}
LINK_BW=${LINK_BW:-4Mbit}
LINK_LAT=${LINK_LAT:-200us}
STRATEGIES=${STRATEGIES:-1f1b weipipe-naive weipipe-interleave wzb1 wzb2}
TRANSPORTS=${TRANSPORTS:-local tcp}
EXTRA=${EXTRA:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# shellcheck disable=SC2086
# --ranks-per-node 1: every hop is a --link-* link, in the transport and in the simulator alike
# (with 0 the transport paces every hop as --link-* but the simulator puts all ranks on one node).
common="$MODEL --nranks $NRANKS --num-microbatches $MB --device-tflops $TFLOPS --link-bandwidth $LINK_BW --link-latency $LINK_LAT --ranks-per-node 1 $EXTRA"
echo "setting: $common, $STEPS steps; load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo
echo "| strategy | transport | measured step | simulate | error | train's own prediction | error | bubble measured (mean) | predicted |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for st in $STRATEGIES; do
  # shellcheck disable=SC2086
  sim=$("$W" simulate $common --strategy "$st" --format csv | awk -F, -v s="$st" '$1 == s {print $2}')
  for tr in $TRANSPORTS; do
    rm -f "$TMP/m.jsonl"
    # shellcheck disable=SC2086
    "$W" train $common --data tests/data/tiny_train.bin --strategy "$st" --transport "$tr" --steps "$STEPS" \
      --threads 1 --metrics "$TMP/m.jsonl" 2> "$TMP/err" || { echo "train $st $tr failed: $(tail -3 "$TMP/err")"; exit 1; }
    meas=$(sed -n 's/.*"seconds": \([^,]*\),.*/\1/p' "$TMP/m.jsonl" | awk 'NR > 1 {s += $1; n++} END {printf "%.6f", s / n}')
    sed -i 's/^\[rank 0\] //' "$TMP/err" # over tcp the launcher prefixes each rank's lines
    own=$(sed -n 's/.*simulator \([0-9.e+-]*\) s.*/\1/p' "$TMP/err")
    bub=$(awk '/^rank  bubble/ {on = 1; next} on && NF == 5 {m += $2; p += $3; n++} END {printf "%.3f %.3f", m / n, p / n}' "$TMP/err")
    awk -v st="$st" -v tr="$tr" -v m="$meas" -v s="$sim" -v o="$own" -v b="$bub" 'BEGIN {
      split(b, bb, " ");
      printf "| %s | %s | %.1f ms | %.1f ms | %+.1f%% | %.1f ms | %+.1f%% | %s | %s |\n", st, tr, 1e3 * m, 1e3 * s,
             100 * (m - s) / s, 1e3 * o, 100 * (m - o) / o, bb[1], bb[2] }'
  done
done
