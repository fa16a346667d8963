#!/bin/bash
# The honest comparison (issue 18), written to docs/comparison.md: on the WeiPipe paper's shapes
# (configs/paper-h4096-s{4,8,16}k.ini: 32 layers, h 4096, 16 A800-class ranks, two nodes of 8,
# NVLink inside, 10 Gbit/s Ethernet between, 80 GB per rank; b = 1, M = 32 assumed) every strategy
# at its best knob setting that fits in memory (`weipipe simulate --strategy auto`), at the
# effective 156 TFLOP/s (50% MFU, the presets say where that comes from) and, at the headline,
# at the 312 TFLOP/s peak for reference; the ablations that explain Interleave's lead; and the
# map of which strategy wins over b x s (scripts/winner_map.sh, docs/img/winner-map-paper-n16.png);
# issue 19's goal cases (every strategy at its best knobs), its map of where weipipe-hier wins
# (scripts/hier_map.sh) and the paced emulated-hosts run (copied from scripts/hosts_vs_sim.sh).
#
# usage: scripts/compare_strategies.sh [WEIPIPE] [OUT]   (defaults build/weipipe, docs/comparison.md)
# The whole script took 23 minutes here with the searches on one thread (2 cores, under load):
# hier_map.sh 17, the goal case at 32 ranks and M up to 2048 2.5; they now use every CPU.
# GOAL_CSV=DIR reuses DIR/CONFIG.csv (DIR/CONFIG-b8.csv for the headline case) where present, the
# output of exactly the command the section prints, from the same binary; HIER_MD=FILE reuses
# FILE, scripts/hier_map.sh's output from the same binary.
set -eu
cd "$(dirname "$0")/.."
W=${1:-build/weipipe}
OUT=${2:-docs/comparison.md}
[ -x "$W" ] || { echo "compare_strategies: no weipipe binary at $W (build first, or pass its path)" >&2; exit 2; }
H=configs/paper-h4096-s16k.ini
WI="at b = 1 a weight-passing rank receives about 12 times 1F1B's bytes over the 10 Gbit/s hop, and the paper states neither b nor M"

# One table from `simulate --strategy auto --format csv` (strategy,step_s,tokens_per_s,bubble,
# sent,peak,vs_1f1b,note,fits,knobs; rows that fit first, best first): each strategy's best row
# that fits, else its fastest row marked "does not fit"; ratios against the best 1f1b that fits.
# $1: the paper's figure per strategy, "name=text;name=text".
table() {
  awk -F, -v paper="$1" '
    BEGIN { n = split(paper, p, ";"); for (i = 1; i <= n; i++) { e = index(p[i], "="); said[substr(p[i], 1, e - 1)] = substr(p[i], e + 1) } }
    NR == 1 { next }
    !($1 in row) { row[$1] = $0; order[++k] = $1 }
    $1 == "1f1b" && $9 == "true" && base == "" { base = $3 }
    END {
      for (i = 1; i <= k; i++) {
        split(row[order[i]], f, ",")
        fit = f[9] == "true" ? "fits" : "**does not fit**"
        printf "| %s | %.0f | %s | %.1f%% | %.2f | %.2f | %s | `%s` | %s |\n", f[1], f[3],
               (base != "" && f[9] == "true") ? sprintf("%.3fx", f[3] / base) : "-", 100 * f[4], f[5] / 1e9, f[6] / 1e9,
               fit, f[10], (f[1] in said) ? said[f[1]] : ""
      }
    }'
}

header="| strategy | tokens/s | vs best 1f1b | bubble | GB sent/rank/step | peak GB/rank | 80 GiB | its best knobs | paper (section A4, Table 2 text) |
| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"

goal_header="${header/paper (section A4, Table 2 text)/ }"

# ratio of weipipe-interleave to 1f1b (and interleaved-1f1b to 1f1b) under extra flags
ratio() {
  # shellcheck disable=SC2086 # $* holds flags
  "$W" simulate --strategy all --config $H --format csv $* |
    awk -F, '$1 == "1f1b" { a = $3 } $1 == "weipipe-interleave" { w = $3 } END { printf "%.0f | %.0f | %.3fx", a, w, w / a }'
}

{
  cat <<HEAD
# Strategies compared (simulated, honest rules)

Made by \`scripts/compare_strategies.sh\` (the discrete-event simulator of docs/schedules.md on the
very action lists the runtime runs). The rules (issue 18):

- **Effective device speed.** \`--device-tflops\` is the rate a device really computes at, not its
  peak: the presets carry 156 TFLOP/s, 50% of the A800's 312 (Megatron-LM reaches 52% of peak per
  A100 end to end, Narayanan et al. SC'21, arXiv 2104.04473; Seq1F1B's Table 3 measures 99.7-124.0
  TFLOP/s per A100 with 1F1B). Our own compute-only MFU at h = 4096, measured on an H200 (docs/performance.md),
  is 58-65% for a block and 50% for 4 layers with the LM head; the presets keep 50% because they
  model the paper's A800 cluster, where we have measured nothing. The headline is also given at
  the 312 TFLOP/s peak, for reference.
- **Memory fit.** 80 GiB = 85.9 GB per rank (\`--device-memory 80G\`); a configuration whose peak
  exceeds it is marked **does not fit** and is never ranked. The peak is the memory model of
  docs/memory.md (every buffer, pool, activation state, the LM head's logits, 16 bytes per owned
  parameter), held within 10% of the measured allocator on every strategy (issue 29); the model
  before it was 15-100% low, and every table here was searched again under it.
- **Every strategy at its best.** Each row is the strategy's fastest configuration that fits among
  every knob setting \`weipipe simulate --strategy auto\` tries at the same tokens per step (b with
  M = 32/b, even or FLOP-balanced chunks, 0-2 extra warm-up forwards before the slow hop, seq1f1b's
  segments, wzb2's owner, interleaved-1f1b's 2N/4N chunks and loop order); the knobs column gives
  the flags that reproduce it. Ratios are against the best 1F1B that fits.
- Machine: 16 ranks, 2 nodes of 8, NVLink 400 GByte/s inside, 10 Gbit/s between; model Llama-style,
  32 layers, h 4096, ffn 11008, 32 heads, V 32000, mixed precision, recompute; b = 1 and M = 32
  per step unless the knobs say otherwise (the paper states neither). GB = 1e9 bytes.

The paper's column: what it reports for that shape (section A4, text of its Table 2). It ran
1F1B and the zero-bubble schedules in Megatron-LM, FSDP in DeepSpeed ZeRO-3, and
WeiPipe-Interleave alone of its own strategies. WZB1 here follows the paper's figure 3
(docs/schedules.md, "WZB1").

## s = 16384 (headline), effective 156 TFLOP/s

\`weipipe simulate --strategy auto --config $H --format csv\`

$header
HEAD
  "$W" simulate --strategy auto --config $H --format csv |
    table "weipipe-interleave=1.223x of 1F1B (ours far lower: $WI);fsdp=Interleave 1.784x of FSDP (ours: FSDP ahead of Interleave: both move weights, FSDP without a pipeline bubble)"
  cat <<HEAD

## s = 16384 at the 312 TFLOP/s peak (reference)

\`weipipe simulate --strategy auto --config $H --device-tflops 312 --format csv\`

$header
HEAD
  "$W" simulate --strategy auto --config $H --device-tflops 312 --format csv | table "weipipe-interleave=1.223x of 1F1B ($WI)"
  cat <<HEAD

## Where Interleave's lead at b = 8 comes from: ablations

WeiPipe-Interleave against 1F1B (each with --strategy all's default knobs but the warm-up named)
at the headline shape, M = 32. *Unlimited links*: \`--link-bandwidth 0 --node-link-bandwidth 0\`;
*no LM head*: \`--vocab-size 2\` (the head's FLOPs vanish, so 1F1B's last stage is no heavier than
the others); *warm-up 1*: \`--warmup-extra 1\`.

| b | TFLOP/s | setting | 1f1b tokens/s | weipipe-interleave tokens/s | Interleave / 1F1B |
| ---: | ---: | --- | ---: | ---: | ---: |
HEAD
  for tf in 312 156; do
    for b in 1 8; do
      for set in "as is, textbook warm-up|--warmup-extra 0" "unlimited links|--warmup-extra 0 --link-bandwidth 0 --node-link-bandwidth 0" \
                 "warm-up 1|--warmup-extra 1" "no LM head|--warmup-extra 0 --vocab-size 2" "no LM head, warm-up 1|--warmup-extra 1 --vocab-size 2"; do
        echo "| $b | $tf | ${set%%|*} | $(ratio --device-tflops $tf --micro-batch-size $b ${set#*|}) |"
      done
    done
  done
  cat <<'TEXT'

Reading: at b = 8 Interleave's lead over textbook 1F1B is the same with unlimited links (1.174×
at peak, 1.172× → 1.174× at 156 TFLOP/s), so it is not a communication win. It comes from 1F1B's
heavier last stage (the LM head: removing it alone changes the lead to 1.241× at peak, because
Interleave gains as well, but at 156 TFLOP/s to 1.147×) and from the warm-up bubble in front of
the slow hop: one extra warm-up forward there with no head leaves Interleave 1.119× (peak) and
1.025× (156 TFLOP/s) ahead. At b = 1 Interleave sends about 12 times 1F1B's bytes and the 10 Gbit/s
hop decides (0.19× at peak); with unlimited links it would lead there too (1.171×).

## Which strategy wins where

`scripts/winner_map.sh` (the headline preset at 156 TFLOP/s, M = 32; each strategy at its best of
--warmup-extra 0/1 and --seq-segments 2/8; the fastest that fits in 80 GiB wins; in brackets its
lead over the runner-up strategy):

TEXT
  scripts/winner_map.sh "$W" docs/img/winner-map-paper-n16.png
  cat <<'TEXT'

![winner map](img/winner-map-paper-n16.png)

Seq1F1B (mostly with 8 segments: a shorter warm-up ramp at 1F1B's memory) wins wherever it fits
up to b·s = 32,768 tokens per micro-batch, and again at 131,072; TawPipe wins all along
b·s = 65,536 (1.10-1.13x over the runner-up; what crosses the 10 Gbit/s NICs is weights and
gradients, the same at any b·s, while 1F1B's activations grow with it). Past that, weight passing
runs out of memory first: its circulating weights and gradient buffers come on top of the
activations, so at 131,072 tokens tawpipe (111 GB per rank) and fsdp (92 GB) no longer fit and
Seq1F1B, whose warm-up holds segments (an eighth of a micro-batch each), not whole ones, wins by
1.31-1.34x; beyond 131,072 nothing fits in 80 GiB. Under the memory model before issue 29
(15-100% low) TawPipe won at 131,072 and FSDP at 262,144, where it needs 167 GB. A node's 8 ranks
share one NIC per direction. WeiPipe's single ring wins nowhere: its weights cost more than
1F1B's activations up to b·s = 18hL/N = 147,456 tokens, and beyond that WeiPipe-Interleave no
longer fits.
TEXT
  for shape in "s = 8192|configs/paper-h4096-s8k.ini" "s = 4096|configs/paper-h4096-s4k.ini" \
               "s = 2048 (short)|configs/paper-h4096-s4k.ini --seq-length 2048"; do
    IFS='|' read -r name args <<<"$shape"
    printf '\n## %s, effective 156 TFLOP/s\n\n`weipipe simulate --strategy auto --config %s --format csv`\n\n%s\n' "$name" "$args" "$header"
    # shellcheck disable=SC2086 # args holds the config and its extra flags
    "$W" simulate --strategy auto --config $args --format csv | table ""
  done
  # issue 19's goal cases: every strategy at its best knobs at the case's sequences per step
  printf '\n## weipipe-hier at the issue-19 goal cases (every strategy at its best knobs)\n\n'
  printf 'Each row: the strategy'"'"'s fastest setting that fits among all `weipipe simulate --strategy auto`\n'
  printf 'tries at the case'"'"'s sequences per step (every b that divides them, M = sequences / b).\n'
  printf 'docs/schedules.md reads them against the goals and says what limits weipipe-hier.\n'
  for goal in "link-bound: 4 x 8 ranks, 400 TFLOP/s, 10 Gbit/s, h 2048, L 32, s 8192, 64 sequences per rank|configs/hier-goal-4x8-h2048.ini|" \
              "TawPipe's cluster: 3 x 8 ranks, h 1024, L 48, s 16384, 64 sequences per rank|configs/tawpipe-3x8-h1024.ini|" \
              "the WeiPipe paper's headline cluster, 256 sequences per step (16 per rank)|$H|--micro-batch-size 8"; do
    IFS='|' read -r name config extra <<<"$goal"
    printf '\n### %s\n\n`weipipe simulate --strategy auto --config %s %s--format csv`\n\n%s\n' "$name" "$config" \
      "${extra:+$extra }" "$goal_header"
    cached=${GOAL_CSV:-/nonexistent}/$(basename "$config" .ini)${extra:+-b8}.csv
    if [ -s "$cached" ]; then cat "$cached"; else
      # shellcheck disable=SC2086 # extra holds flags
      "$W" simulate --strategy auto --config "$config" $extra --format csv
    fi | table ""
  done
  cat <<'TEXT'

## Where weipipe-hier wins: bandwidth between nodes x tokens per rank per step (issue 19's map)

`scripts/hier_map.sh` (17 minutes here on one thread): the link-bound goal cluster (4 x 8 ranks, 400 TFLOP/s
effective, one shared NIC per node and direction, h 2048, L 32, s 8192), every strategy at its
best knob setting that fits in 80 GiB (`weipipe simulate --strategy auto` at the cell's sequences
per step, as the goal cases above). Each cell: the winner, weipipe-hier's tokens/s against the
best other strategy that fits, and 1F1B's R = its activation transfer per micro-batch over the NIC
/ its busiest stage's compute per micro-batch at b = sequences / min(128, sequences) (1F1B is
link-bound where R > 1).

TEXT
  if [ -s "${HIER_MD:-/nonexistent}" ]; then cat "$HIER_MD"; else scripts/hier_map.sh "$W"; fi
  cat <<'TEXT'

weipipe-hier wins where 1F1B is link-bound (R > 1) once a rank has enough tokens per step to hide
the once-a-step exchange of the model (docs/schedules.md, "What stays exposed"): at 1 Gbit/s from
32k tokens per rank on (1.64-2.45x), at 10 Gbit/s at 32k (1.33x 1f1b) and 524k (1.05x fsdp), with
fsdp 2% ahead at 131k. With faster links it wins once more (25 Gbit/s, 524k: 1.02x) and ties fsdp
at 524k (100 and 400 Gbit/s); fsdp wins the other large steps and seq1f1b the small ones, and at
8k tokens per rank per step the exchange is not hidden at any bandwidth. Held to each cell's
b = sequences / min(128, sequences) (this map before the searches became fast), the other
strategies looked far weaker: weipipe-hier read up to 5.97x there, against baselines at a b that
did not suit them.
TEXT
  # measured, not simulated: copied from scripts/hosts_vs_sim.sh's output (rerun it to refresh)
  cat <<'TEXT'

## Paced real run on emulated hosts vs the simulator (issue 19)

Not simulated alone: 2 emulated hosts x 2 ranks (`scripts/netns_hosts.sh`: network namespaces,
each host's interface shaped by HTB to 16 Mbit/s towards the other, unshaped inside a host),
processes over tcp, compute paced to 0.002 TFLOP/s, a small model (h 128, L 4, s 256, b 2, M 4),
the four strategies one after another in one run of `scripts/hosts_vs_sim.sh`, beside `weipipe
simulate --ranks-per-node 2 --link-bandwidth 16Mbit --node-link-bandwidth 0` (docs/scaling.md
has the setting in full and the discussion). 2-core machine at a load average of about 2
(`scripts/hosts_vs_sim.sh`, 50 s):

| strategy | measured tokens/s | simulate tokens/s | simulator vs measured |
| --- | ---: | ---: | ---: |
| weipipe-hier | 762 | 773 | +1.5% |
| weipipe-interleave | 547 | 577 | +5.4% |
| tawpipe | 810 | 776 | -4.1% |
| 1f1b (`--warmup-extra auto`: 1) | 731 | 720 | -1.5% |

All four within 5.4%. With a link per rank pair between hosts (the simulator before a node's NIC
was shared) weipipe-hier would have been predicted 26% and tawpipe 10% too fast (the run before
weipipe-hier's gateways and bf16 drain).
TEXT
} >"$OUT"
echo "wrote $OUT"
