#!/bin/sh
# A sweep's smoke mode end to end: scripts/<weak|strong>_scaling.sh --smoke into a temporary
# directory, then check_csv.py on its CSVs and PNGs.
# usage: sweep.sh weak|strong WEIPIPE SOURCE_ROOT
mode=$1 wp=$2 root=$3
case $wp in /*) ;; *) wp=$PWD/$wp ;; esac  # meson passes it relative to the build directory
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$root" || exit 1
if ! WEIPIPE="$wp" "scripts/${mode}_scaling.sh" --smoke --out "$tmp" >"$tmp/log" 2>&1; then
    echo "FAIL: scripts/${mode}_scaling.sh --smoke"
    cat "$tmp/log"
    exit 1
fi
cat "$tmp/log"
"$py" tests/scaling/check_csv.py "$mode" "$wp" "$tmp"
