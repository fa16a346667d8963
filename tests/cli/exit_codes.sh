#!/bin/sh
# The binary itself: bad usage exits 2 with exactly one line on stderr and nothing on stdout.
wp="$1"
fails=0
expect2() {
    out=$("$wp" "$@" 2>/tmp/wp_exit_err.$$)
    rc=$?
    lines=$(wc -l </tmp/wp_exit_err.$$)
    if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || [ -n "$out" ]; then
        echo "FAIL: weipipe $*: exit $rc, $lines stderr lines, stdout '$out'"
        cat /tmp/wp_exit_err.$$
        fails=$((fails + 1))
    fi
}
expect2
expect2 nosuchcommand
expect2 train --bogus
expect2 train --hidden-size abc
expect2 check --precision fp8
expect2 simulate --link-bandwidth 10
expect2 train --config /nonexistent.ini
"$wp" --help >/dev/null || { echo "FAIL: --help"; fails=$((fails + 1)); }
"$wp" train --help | grep -q -- --num-layers || { echo "FAIL: train --help lacks --num-layers"; fails=$((fails + 1)); }
rm -f /tmp/wp_exit_err.$$
[ "$fails" -eq 0 ]
