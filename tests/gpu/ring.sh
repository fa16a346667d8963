#!/bin/bash
# The whole trainer on one GPU. Every case runs even after another failed (a GPU is rare: one
# run should say everything), each printing one line; the exit is 1 if any failed.
#  - the single-rank GPU run against the single-rank CPU run of the same model: fp32 masters
#    within 1e-4 relative after 3 steps (cuBLAS and the CPU sum in different orders, and three
#    AdamW steps amplify that where gradients are near zero), mixed losses within 3e-4 relative
#    (the CPU suite's mixed tolerance, tests/runtime/equivalence.sh);
#  - every strategy (13) on N = 4 ranks as threads sharing the GPU (--transport local: the
#    staged transport copies device to device on each receiver's transfer stream) against the
#    single-rank GPU run: fp32 masters within 1e-5 relative (only the order of fp32 gradient
#    sums differs; equivalence.sh's bound), mixed losses within 3e-4 relative. interleaved-1f1b
#    and tawpipe (C = N chunks) on an 8-layer model against an 8-layer reference; seq1f1b
#    against its own one-rank run (its segments sum in another order, as on the CPU);
#  - --recompute, --tie-word-embeddings (weipipe-interleave, N = 4) against their one-rank runs;
#  - weipipe-interleave on 4 processes over tcp (pinned host staging; each process picks device
#    local rank mod 1 = 0), fp32 against the single-rank run;
#  - repeatability: weipipe-interleave N = 4, mixed, twice: masters identical (ckpt_diff 0);
#  - `weipipe eval` and greedy `weipipe sample` of a checkpoint with --backend cuda against
#    --backend cpu (eval fp32 within 1e-5 relative; the same 16 greedy ids).
# Arguments: WEIPIPE CKPT_DIFF CONFIG DATA. Skips (77) without a usable CUDA GPU.
# WP_RING_BACKEND=cpu runs the same cases on the CPU backend (to check this script anywhere).
set -u
W=$1 DIFF=$2 CFG=$3 DATA=$4
BACKEND=${WP_RING_BACKEND:-cuda}
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
FP32_TOL=1e-5 MIXED_TOL=3e-4 CPU_FP32_TOL=1e-4 N=4 M=4
run() { "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --timeout 60s --steps 3 \
                   --lr-decay-style constant --transport local "$@"; }
train() { run --backend "$BACKEND" "$@"; }
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
# the first lines of a failed run's stderr, so that one log says why
why() { [ -s "$1" ] && sed -n '1,6s/^/    /p' "$1"; }
# max relative loss difference of two metrics files: "steps max ok|bad"
loss_cmp() {
    paste <(losses "$1") <(losses "$2") |
        awk -v tol="$3" '{d = $1 - $2; if (d < 0) d = -d; r = d / $2; if (r > m) m = r; n++}
                         END {printf "%d %.3e %s", n, m, (n == 3 && m <= tol) ? "ok" : "bad"}'
}

if ! train --nranks 1 --strategy 1f1b --num-microbatches $M --precision fp32 --save "$TMP/ref" 2>"$TMP/probe.txt"; then
    if grep -qE "no CUDA device|without the CUDA backend|compute capability" "$TMP/probe.txt"; then
        echo "skip: $(head -n 1 "$TMP/probe.txt")"
        exit 77
    fi
    cat "$TMP/probe.txt"
    echo "FAIL: single-rank fp32 reference on the GPU"
    exit 1
fi
echo "ok: single-rank fp32 run on --backend $BACKEND"

# reference NAME FLAGS...: one-rank fp32 checkpoint $TMP/r-NAME and mixed metrics $TMP/r-NAME.jsonl
reference() {
    local d=$TMP/r-$1
    [ -d "$d" ] && return 0
    train --nranks 1 --num-microbatches $M "${@:2}" --precision fp32 --save "$d" 2>"$d.err" || { bad "reference $1"; why "$d.err"; return 1; }
    train --nranks 1 --num-microbatches $M "${@:2}" --metrics "$d.jsonl" 2>"$d.err" || { bad "mixed reference $1"; why "$d.err"; return 1; }
}
# compare LABEL REFNAME FLAGS...: fp32 masters and mixed losses of a run against a reference
compare() {
    local label=$1 r=$TMP/r-$2 out=$TMP/c-$1 line cmp
    shift 2
    if train --num-microbatches $M "$@" --precision fp32 --save "$out" 2>"$out.err"; then
        if line=$("$DIFF" "$out/step-3" "$r/step-3" $FP32_TOL); then echo "ok: $label fp32: $line"
        else bad "$label fp32: $line"; fi
    else bad "$label fp32 run"; why "$out.err"; fi
    if train --num-microbatches $M "$@" --metrics "$out.jsonl" 2>"$out.err"; then
        cmp=$(loss_cmp "$out.jsonl" "$r.jsonl" $MIXED_TOL)
        case $cmp in *ok) echo "ok: $label mixed: steps, max loss relative difference: $cmp" ;;
                     *) bad "$label mixed: steps, max loss relative difference: $cmp" ;; esac
    else bad "$label mixed run"; why "$out.err"; fi
}

reference base --strategy 1f1b
reference l8 --strategy 1f1b --num-layers 8
reference seq --strategy seq1f1b
reference tied --strategy 1f1b --tie-word-embeddings
reference recompute --strategy 1f1b --recompute

# the GPU's one-rank run against the CPU's
if [ "$BACKEND" != cpu ]; then
    if run --backend cpu --nranks 1 --strategy 1f1b --num-microbatches $M --precision fp32 --save "$TMP/cpu" 2>"$TMP/cpu.err" &&
       run --backend cpu --nranks 1 --strategy 1f1b --num-microbatches $M --metrics "$TMP/cpu.jsonl" 2>>"$TMP/cpu.err"; then
        if line=$("$DIFF" "$TMP/r-base/step-3" "$TMP/cpu/step-3" $CPU_FP32_TOL); then echo "ok: one rank GPU vs CPU fp32: $line"
        else bad "one rank GPU vs CPU fp32: $line"; fi
        cmp=$(loss_cmp "$TMP/r-base.jsonl" "$TMP/cpu.jsonl" $MIXED_TOL)
        case $cmp in *ok) echo "ok: one rank GPU vs CPU mixed: steps, max loss relative difference: $cmp" ;;
                     *) bad "one rank GPU vs CPU mixed: steps, max loss relative difference: $cmp" ;; esac
    else bad "CPU reference"; why "$TMP/cpu.err"; fi
fi

for S in 1f1b weipipe-naive weipipe-interleave wzb1 wzb2 gpipe zb-h1 zb-h2 fsdp; do
    compare "$S N=$N" base --nranks $N --strategy $S
done
compare "interleaved-1f1b N=$N (8 layers, 8 chunks)" l8 --nranks $N --strategy interleaved-1f1b --num-layers 8 --num-chunks $((2 * N))
compare "seq1f1b N=$N" seq --nranks $N --strategy seq1f1b
compare "weipipe-hier N=$N (2 x 2)" base --nranks $N --strategy weipipe-hier --ranks-per-node 2
compare "tawpipe N=$N (2 x 2, 8 layers)" l8 --nranks $N --strategy tawpipe --ranks-per-node 2 --num-layers 8
compare "weipipe-interleave N=$N tied" tied --nranks $N --strategy weipipe-interleave --tie-word-embeddings
compare "weipipe-interleave N=$N recompute" recompute --nranks $N --strategy weipipe-interleave --recompute
# cuDNN's attention (the default where built) against ours, one rank, mixed: the same losses
if train --nranks 1 --strategy 1f1b --num-microbatches $M --attention native --metrics "$TMP/native.jsonl" 2>"$TMP/native.err"; then
    cmp=$(loss_cmp "$TMP/native.jsonl" "$TMP/r-base.jsonl" $MIXED_TOL)
    case $cmp in *ok) echo "ok: one rank --attention native vs auto, mixed: steps, max loss relative difference: $cmp" ;;
                 *) bad "one rank --attention native vs auto, mixed: steps, max loss relative difference: $cmp" ;; esac
else bad "one rank --attention native"; why "$TMP/native.err"; fi
# which attention ran (rank 0 says it after step 1)
"$W" train --config "$CFG" --data "$DATA" --threads 1 --timeout 60s --steps 1 --transport local --backend "$BACKEND" \
    --nranks 1 --strategy 1f1b --num-microbatches $M 2>&1 >/dev/null | grep '^attention:' | sed 's/^/note: /'
# recompute changes no arithmetic: the one-rank runs agree
if [ -d "$TMP/r-recompute" ]; then
    line=$("$DIFF" "$TMP/r-recompute/step-3" "$TMP/r-base/step-3" $FP32_TOL) && echo "ok: one rank --recompute vs without, fp32: $line" ||
        bad "one rank --recompute vs without, fp32: $line"
fi

# The same GPU shared by 4 processes over tcp: device buffers through pinned host slots.
if train --nranks $N --transport tcp --strategy weipipe-interleave --num-microbatches $M --precision fp32 \
         --save "$TMP/tcp" 2>"$TMP/tcp.err"; then
    line=$("$DIFF" "$TMP/tcp/step-3" "$TMP/r-base/step-3" $FP32_TOL) && echo "ok: weipipe-interleave N=$N over tcp fp32: $line" ||
        bad "weipipe-interleave N=$N over tcp fp32: $line"
else bad "weipipe-interleave N=$N over tcp"; why "$TMP/tcp.err"; fi

rep_ok=1
for k in a b; do
    train --nranks $N --strategy weipipe-interleave --num-microbatches $M --save "$TMP/rep-$k" 2>"$TMP/rep.err" ||
        { bad "repeat run $k"; why "$TMP/rep.err"; rep_ok=0; }
done
if [ $rep_ok = 1 ]; then
    line=$("$DIFF" "$TMP/rep-a/step-3" "$TMP/rep-b/step-3" 0) && echo "ok: repeatability (weipipe-interleave N=$N mixed, two runs): $line" ||
        bad "two identical runs differ: $line"
fi

# eval and greedy sample of the reference checkpoint on the GPU against the CPU
ck=$TMP/r-base/step-3
e_gpu=$("$W" eval "$ck" --data "$DATA" --batches 4 --precision fp32 --backend "$BACKEND" 2>"$TMP/eval.err" | sed -n 's/^eval: loss \([^ ]*\) .*/\1/p')
e_cpu=$("$W" eval "$ck" --data "$DATA" --batches 4 --precision fp32 --backend cpu 2>>"$TMP/eval.err" | sed -n 's/^eval: loss \([^ ]*\) .*/\1/p')
if [ -n "$e_gpu" ] && [ -n "$e_cpu" ]; then
    awk -v a="$e_gpu" -v b="$e_cpu" 'BEGIN {d = (a - b) / b; if (d < 0) d = -d
        printf "eval --backend '"$BACKEND"' %s vs cpu %s: %.2e (tolerance 1e-5)\n", a, b, d; exit d > 1e-5}' &&
        echo "ok: eval" || bad "eval differs"
else bad "eval: no loss printed"; why "$TMP/eval.err"; fi
s_gpu=$("$W" sample "$ck" --prompt-tokens 1,2,3 --temperature 0 --max-new-tokens 16 --format ids --backend "$BACKEND" 2>"$TMP/sample.err")
s_cpu=$("$W" sample "$ck" --prompt-tokens 1,2,3 --temperature 0 --max-new-tokens 16 --format ids --backend cpu 2>>"$TMP/sample.err")
if [ -n "$s_gpu" ] && [ "$s_gpu" = "$s_cpu" ]; then echo "ok: greedy sample --backend $BACKEND = cpu: $s_gpu"
else bad "greedy sample: '$s_gpu' (--backend $BACKEND) vs '$s_cpu' (cpu)"; why "$TMP/sample.err"; fi

if [ $failures -gt 0 ]; then
    echo "$failures case(s) failed"
    exit 1
fi
echo "every strategy on $N ranks sharing one GPU equals the single-rank run"
