#!/bin/bash
# The memory prediction held against the measurement (docs/memory.md): each run is 4 ranks as
# threads, --eval-every and --sample-every on, CPU, one thread per rank; each rank's allocator
# high-water must be within 10% of its prediction, and the process's resident high-water within
# 10% of the ranks' predictions summed plus a fixed 256 MiB (the program, OpenBLAS, the C
# library's arenas). Prints one markdown row per run; exits 1 when any run is off.
#
#   scripts/memory_sweep.sh [RUN...]        RUN = strategy:precision:recompute(0|1)
#   scripts/memory_sweep.sh --per-unit [STRATEGY...]   bytes per parameter and per token, measured
# Without RUNs: the whole product, every strategy of strategies.def x fp32/mixed x recompute
# off/on (56 runs with zb-v, ~1 min on an idle core). tests/runtime/memory.sh runs a rotation of it.
# WEIPIPE (default ./build/weipipe), CONFIG, DATA, VAL choose the program and the tiny set;
# MEMORY_SANITIZE=address|thread checks only the allocator (a sanitizer's shadow memory is resident).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
W=${WEIPIPE:-$here/build/weipipe}
CFG=${CONFIG:-$here/configs/tiny.ini}
DATA=${DATA:-$here/tests/data/tiny_train.bin}
VAL=${VAL:-$here/tests/data/tiny_val.bin}
SAN=${MEMORY_SANITIZE:-none}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
model=(--num-layers 4 --hidden-size 128 --ffn-hidden-size 352 --num-attention-heads 4 --num-query-groups 2
       --vocab-size 16000 --seq-length 64 --micro-batch-size 2 --num-microbatches 4)
# --per-unit: each strategy and precision trained (no eval, no sample) at 4 and 8 layers and at
# sequence length 64 and 128; the allocator's high-water summed over the 4 ranks and the worst
# rank's, differenced: per parameter from the 4 layers added, per token of a micro-batch (b x s)
# from the 128 tokens added (interleaved-1f1b and zb-v: 8 and 12 layers, 8 chunks). Weights, gradients and optimizer state scale with parameters;
# activations, logits and scratch with tokens.
per_unit() {
  local S=$1 P=$2 layers=$3 seq=$4
  rm -f "$TMP/m.jsonl"
  local extra=(); case $S in interleaved-1f1b|zb-v) extra=(--num-chunks 8) layers=$((layers + 4)) ;; esac # two chunks per rank
  "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --timeout 60s "${model[@]}" --nranks 4 \
    --transport local --strategy "$S" --precision "$P" --steps 2 --metrics "$TMP/m.jsonl" --num-layers "$layers" \
    --seq-length "$seq" "${extra[@]}" > "$TMP/out" 2>&1 || { echo "FAILED $S $P: $(tail -1 "$TMP/out")" >&2; return 1; }
  grep '"memory"' "$TMP/m.jsonl" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())["memory"]
print(sum(x["peak_bytes"] for x in r), max(x["peak_bytes"] for x in r))'
}
if [ "${1:-}" = --per-unit ]; then
  # parameters of one layer: attention (q, o: h x h; k, v: h x kv heads x head dim), the MLP, two norms
  dP=$((4 * (2 * 128 * 128 + 2 * 128 * 2 * 32 + 3 * 128 * 352 + 2 * 128)))
  echo "| strategy | precision | bytes/parameter, all ranks | worst rank | bytes/token, all ranks | worst rank |"
  echo "|---|---|---:|---:|---:|---:|"
  shift
  only=" $* "
  for S in $("$W" simulate --help 2>&1 | sed -n 's/^ *--strategy *{\([^}]*\)}.*/\1/p' | tr '|' ' '); do
    [ "$S" = auto ] || [ "$S" = all ] && continue
    [ "$only" = "  " ] || [[ "$only" == *" $S "* ]] || continue
    for P in fp32 mixed; do
      read -r a0 m0 < <(per_unit "$S" "$P" 4 64) && read -r a1 m1 < <(per_unit "$S" "$P" 8 64) &&
        read -r a2 m2 < <(per_unit "$S" "$P" 4 128) || continue
      awk -v S="$S" -v P="$P" -v dP="$dP" -v a0="$a0" -v m0="$m0" -v a1="$a1" -v m1="$m1" -v a2="$a2" -v m2="$m2" \
        'BEGIN {printf "| %s | %s | %.1f | %.1f | %.0f | %.0f |\n", S, P, (a1 - a0) / dP, (m1 - m0) / dP, (a2 - a0) / 256, (m2 - m0) / 256}'
    done
  done
  exit 0
fi
runs=("$@")
if [ ${#runs[@]} -eq 0 ]; then
  shift
  only=" $* "
  for S in $("$W" simulate --help 2>&1 | sed -n 's/^ *--strategy *{\([^}]*\)}.*/\1/p' | tr '|' ' '); do
    [ "$S" = auto ] || [ "$S" = all ] && continue
    [ "$only" = "  " ] || [[ "$only" == *" $S "* ]] || continue
    for P in fp32 mixed; do for R in 0 1; do runs+=("$S:$P:$R"); done; done
  done
fi
[ ${#runs[@]} -gt 0 ] || { echo "memory_sweep: no strategies found in 'weipipe simulate --help'"; exit 1; }
echo "| strategy | precision | recompute | allocator vs prediction, per rank | resident | bound 1.1 x sum + 256 MiB |"
echo "|---|---|---|---|---:|---:|"
bad=0
for run in "${runs[@]}"; do
  IFS=: read -r S P R <<< "$run"
  rc_flag=(); [ "$R" = 1 ] && rc_flag=(--recompute)
  case $S in interleaved-1f1b|zb-v) rc_flag+=(--num-layers 8) ;; esac # two chunks per rank
  rm -f "$TMP/m.jsonl"
  if ! "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --timeout 60s "${model[@]}" --nranks 4 \
      --transport local --strategy "$S" --precision "$P" --steps 2 --eval-every 1 --eval-batches 1 --sample-every 2 \
      --sample-tokens 8 --val-data "$VAL" --metrics "$TMP/m.jsonl" "${rc_flag[@]}" > "$TMP/out" 2>&1; then
    echo "| $S | $P | $R | FAILED: $(tail -1 "$TMP/out") | | |"
    bad=1
    continue
  fi
  grep '"memory"' "$TMP/m.jsonl" | python3 -c '
import json, sys
S, P, R, san = sys.argv[1:5]
ranks = json.loads(sys.stdin.read())["memory"]
bad = False
cells = []
for r in ranks:
    d = (r["peak_bytes"] - r["predicted_bytes"]) / r["predicted_bytes"]
    cells.append("%+.1f%%" % (100 * d))
    bad |= abs(d) > 0.10
res, pred = ranks[0]["resident_bytes"], sum(r["predicted_bytes"] for r in ranks)
bound = 1.1 * pred + 256 * 2**20
bad |= res <= 0 or (san == "none" and res > bound)
print("| %s | %s | %s | %s | %.0f MiB | %.0f MiB |%s" % (S, P, "on" if R == "1" else "off", " ".join(cells),
      res / 2**20, bound / 2**20, " OFF" if bad else ""))
sys.exit(1 if bad else 0)' "$S" "$P" "$R" "$SAN" || bad=1
done
exit $bad
