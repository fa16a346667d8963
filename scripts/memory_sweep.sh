#!/bin/bash
# The memory prediction held against the measurement (docs/memory.md): each run is 4 ranks as
# threads, --eval-every and --sample-every on, CPU, one thread per rank; each rank's allocator
# high-water must be within 10% of its prediction, and the process's resident high-water within
# 10% of the ranks' predictions summed plus a fixed 256 MiB (the program, OpenBLAS, the C
# library's arenas). Prints one markdown row per run; exits 1 when any run is off.
#
#   scripts/memory_sweep.sh [RUN...]        RUN = strategy:precision:recompute(0|1)
# Without RUNs: the whole product, every strategy of strategies.def x fp32/mixed x recompute
# off/on (52 runs, ~1 min on an idle core). tests/runtime/memory.sh runs a rotation of it.
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
runs=("$@")
if [ ${#runs[@]} -eq 0 ]; then
  for S in $("$W" simulate --help 2>&1 | sed -n 's/^ *--strategy *{\([^}]*\)}.*/\1/p' | tr '|' ' '); do
    [ "$S" = auto ] || [ "$S" = all ] && continue
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
  [ "$S" = interleaved-1f1b ] && rc_flag+=(--num-layers 8) # two chunks per rank
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
