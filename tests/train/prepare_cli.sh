#!/bin/sh
# weipipe prepare from the command line: exit 2 and no output for a missing input, a missing
# --out, no input at all or a vocabulary below the bytes; a good run writes both shards with the
# expected token counts, in version 1 (uint16) or, for --vocab-size 128256, version 7 (uint32).
# usage: prepare_cli.sh WEIPIPE
set -u
weipipe=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wp-prepare-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

printf 'hello world\n' > "$tmp/a.txt"          # 12 bytes
printf 'the quick brown fox\n' > "$tmp/b.txt"  # 20 bytes

"$weipipe" prepare "$tmp/a.txt" /nonexistent/input.txt --out "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] || bad "missing input: exit $rc, want 2"
grep -q "/nonexistent/input.txt" "$tmp/err" || bad "missing input not named: $(cat "$tmp/err")"
[ ! -e "$tmp/out" ] || bad "a failed prepare left $(ls -R "$tmp/out")"

"$weipipe" prepare --out "$tmp/out" 2> "$tmp/err"
[ $? -eq 2 ] || bad "no input: exit code not 2"
"$weipipe" prepare "$tmp/a.txt" 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--out" "$tmp/err" || bad "no --out: exit $rc, $(cat "$tmp/err")"
"$weipipe" prepare "$tmp/a.txt" --out "$tmp/out" --val-fraction 1.5 2> "$tmp/err"
[ $? -eq 2 ] && grep -q -- "--val-fraction" "$tmp/err" || bad "--val-fraction 1.5 accepted"

"$weipipe" prepare "$tmp/a.txt" "$tmp/b.txt" --out "$tmp/out" --val-fraction 0.25 --quiet || bad "good prepare failed"
# a.txt: 9 train + 3 val bytes, b.txt: 15 + 5; each non-empty part opens with token 0
size() { wc -c < "$1" | tr -d ' '; }
[ "$(size "$tmp/out/train_000.bin")" -eq $((1024 + 2 * (1 + 9 + 1 + 15))) ] || bad "train shard size $(size "$tmp/out/train_000.bin")"
[ "$(size "$tmp/out/val_000.bin")" -eq $((1024 + 2 * (1 + 3 + 1 + 5))) ] || bad "val shard size $(size "$tmp/out/val_000.bin")"
ls "$tmp/out" | grep -q tmp && bad "temp files left: $(ls "$tmp/out")"
# the header: magic 20240520, version 1 (uint16 tokens) for the byte vocabulary
header() { od -A n -t d4 -N 12 "$1" | tr -s ' ' | sed 's/^ //'; }
[ "$(header "$tmp/out/train_000.bin")" = "20240520 1 26" ] || bad "version-1 header: $(header "$tmp/out/train_000.bin")"
# a vocabulary above 65536: llm.c's version 7 (magic 20240801, uint32 tokens), same tokens
"$weipipe" prepare "$tmp/a.txt" "$tmp/b.txt" --out "$tmp/out7" --val-fraction 0.25 --vocab-size 128256 --quiet \
  || bad "prepare --vocab-size 128256 failed"
[ "$(header "$tmp/out7/train_000.bin")" = "20240801 7 26" ] || bad "version-7 header: $(header "$tmp/out7/train_000.bin")"
[ "$(size "$tmp/out7/train_000.bin")" -eq $((1024 + 4 * 26)) ] || bad "version-7 train shard size $(size "$tmp/out7/train_000.bin")"
[ "$(size "$tmp/out7/val_000.bin")" -eq $((1024 + 4 * 10)) ] || bad "version-7 val shard size $(size "$tmp/out7/val_000.bin")"
"$weipipe" prepare "$tmp/a.txt" --out "$tmp/bad" --vocab-size 255 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--vocab-size" "$tmp/err" && [ ! -e "$tmp/bad" ] || bad "--vocab-size 255: exit $rc, $(cat "$tmp/err")"
[ $fail -eq 0 ] && echo "train/prepare_cli: all checks passed"
exit $fail
