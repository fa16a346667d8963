#!/bin/sh
# Build and run the whole test suite; ends with "N passed, N failed, N skipped".
# GPU and RDMA tests skip (and say why) on machines without the hardware; skips never count as passes.
set -u
cd "$(dirname "$0")/.."
build=${WEIPIPE_BUILD:-build}
scripts/build.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
meson test -C "$build" --print-errorlogs --num-processes "${WEIPIPE_TEST_JOBS:-2}" "$@"
rc=$?
python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"):
        counts["passed"] += 1
    elif r == "SKIP":
        counts["skipped"] += 1
    else:
        counts["failed"] += 1
print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit $rc
