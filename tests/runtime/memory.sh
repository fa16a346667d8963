#!/bin/bash
# Memory you can trust (docs/memory.md): on 4 ranks (threads), with --eval-every and
# --sample-every on, each rank's allocator high-water (the {"memory": ...} metrics line) is
# within 10% of the prediction, and the process's resident high-water within 10% of the ranks'
# predictions summed plus a fixed 256 MiB (the program, OpenBLAS, the C library's arenas).
# Every strategy once, fp32/mixed and recompute off/on rotated across them (scripts/memory_sweep.sh
# checks the rows; run alone it covers the whole product).
# The start-up check refuses with exit 2 naming the prediction and the limit: a micro-batch
# of 100000 sequences (more than this machine), and a 2-rank job under a faked 40 MB limit
# (WEIPIPE_TEST_MEMORY_LIMIT: this machine's cgroup fs has no v2 memory controller to make one).
# Under a sanitizer (WEIPIPE_SANITIZE, from meson's b_sanitize) the resident set holds its shadow
# memory (TSan: 2.5 GB for this job), so only the allocator is held to the prediction there.
SAN=${WEIPIPE_SANITIZE:-none}
source "$(dirname "$0")/runtime_lib.sh"
SWEEP=$(dirname "$0")/../../scripts/memory_sweep.sh
# strategy i of strategies.def gets the (precision, recompute) pair (i + MEMORY_ROTATION) mod 4:
# every strategy once, every pair three or four times; scripts/memory_sweep.sh runs all 56
pairs=(fp32:0 mixed:0 fp32:1 mixed:1)
strategies=$("$W" simulate --help 2>&1 | sed -n 's/^ *--strategy *{\([^}]*\)}.*/\1/p' | tr '|' ' ')
runs=() i=${MEMORY_ROTATION:-0}
for S in $strategies; do
  [ "$S" = auto ] || [ "$S" = all ] && continue
  runs+=("$S:${pairs[i % 4]}") i=$((i + 1))
done
[ ${#runs[@]} -ge 14 ] || fail "found ${#runs[@]} strategies in 'weipipe simulate --help': $strategies"
WEIPIPE=$W CONFIG=$CFG DATA=$DATA VAL=$(dirname "$DATA")/tiny_val.bin MEMORY_SANITIZE=$SAN "$SWEEP" "${runs[@]}" ||
  fail "memory off the prediction (a row ends OFF or FAILED)"

out=$(train --steps 1 --micro-batch-size 100000 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "needs about .* more than" <<< "$out" || fail "--micro-batch-size 100000: rc $rc: $out"
echo "refused up front: $out"
out=$(WEIPIPE_TEST_MEMORY_LIMIT=40000000 train --steps 1 --nranks 2 --transport local 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "WEIPIPE_TEST_MEMORY_LIMIT / 2 ranks" <<< "$out" || fail "faked limit: rc $rc: $out"
echo "refused under a 40 MB limit: $out"
# --optimizer-memory host on the CPU: the device is this host, so its share holds both sides, and
# the refusal names the host side's parts (memory.h: mem_predict_host)
out=$(WEIPIPE_TEST_MEMORY_LIMIT=40000000 train --steps 1 --nranks 2 --transport local --optimizer-memory host 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "optimizer state in host memory .* MiB, pinned staging .* MiB).*more than WEIPIPE_TEST_MEMORY_LIMIT / 2 ranks" <<< "$out" ||
  fail "faked limit, host state: rc $rc: $out"
