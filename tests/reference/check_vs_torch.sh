#!/bin/sh
# Dump the C model's loss and gradients with `weipipe check` and prove them with the
# independent PyTorch reference (scripts/torch_ref.py, float64).
#
#   check_vs_torch.sh WEIPIPE SOURCE_ROOT MODE [weipipe check flags ...]
#   MODE: pass          torch_ref.py must accept the dump (exit 0)
#         grad|param|loss|rope|untie|nodoc  the clean dump must pass, and a copy with that one thing corrupted
#                       (tests/reference/corrupt_dump.py) must be rejected (exit 1)
# Exit 0 pass, 77 skip (no Python with torch), anything else fail.
# WP_TORCH_PYTHON overrides the interpreter (default Debian's /usr/bin/python3, which has torch).
set -u
if [ $# -lt 3 ]; then
    echo "usage: $0 WEIPIPE SOURCE_ROOT MODE [weipipe check flags ...]" >&2
    exit 2
fi
weipipe=$1 root=$2 mode=$3
shift 3
case $weipipe in /*) ;; *) weipipe=$PWD/$weipipe ;; esac # meson passes it relative to the build dir
python=${WP_TORCH_PYTHON:-/usr/bin/python3}
if ! [ -x "$python" ]; then
    echo "skipped: no Python interpreter at $python (set WP_TORCH_PYTHON)"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wp-torchref.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "+ weipipe check --config configs/tiny.ini --precision fp32 $*"
(cd "$root" && "$weipipe" check --config configs/tiny.ini --precision fp32 --quiet --out "$tmp/dump" "$@") || {
    echo "FAIL: weipipe check exited $?"
    exit 1
}
"$python" "$root/scripts/torch_ref.py" "$tmp/dump"
rc=$?
[ "$mode" = pass ] && exit $rc
if [ $rc -ne 0 ]; then
    echo "FAIL: the clean dump did not pass (exit $rc), so the negative test would prove nothing"
    exit 1
fi
"$python" "$root/tests/reference/corrupt_dump.py" "$tmp/dump" "$tmp/bad" "$mode" || exit 1
"$python" "$root/scripts/torch_ref.py" "$tmp/bad"
rc=$?
if [ $rc -ne 1 ]; then
    echo "FAIL: torch_ref.py exited $rc on a dump with a corrupted $mode (expected 1)"
    exit 1
fi
echo "ok: the corrupted $mode was caught"
exit 0
