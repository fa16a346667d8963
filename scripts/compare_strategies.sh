#!/bin/bash
# Every strategy `weipipe simulate --strategy all` knows, on the WeiPipe paper's headline shapes
# (configs/paper-h4096-s{4,8,16}k.ini: 32 layers, h 4096, 16 A800-class ranks at 312 TFLOP/s,
# two nodes of 8, NVLink inside, 10 Gbit/s Ethernet between; b = 1, M = 32 assumed) and one
# short-sequence shape (s = 2048) where passing activations should win; writes docs/comparison.md
# (compact Markdown: one table per shape). Strategies added later appear by re-running it.
#
# usage: scripts/compare_strategies.sh [WEIPIPE] [OUT]   (defaults build/weipipe, docs/comparison.md)
set -eu
cd "$(dirname "$0")/.."
W=${1:-build/weipipe}
OUT=${2:-docs/comparison.md}
[ -x "$W" ] || { echo "compare_strategies: no weipipe binary at $W (build first, or pass its path)" >&2; exit 2; }

# title | config and extra flags | the paper's report for this shape (section A4, text of its Table 2)
shapes=(
  "s = 4096|configs/paper-h4096-s4k.ini|"
  "s = 8192|configs/paper-h4096-s8k.ini|"
  "s = 16384 (headline)|configs/paper-h4096-s16k.ini|weipipe-interleave=1.223x (22.3% ahead of 1F1B);fsdp=0.686x (WeiPipe 78.4% ahead of FSDP: 1.223/1.784)"
  "s = 2048 (short)|configs/paper-h4096-s4k.ini --seq-length 2048|"
)

# One table from `simulate --format csv` (strategy,step_s,tokens_per_s,bubble,sent,peak,vs_1f1b,note,fits).
table() {
  local paper=$1
  awk -F, -v paper="$paper" '
    BEGIN { n = split(paper, p, ";"); for (i = 1; i <= n; i++) { split(p[i], kv, "="); said[kv[1]] = kv[2] } }
    NR == 1 { next }
    $2 == "" { note = $0; sub(/^[^"]*"/, "", note); sub(/",?$/, "", note)
               printf "| %s | - | - | - | - | - | %s |\n", $1, note; next }
    { printf "| %s | %.0f | %.3fx | %.1f%% | %.2f | %.2f | %s |\n", $1, $3, $7, 100 * $4, $5 / 1e9, $6 / 1e9,
             ($1 in said) ? said[$1] : "" }'
}

{
  echo "# Strategies compared (simulated)"
  echo
  echo "Made by \`scripts/compare_strategies.sh\` from \`weipipe simulate --strategy all --format csv\`"
  echo "(the discrete-event simulator of docs/schedules.md on the very action lists the runtime runs)."
  echo "Machine: 16 ranks at 312 TFLOP/s, 2 nodes of 8, NVLink 400 GByte/s inside, 10 Gbit/s between;"
  echo "model: Llama-style, 32 layers, h 4096, ffn 11008, 32 heads, V 32000, mixed precision, recompute"
  echo "for every strategy; b = 1 and M = 32 per step (the paper states neither: our assumption)."
  echo "interleaved-1f1b runs v = 2 chunks per rank, depth-first; the others one chunk per rank."
  echo "Bytes are the busiest rank's per step, memory the largest rank's peak (buffers, activation"
  echo "states, 16 bytes per owned parameter); GB = 1e9 bytes."
  echo
  echo "The paper's column: what it reports for that shape (section A4, text of its Table 2; the"
  echo "table's absolute numbers are not in our copy). It ran 1F1B and the zero-bubble schedules in"
  echo "Megatron-LM, FSDP in DeepSpeed ZeRO-3, and WeiPipe-Interleave alone of its own strategies;"
  echo "it disabled recomputation for the zero-bubble schedules, which we do not. It also reports that"
  echo "1F1B has the smallest memory of the pipeline strategies and that the zero-bubble peak (last"
  echo "rank, before its first W-pass) is about twice rank 0's. At s = 16384 it reports WeiPipe-Interleave"
  echo "22.3% ahead of 1F1B and 78.4% ahead of FSDP."
  echo
  echo "Reading: at b = 1 every weight-passing rank receives about three copies of the model per"
  echo "micro-batch it runs, far more than 1F1B's activations, and the 10 Gbit/s link between the nodes"
  echo "decides the step (docs/schedules.md, \"The paper's headline setting\", derives the crossover in b"
  echo "and shows Interleave ahead of 1F1B from b = 8 on). Among the activation-passing schedules GPipe"
  echo "loses to 1F1B on this link-bound ring (its forward and backward phases each use one direction of"
  echo "the links), interleaved-1f1b moves v times the activations and crosses the slow link 2v - 1 times"
  echo "per micro-batch instead of once, and ZB-H1/ZB-H2 gain by filling the bubble with W-passes at the"
  echo "price of activation memory (the split backward's state lives until its W-pass)."
  for s in "${shapes[@]}"; do
    IFS='|' read -r name args paper <<<"$s"
    echo
    echo "## $name"
    echo
    echo "\`weipipe simulate --strategy all --config $args --format csv\`"
    echo
    echo "| strategy | tokens/s | vs 1f1b | bubble | GB sent/rank/step | peak GB/rank | paper |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
    # shellcheck disable=SC2086 # args holds the config and its extra flags
    "$W" simulate --strategy all --config $args --format csv | table "$paper"
  done
} >"$OUT"
echo "wrote $OUT"
