#!/bin/bash
# 1F1B against WeiPipe (Interleave, and the other weight-passing strategies) on one machine
# over TCP, with a long sequence and a narrow model past the traffic crossover: 1F1B moves about
# 2*b*s*h activation values per micro-batch and rank, Interleave about 36*h^2*L/N weight and
# gradient values, so weight passing wins once b*s > 18*h*L/N.
#
# Ranks share a 2-core machine, so compute is paced (--device-tflops: every compute action lasts
# its FLOPs at that speed) and so are the links (--link-bandwidth/--link-latency): the run
# behaves like N devices of that speed on links of that speed, and `weipipe simulate` with the
# same flags is printed beside each measurement.
#
# Columns: tokens/s (steps after the first); payload bytes sent per step by the busiest rank
# (measured by the transport = the validator's count); the transfer time those bytes need on one
# link; and the fraction of that transfer time hidden behind compute:
#   hidden = 1 - (step time - step time with free links) / transfer time
# where the step time with free links is the simulator's for the same compute (0: every byte
# lengthened the step; 1: none did).
#
# usage: scripts/compare_1f1b_interleave.sh [WEIPIPE]   (default build/weipipe)
# knobs (environment): NRANKS, MB, STEPS, TFLOPS, LINK_MBIT, LINK_LAT, STRATEGIES, MODEL
set -eu
cd "$(dirname "$0")/.."
W=${1:-build/weipipe}
NRANKS=${NRANKS:-4}
MB=${MB:-4}
STEPS=${STEPS:-3}
TFLOPS=${TFLOPS:-0.001}
LINK_MBIT=${LINK_MBIT:-4}
LINK_LAT=${LINK_LAT:-200us}
STRATEGIES=${STRATEGIES:-1f1b weipipe-interleave weipipe-naive wzb1 wzb2}
# h = 32, L = 4, N = 4: crossover at b*s = 18*32*4/4 = 576; b*s = 4*512 = 2048 is 3.6x past it
MODEL=${MODEL:---num-layers 4 --hidden-size 32 --num-attention-heads 2 --num-query-groups 2 --ffn-hidden-size 88 --seq-length 512 --micro-batch-size 4 --vocab-size 256}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# --ranks-per-node 1: every hop is a --link-* link in the transport and in the simulator alike
shape="$MODEL --nranks $NRANKS --num-microbatches $MB --ranks-per-node 1 --device-tflops $TFLOPS"
links="--link-bandwidth ${LINK_MBIT}Mbit --link-latency $LINK_LAT"
echo "setting: $shape $links; tcp, $STEPS steps; load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo
echo "| strategy | tokens/s measured | simulated | bytes/step (busiest rank) | transfer time/step | hidden measured | simulated | step measured | simulated |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for st in $STRATEGIES; do
  # shellcheck disable=SC2086
  read -r sim_step sim_tok <<< "$("$W" simulate $shape $links --strategy "$st" --format csv | awk -F, -v s="$st" '$1 == s {print $2, $3}')"
  # shellcheck disable=SC2086
  free_step=$("$W" simulate $shape --strategy "$st" --format csv | awk -F, -v s="$st" '$1 == s {print $2}')
  rm -f "$TMP/m.jsonl"
  # shellcheck disable=SC2086
  "$W" train $shape $links --data tests/data/tiny_train.bin --strategy "$st" --transport tcp --steps "$STEPS" --threads 1 \
    --metrics "$TMP/m.jsonl" 2> "$TMP/err" || { echo "train $st failed: $(tail -3 "$TMP/err")"; exit 1; }
  sed -i 's/^\[rank 0\] //' "$TMP/err" # the launcher prefixes rank 0's lines
  read -r meas_step meas_tok <<< "$(sed -n 's/.*"tokens": \([0-9]*\),.*"seconds": \([^,]*\),.*/\1 \2/p' "$TMP/m.jsonl" |
    awk 'NR > 1 {t += $1; s += $2; n++} END {printf "%.6f %.3f", s / n, t / s}')"
  bytes=$(awk '/^rank  bubble/ {on = 1; next} on && NF == 5 && $4 > m {m = $4} END {print m + 0}' "$TMP/err")
  awk -v st="$st" -v ms="$meas_step" -v mt="$meas_tok" -v ss="$sim_step" -v stok="$sim_tok" -v fs="$free_step" \
      -v b="$bytes" -v mbit="$LINK_MBIT" 'BEGIN {
    x = b / (mbit * 1e6 / 8);
    printf "| %s | %.0f | %.0f | %.0f | %.3f s | %.2f | %.2f | %.3f s | %.3f s |\n", st, mt, stok, b, x,
           1 - (ms - fs) / x, 1 - (ss - fs) / x, ms, ss }'
done
