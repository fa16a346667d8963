#!/bin/bash
# The ring on one GPU: every strategy on N = 4 ranks as threads sharing the GPU (--backend
# cuda --transport local: the staged transport copies device to device on each receiver's
# transfer stream) lands on the single-rank weights, so does weipipe-interleave on 4
# processes over tcp (pinned host staging), and runs repeat bit for bit.
#   fp32 (--precision fp32, cuBLAS in fp32): every master tensor within 1e-5 relative of the
#     single-rank run's after 3 steps (only the order of fp32 gradient sums differs; the same
#     bound as tests/runtime/equivalence.sh on the CPU);
#   mixed (fp16/bf16 compute): every step's loss within 1e-2 relative of the single-rank run's
#     (a few bf16 roundings, u = 2^-8, of differently ordered sums);
#   repeatability: weipipe-interleave N = 4, mixed, run twice: masters identical (ckpt_diff 0).
# Arguments: WEIPIPE CKPT_DIFF CONFIG DATA. Skips (77) without a usable CUDA GPU.
set -u
W=$1 DIFF=$2 CFG=$3 DATA=$4
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
FP32_TOL=1e-5 MIXED_TOL=1e-2
train() { "$W" train --config "$CFG" --data "$DATA" --backend cuda --threads 1 --quiet --timeout 60s \
                     --steps 3 --lr-decay-style constant --transport local "$@"; }
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
fail() { echo "FAIL: $*"; exit 1; }

if ! train --nranks 1 --strategy 1f1b --num-microbatches 4 --precision fp32 --save "$TMP/ref" 2>"$TMP/probe.txt"; then
    if grep -qE "no CUDA device|without the CUDA backend|compute capability" "$TMP/probe.txt"; then
        echo "skip: $(head -n 1 "$TMP/probe.txt")"
        exit 77
    fi
    cat "$TMP/probe.txt"
    fail "single-rank fp32 reference on the GPU"
fi
train --nranks 1 --strategy 1f1b --num-microbatches 4 --metrics "$TMP/ref-mixed.jsonl" || fail "single-rank mixed reference"

N=4 M=4
for S in 1f1b weipipe-naive weipipe-interleave wzb1 wzb2 gpipe zb-h1 zb-h2; do
    out=$TMP/$S
    train --nranks $N --strategy $S --num-microbatches $M --precision fp32 --save "$out" || fail "$S N=$N fp32"
    line=$("$DIFF" "$out/step-3" "$TMP/ref/step-3" $FP32_TOL) || fail "$S N=$N fp32: $line"
    echo "$S N=$N fp32: $line"
    train --nranks $N --strategy $S --num-microbatches $M --metrics "$out.jsonl" || fail "$S N=$N mixed"
    cmp=$(paste <(losses "$out.jsonl") <(losses "$TMP/ref-mixed.jsonl") |
          awk -v tol=$MIXED_TOL '{d = $1 - $2; if (d < 0) d = -d; r = d / $2; if (r > m) m = r; n++}
                                 END {printf "%d %.3e %s", n, m, (n == 3 && m <= tol) ? "ok" : "bad"}')
    echo "$S N=$N mixed: steps, max loss relative difference: $cmp"
    case $cmp in *ok) ;; *) fail "$S N=$N mixed losses differ: $cmp" ;; esac
done

# The same GPU shared by 4 processes over tcp: device buffers through pinned host slots.
train --nranks $N --transport tcp --strategy weipipe-interleave --num-microbatches $M --precision fp32 --save "$TMP/tcp" ||
    fail "weipipe-interleave N=$N over tcp"
line=$("$DIFF" "$TMP/tcp/step-3" "$TMP/ref/step-3" $FP32_TOL) || fail "weipipe-interleave N=$N tcp fp32: $line"
echo "weipipe-interleave N=$N over tcp (pinned staging) fp32: $line"

for run in a b; do
    train --nranks $N --strategy weipipe-interleave --num-microbatches $M --save "$TMP/rep-$run" || fail "repeat run $run"
done
line=$("$DIFF" "$TMP/rep-a/step-3" "$TMP/rep-b/step-3" 0) || fail "two identical runs differ: $line"
echo "repeatability (weipipe-interleave N=$N mixed, two runs): $line"
echo "every strategy on $N ranks sharing one GPU equals the single-rank run"
