#!/bin/bash
# The NCCL transport. Everywhere: --transport nccl with --backend cpu exits 2 (and a build
# without NCCL names -Dnccl=enabled, as every transport row of ring/transport_table.h does). The rest needs NCCL and GPUs (else skip, 77, saying so):
#   - on fewer GPUs than ranks, --transport nccl is refused (exit 2: NCCL cannot put two ranks
#     on one GPU);
#   - weipipe-interleave and 1f1b on N = 2 processes, one GPU each, fp32: masters within 1e-5
#     relative of the single-rank run (as tests/gpu/ring.sh), and a repeat is identical.
# Arguments: WEIPIPE CKPT_DIFF CONFIG DATA HAVE_NCCL(0/1).
set -u
W=$1 DIFF=$2 CFG=$3 DATA=$4 HAVE_NCCL=$5
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
train() { "$W" train --config "$CFG" --data "$DATA" --backend cuda --threads 1 --quiet --timeout 60s \
                     --steps 3 --lr-decay-style constant "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# Refused before any rank starts (any machine): NCCL moves GPU memory, so --backend cpu is an
# error; a build without NCCL names the option that adds it.
want="needs --backend cuda"
[ "$HAVE_NCCL" = 1 ] || want="not built into this weipipe (configure with -Dnccl=enabled"
"$W" train --config "$CFG" --data "$DATA" --quiet --steps 1 --nranks 2 --transport nccl --backend cpu 2>"$TMP/err.txt"
rc=$?
grep -qF "$want" "$TMP/err.txt" && [ $rc = 2 ] || fail "--transport nccl --backend cpu: exit $rc, $(cat "$TMP/err.txt")"
echo "ok: refused with exit 2: $(cat "$TMP/err.txt")"
if [ "$HAVE_NCCL" != 1 ]; then
    echo "skip: this build has no NCCL"
    exit 77
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$gpus" -lt 1 ]; then
    echo "skip: no GPU (nvidia-smi lists none)"
    exit 77
fi
if [ "$gpus" -lt 2 ]; then
    train --nranks 2 --transport nccl --strategy 1f1b 2>"$TMP/err.txt"
    rc=$?
    grep -q "NCCL cannot put two ranks on one GPU" "$TMP/err.txt" && [ $rc = 2 ] ||
        fail "2 ranks on 1 GPU: exit $rc, $(cat "$TMP/err.txt")"
    echo "ok: 2 ranks on 1 GPU refused: $(cat "$TMP/err.txt")"
    echo "skip: the transfers need 2 GPUs, this machine has $gpus"
    exit 77
fi
train --nranks 1 --strategy 1f1b --num-microbatches 4 --precision fp32 --save "$TMP/ref" || fail "single-rank reference"
for S in 1f1b weipipe-interleave; do
    train --nranks 2 --transport nccl --strategy $S --num-microbatches 4 --precision fp32 --save "$TMP/$S" || fail "$S over nccl"
    line=$("$DIFF" "$TMP/$S/step-3" "$TMP/ref/step-3" 1e-5) || fail "$S over nccl: $line"
    echo "$S N=2 nccl fp32: $line"
done
train --nranks 2 --transport nccl --strategy weipipe-interleave --num-microbatches 4 --precision fp32 --save "$TMP/again" ||
    fail "repeat over nccl"
line=$("$DIFF" "$TMP/again/step-3" "$TMP/weipipe-interleave/step-3" 0) || fail "nccl repeat differs: $line"
echo "repeat over nccl: $line"
