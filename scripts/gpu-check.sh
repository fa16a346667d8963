#!/bin/sh
# On a machine with an NVIDIA GPU (sm_80 or newer): build weipipe with CUDA, run the GPU test
# suite (the CUDA backend against the CPU backend, repeatability, a whole model step, the ring
# on one GPU: every strategy on 4 ranks sharing it against one rank, the streams/events API,
# the staged transport, the NCCL transport where 2 GPUs are) and the GPU benchmark, run PyTorch on the same GPU and shapes when a CUDA torch >= 2.0 is there,
# and print one summary. Exit 0 when the build and every GPU test pass, 1 otherwise, 77 when
# there is no usable GPU (everything skipped).
#
#   scripts/gpu-check.sh [--quick]      (--quick: benchmarks at s = 1024 only)
#   scripts/gpu-check.sh --kit FILE [--deadline SECONDS] [--logs DIR] [--stages a,b] [--step-seq S]
#       runs a kit built elsewhere by scripts/gpu-kit.sh, without building (a machine without
#       -dev packages or internet): the GPU tests first, then the whole-step comparison with
#       PyTorch, each stage inside its time box (--deadline 330 fits the default stages), a
#       summary table last (scripts/gpu_check.py says what each stage runs).
#
# Environment: WP_GPU_BUILD (default build-gpu), WP_GPU_ARCH (e.g. 90: build only for the
# GPU at hand, which compiles faster; default: the gpu_arch option, 80;90), WP_TORCH_PYTHON
# (default python3), WP_PEAK_TFLOPS (the device's dense bf16 peak, when its name is not
# in bench_gpu's table). Logs go to $WP_GPU_BUILD/gpu-check/.
set -u
if [ "${1:-}" = --kit ]; then
    exec python3 "$(dirname "$0")/gpu_check.py" "$@"
fi
cd "$(dirname "$0")/.."
build=${WP_GPU_BUILD:-build-gpu}
python=${WP_TORCH_PYTHON:-python3}
quick=""
case "${1:-}" in
    --quick) quick=--quick ;;
    "") ;;
    *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
esac

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dcuda=enabled -Dwerror=true ${WP_GPU_ARCH:+-Dgpu_arch=$WP_GPU_ARCH} || exit 1
fi
ninja -C "$build" || { echo "gpu-check: the build failed"; exit 1; }
logs="$build/gpu-check"
mkdir -p "$logs"

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "(nvidia-smi not found)"

echo "== GPU tests"
meson test -C "$build" --suite gpu --print-errorlogs --num-processes 1 >"$logs/tests.txt" 2>&1
tests_rc=$?
tail -n 12 "$logs/tests.txt"

echo "== weipipe benchmark (tests/gpu/bench_gpu.c)"
"$build/tests/gpu/bench_gpu" bf16 $quick >"$logs/bench.txt" 2>&1
bench_rc=$?

echo "== PyTorch benchmark (scripts/gpu_torch_bench.py)"
"$python" scripts/gpu_torch_bench.py $quick >"$logs/torch.txt" 2>&1
torch_rc=$?

echo
echo "================ summary ================"
python3 - "$build/meson-logs/testlog.json" <<'PY' || true
import json, sys
rows = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    name = r["name"].split(" / ")[-1]  # "weipipe:gpu / gpu/model" -> "gpu/model"
    if name.startswith("gpu/"):
        rows.append((name, r["result"], r.get("duration", 0)))
    if name in ("gpu/ring", "gpu/nccl", "gpu/staged", "gpu/streams"):
        rows[-1] += ([l for l in r.get("stdout", "").splitlines() if l.strip()],)
print("| test | result | seconds |")
print("|------|--------|---------|")
for row in rows:
    print(f"| {row[0]} | {row[1]} | {row[2]:.1f} |")
for row in rows:
    if len(row) > 3:
        print(f"\n{row[0]} ({row[1]}):")
        for line in row[3][-14:]:
            print("   ", line)
PY
echo
echo "weipipe (CUDA backend), exit $bench_rc:"
cat "$logs/bench.txt"
echo
echo "PyTorch, exit $torch_rc:"
cat "$logs/torch.txt"
echo
if [ $tests_rc -ne 0 ]; then
    echo "gpu-check: GPU tests FAILED (details in $logs/tests.txt and $build/meson-logs/testlog.txt)"
    exit 1
fi
if [ $bench_rc -eq 77 ]; then
    echo "gpu-check: no usable CUDA GPU here: the GPU tests skipped and nothing was measured"
    exit 77
fi
[ $bench_rc -eq 0 ] || { echo "gpu-check: the benchmark failed (see $logs/bench.txt)"; exit 1; }
echo "gpu-check: GPU tests passed"
exit 0
