#!/bin/bash
# Issue 19's map: which strategy wins over (bandwidth between nodes) x (tokens per rank per step)
# on the link-bound goal cluster (configs/hier-goal-4x8-h2048.ini: 4 nodes x 8 ranks, 400 TFLOP/s
# effective, one shared NIC per node, h 2048, L 32, s 8192), every strategy at its best knob
# setting that fits (`simulate --strategy auto` at the cell's sequences per step: every b that
# divides them, and every other knob, as docs/comparison.md's goal cases), with 1F1B's R (its
# activation transfer time per micro-batch over the NIC / its busiest stage's compute time per
# micro-batch, from the layout's FLOPs at the effective rate, at b = sequences per step /
# min(128, sequences per step); 1F1B is link-bound where R > 1).
# Prints a Markdown table: the winner, weipipe-hier's tokens/s against the best other strategy
# that fits, and R.
#
# usage: scripts/hier_map.sh [WEIPIPE]   (default build/weipipe; 17 minutes on one thread of 2
# cores under load; the searches now use every CPU)
set -eu
cd "$(dirname "$0")/.."
W=${1:-build/weipipe}
CONFIG=configs/hier-goal-4x8-h2048.ini
[ -x "$W" ] || { echo "hier_map: no weipipe binary at $W (build first, or pass its path)" >&2; exit 2; }
N=32 S=8192 H=2048 L=32 FFN=5504 V=32000 TFLOPS=400
bws=(1 10 25 100 400)            # Gbit/s between nodes
per=(1 4 16 64)                  # sequences per rank per step (x 8192 tokens)
printf '| Gbit/s \\ tokens per rank per step |'
for p in "${per[@]}"; do printf ' %s |' "$((p * S))"; done
printf '\n| --- |'
for _ in "${per[@]}"; do printf ' --- |'; done
printf '\n'
for bw in "${bws[@]}"; do
  printf '| %s |' "$bw"
  for p in "${per[@]}"; do
    total=$((p * N)) m=$((p * N < 128 ? p * N : 128))
    b=$((total / m))
    cell=$("$W" simulate --strategy auto --config "$CONFIG" --micro-batch-size "$b" --num-microbatches "$m" \
             --link-bandwidth "${bw}Gbit" --format csv |
      awk -F, -v b="$b" -v bw="$bw" -v S=$S -v H=$H -v L=$L -v F=$FFN -v V=$V -v N=$N -v T=$TFLOPS '
        NR > 1 && $9 == "true" && !($1 in tps) { tps[$1] = $3 } # rows that fit come best first
        END {
          hier = tps["weipipe-hier"]; best = 0
          for (s in tps) if (s != "weipipe-hier" && tps[s] > best) { best = tps[s]; other = s }
          win = hier > best ? "weipipe-hier" : other
          # R: b*s*h*2 bytes (bf16 activations) over the NIC, against the busiest stage: L/N
          # layers + the LM head, forward + backward (+ recompute forward) = 8 x 2 x params x tokens
          # plus attention 4 x 2 x s x h x tokens (causal: half) per layer and pass
          tok = b * S; layer = 4 * H * H + 3 * H * F
          flops = (L / N) * (8 * layer * tok + 4 * 4 * S * H * tok / 2) + 6 * H * V * tok
          R = (tok * H * 2 * 8 / (bw * 1e9)) / (flops / (T * 1e12))
          printf "%s, hier %.2fx of %s, R %.2f", win, hier / best, other, R
        }')
    printf ' %s |' "$cell"
  done
  printf '\n'
done
