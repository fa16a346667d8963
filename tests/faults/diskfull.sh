#!/bin/bash
# Saving where the disk is full or the place unwritable: a clear error naming the checkpoint,
# exit 1 (runtime) or 2 (a bad --save), and the previous checkpoint stays the latest and verifies.
#   - a 4 MiB tmpfs holding one checkpoint (root only; skipped otherwise): ENOSPC;
#   - the same tmpfs remounted read-only: EROFS, refused at start (exit 2);
#   - RLIMIT_FSIZE below a shard's size (any user; SIGXFSZ ignored, so writes fail with EFBIG);
#   - a regular file where the --save directory should be: refused up front, exit 2.
source "$(dirname "$0")/faults_lib.sh"
common=(--nranks 3 --strategy wzb1 --timeout 10s --save-every 2)

# expect_failed_save SAVE LOG STEP WHAT: the run failed with a one-line checkpoint error and
# SAVE/latest is still step-STEP, verified.
expect_failed_save() {
  grep -q "weipipe: error: .*checkpoint step" "$2" || { cat "$2"; fail "$4: no clear checkpoint error"; }
  step=$(verify_latest "$1")
  [ "$step" = "step-$3" ] || fail "$4: latest is $step, expected step-$3"
  echo "$4: $(grep -m1 -o 'checkpoint step.*' "$2" | cut -c1-150); latest still step-$3, verifies"
}

if [ "$(id -u)" = 0 ] && mkdir "$TMP/mnt" && mount -t tmpfs -o size=4m tmpfs "$TMP/mnt" 2> "$TMP/mount.err"; then
  cleanup_extra='umount "$TMP/mnt" 2>/dev/null'
  train "${common[@]}" --steps 2 --save "$TMP/mnt/ck" --keep-last 0 || fail "the first save into the tmpfs"
  size=$(du -sk "$TMP/mnt/ck" | cut -f1)
  train "${common[@]}" --steps 6 --save "$TMP/mnt/ck" --keep-last 0 --resume auto > "$TMP/full.log" 2>&1
  rc=$?
  [ $rc = 1 ] || { cat "$TMP/full.log"; fail "tmpfs full: exit $rc, expected 1"; }
  # every rank names the first cause (was: only the failing one; the others "a rank failed")
  # (a rank stopped by another's abort says so, quoting that rank's message; the launcher quotes the last words)
  n=$(grep -c "checkpoint step 4: rank [0-9]*: .*No space left on device" "$TMP/full.log")
  [ "$n" -ge 3 ] || { cat "$TMP/full.log"; fail "tmpfs full: $n of 3 ranks name the first failing rank and its cause"; }
  expect_failed_save "$TMP/mnt/ck" "$TMP/full.log" 2 "4 MiB tmpfs, one ${size} KiB checkpoint in it, full at the next (exit $rc)"
  rm -rf "$TMP/mnt/ck"/step-*.tmp
  mount -o remount,ro "$TMP/mnt" || fail "remount read-only"
  train "${common[@]}" --steps 6 --save "$TMP/mnt/ck" --keep-last 0 --resume auto > "$TMP/ro.log" 2>&1
  rc=$?
  # refused at start by a probe file (was: found at the first save, after the training)
  [ $rc = 2 ] && grep -q "weipipe: error: --save .*cannot create files there: Read-only file system" "$TMP/ro.log" ||
    { cat "$TMP/ro.log"; fail "read-only: exit $rc, expected 2 naming the read-only --save at start"; }
  [ "$(verify_latest "$TMP/mnt/ck")" = step-2 ] || fail "read-only: latest is no longer step-2"
  echo "tmpfs remounted read-only (exit $rc, at start): $(grep -m1 -o 'error: .*' "$TMP/ro.log" | cut -c1-150)"
else
  echo "tmpfs part skipped: not root or mount refused ($(cat "$TMP/mount.err" 2>/dev/null))"
fi

train "${common[@]}" --steps 2 --save "$TMP/ck" || fail "the first save"
( trap '' XFSZ; ulimit -f 64; train "${common[@]}" --steps 4 --save "$TMP/ck" --resume auto ) > "$TMP/fsize.log" 2>&1
rc=$?
[ $rc = 1 ] || { cat "$TMP/fsize.log"; fail "RLIMIT_FSIZE: exit $rc, expected 1"; }
expect_failed_save "$TMP/ck" "$TMP/fsize.log" 2 "RLIMIT_FSIZE 64 KiB (exit $rc)"

: > "$TMP/file"
train "${common[@]}" --steps 2 --save "$TMP/file" > "$TMP/file.log" 2>&1
rc=$?
[ $rc = 2 ] || { cat "$TMP/file.log"; fail "a file as --save: exit $rc, expected 2 (bad input, refused before training)"; }
[ "$(grep -c 'weipipe: error: ' "$TMP/file.log")" -ge 1 ] && grep -q "$TMP/file" "$TMP/file.log" || { cat "$TMP/file.log"; fail "a file as --save: the error does not name it"; }
[ -f "$TMP/file" ] && [ ! -s "$TMP/file" ] || fail "a file as --save: the file was changed"
echo "a regular file as --save (exit $rc): $(grep -m1 -o 'error: .*' "$TMP/file.log" | cut -c1-150)"
