#!/bin/bash
# What `weipipe train` says about itself on a GPU, held to the bars of issue 38 (docs/memory.md,
# docs/performance.md). Every case runs even after another failed, one line each; exit 1 if any
# failed. The shape is the first GPU runs' (docs/gpu-runs/: h 1024, 8 layers, s 2048, 8
# micro-batches, about 0.07 s a step on an H200), 6 steps:
#  - the end-of-run simulator (op costs from the device's timers, steps after the first) within
#    15% of the measured step time, at N = 1 (1f1b) and N = 4 (1f1b, ranks as threads sharing
#    the GPU over --transport local, as gpu/ring runs them);
#  - the device's own memory figure (cudaMemGetInfo: the most in use at a step's end) within 10%
#    of the prediction with the CUDA context and cuDNN workspace estimates, at N = 1 and N = 4;
#    a GPU shared with another process fails this one (its memory is in the figure);
#  - the start-up refusal: --device-memory 1 MiB below the predicted need exits 2 naming the
#    flag; 16 MiB above the need with its margin, the run starts (one step, exit 0).
# Arguments: WEIPIPE DATA. Skips (77) without a usable CUDA GPU.
set -u
W=$1 DATA=$2
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
SHAPE=(--hidden-size 1024 --num-layers 8 --num-attention-heads 8 --ffn-hidden-size 2816 --vocab-size 32000
       --seq-length 2048 --micro-batch-size 1 --num-microbatches 8 --lr-decay-style constant)
train() { "$W" train --backend cuda --data "$DATA" "${SHAPE[@]}" --threads 2 --timeout 120s --transport local "$@"; }
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }

if ! train --nranks 1 --strategy 1f1b --steps 6 >"$TMP/n1.out" 2>"$TMP/n1.err"; then
    if grep -qE "no CUDA device|without the CUDA backend|compute capability" "$TMP/n1.err"; then
        echo "skip: $(grep -m1 -E "no CUDA device|without the CUDA backend|compute capability" "$TMP/n1.err")"
        exit 77
    fi
    sed -n '1,20p' "$TMP/n1.err"
    echo "FAIL: the N = 1 run"
    exit 1
fi
train --nranks 4 --strategy 1f1b --steps 6 >"$TMP/n4.out" 2>"$TMP/n4.err" || { bad "the N = 4 run"; sed -n '1,20p' "$TMP/n4.err"; }

# "step time (...): measured 0.06856 s, simulator 0.5278 s (...)" -> the two numbers
step_check() {
    local line
    line=$(grep -m1 '^step time' "$2") || { bad "$1: no step time line"; return; }
    echo "$line" | awk -v what="$1" '{
        for (i = 1; i <= NF; i++) { if ($i == "measured") m = $(i + 1); if ($i == "simulator") s = $(i + 1) }
        r = (m > 0) ? s / m - 1 : 1e9
        printf "%s: %s step measured %s s, simulator %s s (%+.1f%%)\n", (r <= 0.15 && r >= -0.15) ? "ok" : "FAIL", what, m, s, 100 * r
        exit (r <= 0.15 && r >= -0.15) ? 0 : 1 }' || failures=$((failures + 1))
}
# "device 0 (...), ...: +3.2%" -> the last field
mem_check() {
    local line
    line=$(grep -m1 '^device [0-9]* (rank' "$2") || { bad "$1: no device memory line"; return; }
    echo "$line" | awk -v what="$1" '{
        p = $NF; sub(/%$/, "", p); p += 0
        printf "%s: %s device memory against the prediction %s\n    %s\n", (p <= 10 && p >= -10) ? "ok" : "FAIL", what, $NF, $0
        exit (p <= 10 && p >= -10) ? 0 : 1 }' || failures=$((failures + 1))
}
step_check "N = 1" "$TMP/n1.err"
mem_check "N = 1" "$TMP/n1.err"
if [ -s "$TMP/n4.err" ]; then
    step_check "N = 4 (one GPU)" "$TMP/n4.err"
    mem_check "N = 4 (one GPU)" "$TMP/n4.err"
fi

# the start-up refusal: "  rank 0: 3417.9 MiB (...)" is the need; the check adds 10% + 64 MiB
need=$(sed -n 's/^  rank 0: \([0-9.]*\) MiB.*/\1/p' "$TMP/n1.err" | head -n 1)
if [ -z "$need" ]; then
    bad "no predicted need in the N = 1 run's output"
else
    below=$(awk -v n="$need" 'BEGIN {printf "%d", n - 1}')
    above=$(awk -v n="$need" 'BEGIN {printf "%d", n * 1.1 + 64 + 16}')
    train --nranks 1 --strategy 1f1b --steps 1 --quiet --device-memory "${below}M" >/dev/null 2>"$TMP/below.err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/below.err")" -eq 1 ] && grep -q -- '--device-memory' "$TMP/below.err"; then
        echo "ok: --device-memory ${below}M (need $need MiB) refused with exit 2: $(cat "$TMP/below.err")"
    else
        bad "--device-memory ${below}M (need $need MiB): exit $rc, want 2 with one line naming the flag"
        sed -n '1,4s/^/    /p' "$TMP/below.err"
    fi
    if train --nranks 1 --strategy 1f1b --steps 1 --device-memory "${above}M" >/dev/null 2>"$TMP/above.err"; then
        echo "ok: --device-memory ${above}M (need $need MiB, with the margin) runs"
    else
        bad "--device-memory ${above}M (need $need MiB, with the margin): the run failed"
        sed -n '1,4s/^/    /p' "$TMP/above.err"
    fi
fi
[ $failures -eq 0 ] || { echo "$failures failed"; exit 1; }
echo "measure: all passed"
