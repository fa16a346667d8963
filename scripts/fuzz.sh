#!/bin/sh
# Runs each libFuzzer target for a set time (clang from Debian: apt-get install clang), then
# merges what it found into the kept corpus fuzz/corpus/<target>/ (only inputs that add coverage),
# which the normal test suite replays (tests/faults, faults/fuzz_replay_*). Crashing inputs land
# in build-fuzz/crashes/ and are copied into the corpus too, so that once fixed they stay fixed.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET=60] [targets...]   Prints executions and libFuzzer's
# coverage (cov: edges covered, ft: features) per target. Default: every target in fuzz/.
set -u
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-$(ls fuzz/fuzz_*.c | sed -n 's|^fuzz/fuzz_\(.*\)\.c$|\1|p' | grep -vx file)}
dir=build-fuzz
if [ ! -f "$dir/build.ninja" ]; then
  # -Werror stays off here: clang reports "loop not vectorized" for some omp simd loops (gcc does not).
  # CXX too: the link is C++ (SentencePiece), and g++ knows no -fsanitize=fuzzer
  CC=clang CXX=clang++ CFLAGS="-fsanitize=fuzzer-no-link -Wno-pass-failed" meson setup "$dir" -Dfuzz=true -Dwerror=false -Dcuda=disabled -Dnccl=disabled \
    -Dbuildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false > "$dir.setup.log" 2>&1 ||
    { cat "$dir.setup.log"; exit 1; }
fi
ninja -C "$dir" $(for t in $targets; do printf 'fuzz/fuzz_%s ' "$t"; done) || exit 1
mkdir -p "$dir/crashes"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1
status=0
for t in $targets; do
  work="$dir/work/$t"
  mkdir -p "$work" "fuzz/corpus/$t"
  log="$dir/fuzz-$t.log"
  "$dir/fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$dir/crashes/$t-" -print_final_stats=1 > "$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
  crashes=$(ls "$dir/crashes" | grep -c "^$t-")
  if [ $rc -ne 0 ]; then
    status=1
    grep -m3 -E "ERROR|runtime error|SUMMARY" "$log"
  fi
  for c in "$dir/crashes/$t"-*; do [ -f "$c" ] && cp "$c" "fuzz/corpus/$t/"; done
  before=$(ls "fuzz/corpus/$t" | wc -l)
  "$dir/fuzz/fuzz_$t" -merge=1 -max_len=65536 "fuzz/corpus/$t" "$work" > "$dir/merge-$t.log" 2>&1 || status=1
  echo "$t: ${runs:-?} executions in ${secs}s, ${cov:-cov: ?}, exit $rc, $crashes crashing input(s), corpus $before -> $(ls "fuzz/corpus/$t" | wc -l) files"
done
exit $status
