#!/usr/bin/env bash
# weipipe's CPU model step against PyTorch's on the same shapes, side by side.
#
#   scripts/bench_cpu_vs_torch.sh [ROUNDS]        (default 3 rounds)
#
# For every shape, ROUNDS times in turn: `weipipe bench` then scripts/torch_bench.py, so both
# see the same machine load; each keeps its best round (weipipe bench itself reports the best
# of its iterations, torch_bench.py's tokens_per_s_best is the same statistic). Both run one
# micro-batch forward + backward in fp32 on THREADS threads (default 2) and count model FLOPs
# the same way (docs/model.md). Prints a markdown table; MFU is weipipe's model GFLOP/s over
# the fp32 GEMM rate that `weipipe bench` measures on the same backend (its "ceiling").
#
# Environment: WP_BUILD_DIR (default build; configured with `meson setup` when absent, then
# built with ninja), THREADS (default 2), WP_TORCH_PYTHON (default /usr/bin/python3: Debian's
# python3-torch), TORCH_ITERS (default 5).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
build=${WP_BUILD_DIR:-build}
threads=${THREADS:-2}
python=${WP_TORCH_PYTHON:-/usr/bin/python3}
torch_iters=${TORCH_ITERS:-5}
case $rounds in '' | *[!0-9]* | 0) echo "usage: $0 [ROUNDS >= 1]" >&2; exit 2 ;; esac
cd "$root"

[ -d "$build" ] || meson setup "$build"
ninja -C "$build" weipipe >/dev/null

# name | flags shared by both programs
shapes=(
    "2 blocks h=256 s=1024 b=1|--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 1024 --micro-batch-size 1 --vocab-size 256"
    "configs/tiny.ini|--config configs/tiny.ini"
    "configs/small.ini|--config configs/small.ini"
)

results=$(mktemp "${TMPDIR:-/tmp}/wp-bench.XXXXXX")
trap 'rm -f "$results"' EXIT
for entry in "${shapes[@]}"; do
    name=${entry%%|*}
    read -r -a flags <<<"${entry#*|}"
    for ((r = 1; r <= rounds; r++)); do
        echo "[$name] round $r/$rounds" >&2
        printf '%s\tweipipe\t' "$name" >>"$results"
        "$build/weipipe" bench "${flags[@]}" --precision fp32 --threads "$threads" --format json >>"$results"
        printf '%s\ttorch\t' "$name" >>"$results"
        "$python" scripts/torch_bench.py "${flags[@]}" --threads "$threads" --iters "$torch_iters" \
            --format json >>"$results"
    done
done

"$python" - "$results" "$threads" "$rounds" <<'EOF'
import json, os, sys

path, threads, rounds = sys.argv[1], sys.argv[2], sys.argv[3]
best = {}  # (shape, impl) -> the run with the most tokens/s
order = []
with open(path) as f:
    for line in f:
        shape, impl, blob = line.rstrip("\n").split("\t", 2)
        run = json.loads(blob)
        rate = run["tokens_per_s"] if impl == "weipipe" else run["tokens_per_s_best"]
        if shape not in order:
            order.append(shape)
        if (shape, impl) not in best or rate > best[(shape, impl)][0]:
            best[(shape, impl)] = (rate, run)

load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"] * 3
print(f"fp32, {threads} threads, best of {rounds} alternating rounds; load average at the end: {' '.join(load)}\n")
print("| shape | weipipe tokens/s | torch tokens/s | weipipe / torch | weipipe GFLOP/s | torch GFLOP/s "
      "| GEMM ceiling GFLOP/s | weipipe MFU |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for shape in order:
    wrate, w = best[(shape, "weipipe")]
    trate, t = best[(shape, "torch")]
    print(f"| {shape} | {wrate:,.0f} | {trate:,.0f} | {wrate / trate:.2f} | {w['model_gflops']:.1f} "
          f"| {t['gflops_best']:.1f} | {w['gemm_gflops']:.1f} | {100 * w['mfu']:.1f}% |")
EOF
