#!/bin/bash
# Memory you can trust (docs/memory.md): on 4 ranks (threads), with --eval-every and
# --sample-every on, each rank's allocator high-water (the {"memory": ...} metrics line) is
# within 10% of the prediction, and the process's resident high-water within 10% of the ranks'
# predictions summed plus a fixed 256 MiB (the program, OpenBLAS, the C library's arenas).
# Every strategy once, fp32/mixed and recompute off/on rotated across them (scripts/memory_sweep.sh
# checks the rows; run alone it covers the whole product).
# The start-up check refuses with exit 2 naming the prediction and the limit: a micro-batch
# of 100000 sequences (more than this machine), and a 2-rank job under a faked 40 MB limit
# (WEIPIPE_TEST_MEMORY_LIMIT: this machine's cgroup fs has no v2 memory controller to make one);
# --host-memory stands in for that limit when given (refused at 40 MB naming it, run at 8 GiB
# under the faked 40 MB).
# Under a sanitizer (WEIPIPE_SANITIZE, from meson's b_sanitize) the resident set holds its shadow
# memory (TSan: 2.5 GB for this job), so only the allocator is held to the prediction there.
# Every strategy runs in the plain and ASan builds; TSan runs four (below).
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
# Under TSan the first four of the rotation, each (precision, recompute) pair once: the allocator
# accounting is the same code with or without the sanitizer, and the ring's threads are TSan's
# business in runtime/equivalence and the fault tests (all 14 took 125 s of CI's TSan part).
[ "$SAN" = thread ] && runs=("${runs[@]:0:4}")
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
# --host-memory takes the place of what the host says it may give (the faked limit here), not a
# second limit beside it: 40 MB refuses naming the flag, 8 GiB runs under the faked 40 MB
out=$(WEIPIPE_TEST_MEMORY_LIMIT=8000000000 train --steps 1 --nranks 2 --transport local --optimizer-memory host --host-memory 40000000 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<< "$out")" -eq 1 ] && grep -q "more than --host-memory / 2 ranks on this host (19.1 MiB)" <<< "$out" ||
  fail "--host-memory 40000000: rc $rc: $out"
echo "refused under --host-memory 40000000: $out"
WEIPIPE_TEST_MEMORY_LIMIT=40000000 train --steps 1 --nranks 2 --transport local --optimizer-memory host --host-memory 8G ||
  fail "--host-memory 8G under a faked 40 MB: refused (the flag did not take the host's place)"
