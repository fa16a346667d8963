#!/bin/sh
# The test suite under sanitizers, as a separate CI job (docs/reliability.md has its time):
#   1. AddressSanitizer + UndefinedBehaviorSanitizer: the whole suite (CPU build) but the
#      'python-heavy' tests (tests/reference/meson.build: their time is transformers or llama.cpp in
#      Python; smaller tests take their C paths), any report fails.
#   2. ThreadSanitizer: the threaded parts (ring, runtime, faults suites) with one BLAS thread
#      (OpenBLAS's own pthreads are not instrumented and would only add noise).
# Some runtime tests run subsets in sanitized builds (docs/reliability.md, "Sanitizers").
# Usage: scripts/test-sanitize.sh [asan|tsan|all]   (build dirs build-asan, build-tsan)
# Ends with one line per part: "<part>: N passed, N failed, N skipped in S s".
set -u
cd "$(dirname "$0")/.."
what=${1:-all}
jobs=${WEIPIPE_TEST_JOBS:-2}
status=0

# Sanitizer reports end the process with a failing status; leaks count (a test that leaks fails).
# allocator_may_return_null: a huge request returns NULL as from malloc (tests check that refusal).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=23:strict_string_checks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:exitcode=24}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=25:second_deadlock_stack=1}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

count() { # testlog.json -> "N passed, N failed, N skipped"
  python3 - "$1" <<'PY'
import json, sys
c = {"passed": 0, "failed": 0, "skipped": 0}
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    c["passed" if r in ("OK", "EXPECTEDFAIL") else "skipped" if r == "SKIP" else "failed"] += 1
print(f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
PY
}

# part NAME BUILDDIR SANITIZE EXTRA_OPTIONS [suites...] (a suite "-NAME": leave that one out): configure (once), build, run; prints the
# summary line.
part() {
  name=$1 dir=$2 san=$3 extra=$4
  shift 4
  t0=$(date +%s)
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" -Dwerror=true -Dcuda=disabled -Dnccl=disabled -Dbuildtype=debugoptimized \
      -Db_sanitize="$san" -Db_lundef=false $extra >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  fi
  ninja -C "$dir" || return 1
  suites=""
  for s in "$@"; do
    case $s in -*) suites="$suites --no-suite ${s#-}" ;; *) suites="$suites --suite $s" ;; esac
  done
  # shellcheck disable=SC2086 # suites are words on purpose
  meson test -C "$dir" --print-errorlogs --num-processes "$jobs" --timeout-multiplier 4 $suites
  rc=$?
  echo "$name: $(count "$dir/meson-logs/testlog.json") in $(( $(date +%s) - t0 )) s"
  return $rc
}

if [ "$what" = asan ] || [ "$what" = all ]; then
  part asan+ubsan build-asan address,undefined "" -python-heavy || status=1
fi
if [ "$what" = tsan ] || [ "$what" = all ]; then
  # Without MPI: Open MPI's libraries crash at load time next to libtsan (before main).
  part tsan build-tsan thread -Dmpi=disabled ring runtime faults || status=1
fi
exit $status
