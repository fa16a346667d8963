#!/bin/bash
# A crash at every system call of a save (issue 31): strace's fault injection SIGKILLs a
# one-rank run at the n-th call of one system call, for every file-system call the save of
# step 4 makes (mkdir, openat, write, fsync, ftruncate, rename, unlink, close: each one of them,
# not a sample), then `--resume auto` continues to step 6 and must
#   - start from a finished checkpoint (step-2, or step-4 once its commit is through) that verifies,
#   - reproduce the uninterrupted run's losses bit for bit.
source "$(dirname "$0")/faults_lib.sh"
command -v strace > /dev/null || { echo "SKIP: strace not installed (scripts/setup.sh installs it)"; exit 77; }
strace -qq -o /dev/null true 2> /dev/null || { echo "SKIP: strace cannot trace here (ptrace refused)"; exit 77; }
# LeakSanitizer stops the world with ptrace, which strace holds already: no leak check in the
# traced runs (the resumed ones keep it)
NOLEAK="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
SET=mkdir,openat,write,pwrite64,fsync,fdatasync,rename,renameat2,unlink,unlinkat,rmdir,ftruncate,close
# a constant learning rate: the killed runs stop at --steps 4, the reference goes to 6, and a
# decay over --steps would give their steps 3-4 other rates
ARGS=(train --config "$CFG" --data "$DATA" --threads 1 --quiet --nranks 1 --save-every 2 --lr-decay-style constant)
one() { "$W" "${ARGS[@]}" "$@"; }
cd "$TMP" || exit 1

one --steps 6 --save whole --metrics whole.jsonl > /dev/null 2>&1 || fail "the uninterrupted run"
one --steps 2 --save base > /dev/null 2>&1 || fail "the run to step 2"
# the calls of a run from step 2 to 4, in order; those from the save of step 4 on are the targets
cp -r base probe
ASAN_OPTIONS=$NOLEAK strace -qq -o calls.log -e trace=$SET "$W" "${ARGS[@]}" --steps 4 --save probe --resume auto > /dev/null 2>&1 ||
  fail "the traced run"
first=$(grep -n 'mkdir(".*step-4.tmp"' calls.log | head -1 | cut -d: -f1)
[ -n "$first" ] || fail "no mkdir of step-4.tmp in the traced run"
total=$(wc -l < calls.log)
losses_from whole.jsonl 0 > whole.losses
tried=0 from2=0 from4=0
for ((i = first; i <= total; i++)); do
  call=$(sed -n "${i}p" calls.log | sed 's/(.*//')
  nth=$(head -n "$i" calls.log | sed 's/(.*//' | grep -cx "$call")
  rm -rf ck && cp -r base ck
  # braces with stderr away, so that bash does not report each kill
  { ASAN_OPTIONS=$NOLEAK strace -qq -o /dev/null -e trace="$call" -e inject="$call":signal=KILL:when="$nth" "$W" "${ARGS[@]}" --steps 4 --save ck \
    --resume auto > /dev/null 2>&1; } 2> /dev/null
  rc=$?
  [ $rc = 137 ] || fail "call $i ($call #$nth): the run was not killed (exit $rc)"
  rm -f m.jsonl
  one --steps 6 --save ck --resume auto --metrics m.jsonl > resume.log 2>&1 || { cat resume.log; fail "call $i ($call #$nth): resume failed"; }
  start=$(losses_from m.jsonl 0 | head -1 | cut -d' ' -f1)
  case $start in 3) from2=$((from2 + 1)) ;; 5) from4=$((from4 + 1)) ;; *) fail "call $i ($call #$nth): resumed at step $start" ;; esac
  losses_from whole.jsonl "$start" | cmp -s - <(losses_from m.jsonl 0) ||
    fail "call $i ($call #$nth): losses differ from the uninterrupted run's"
  [ "$(verify_latest ck)" = step-6 ] || fail "call $i ($call #$nth): step-6 not the verified latest"
  tried=$((tried + 1))
done
echo "killed at each of the $tried file-system calls of the save of step 4 (calls $first-$total of the run):"
echo "  resumed from step-2 $from2 times, from step-4 $from4 times; every time the losses of the uninterrupted run, bit for bit"
