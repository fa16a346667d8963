#!/bin/sh
# weipipe check and bench from the command line: exit 0 on the tiny config with a loss near
# ln V; exit 2 with exactly one line on stderr (and nothing on stdout) for bad flags and a
# bad --out; --out writes the complete dump atomically; JSON output parses.
wp="$1"
src="$2"
tiny="$src/configs/tiny.ini"
tmp=$(mktemp -d /tmp/wp_check_cli.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

expect2() {
    out=$("$wp" "$@" 2>"$tmp/err")
    rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || [ -n "$out" ]; then
        fail "weipipe $*: exit $rc, $lines stderr lines, stdout '$out'"
        cat "$tmp/err"
    else
        echo "ok   exit 2: weipipe $* -> $(cat "$tmp/err")"
    fi
}

# success on the tiny config, uneven chunks, loss within 0.1 of ln 256 = 5.545
"$wp" check --config "$tiny" --chunk-layers 3,1 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ]; then
    fail "check on tiny.ini exited $rc"; cat "$tmp/out" "$tmp/err"
else
    loss=$(sed -n 's/^loss \([0-9.]*\).*/\1/p' "$tmp/out")
    awk -v l="$loss" 'BEGIN { exit !(l > 5.445 && l < 5.645) }' || fail "tiny loss '$loss' is not near ln 256"
    echo "ok   check tiny.ini: $(tail -n 1 "$tmp/out")"
fi

# JSON: one object with ok = true and four directions
"$wp" check --config "$tiny" --format json >"$tmp/json" || fail "check --format json exited $?"
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] is True and len(d["directions"]) == 4 and d["max_rel_err"] <= d["bound"], d' "$tmp/json" \
    && echo "ok   check --format json parses" || fail "check json: $(cat "$tmp/json")"

# --out: every file, sizes matching the layout, no DIR.tmp left behind
"$wp" check --config "$tiny" --quiet --out "$tmp/dump" >/dev/null || fail "check --out exited $?"
n=$(awk -F'\t' '{ n += $2 * $3 } END { print n }' "$tmp/dump/tensors.tsv" 2>/dev/null)
for f in config.ini inputs.bin targets.bin tensors.tsv params.bin grads.bin loss.txt; do
    [ -s "$tmp/dump/$f" ] || fail "dump lacks $f"
done
[ "$(wc -c <"$tmp/dump/params.bin")" -eq $((4 * n)) ] || fail "params.bin is not $n floats"
[ "$(wc -c <"$tmp/dump/grads.bin")" -eq $((4 * n)) ] || fail "grads.bin is not $n floats"
[ "$(wc -c <"$tmp/dump/inputs.bin")" -eq $((4 * 2 * 32)) ] || fail "inputs.bin is not b*s int32"
grep -q '^ffn-hidden-size = 160$' "$tmp/dump/config.ini" || fail "config.ini lacks the resolved ffn-hidden-size"
[ -e "$tmp/dump.tmp" ] && fail "dump.tmp left behind"
[ "$fails" -eq 0 ] && echo "ok   check --out wrote $n parameters"

# bad usage and bad input
expect2 check --config "$tiny" --num-layers 0
expect2 check --config "$tiny" --hidden-size 63
expect2 check --config "$tiny" --chunk-layers 2,1
expect2 check --config "$tiny" --format csv
expect2 check --config "$tiny" --bogus
expect2 check --config "$tiny" --out "$tmp/dump"   # exists and is not empty
expect2 bench --config "$tiny" --num-query-groups 3

# bench runs and reports a positive rate (no timing assertions), and each step phase with the
# bytes it moves (tiny.ini, mixed: 205,376 parameters; fp16 working copy made by LOAD, not UPDATE;
# bf16 wire gradient)
"$wp" bench --config "$tiny" --threads 2 --format json >"$tmp/bench" || fail "bench exited $?"
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["tokens_per_s"] > 0 and d["gemm_gflops"] > 0 and 0 < d["mfu"], d
n = 205376
want = {"load": 6 * n, "update": 28 * n, "zero": 4 * n, "accumulate": 10 * n, "save": 12 * n}
got = {p["phase"]: p for p in d["phases"]}
assert sorted(got) == sorted(want), got
for k, b in want.items():
    p = got[k]
    assert p["bytes"] == b and p["s"] > 0 and p["bound_s"] > 0 and p["s_median"] >= p["s"], (k, p)
    # the threads each side ran on: tiny.ini is one chunk, above the kernels'"'"' threshold (65,536
    # elements: the run'"'"'s 2) and below the save'"'"'s (1 MiB a put: 1); the bound the faster of 1
    # and 2 (the save'"'"'s, a plain write: 1)
    assert p["threads"] == (1 if k == "save" else 2) and p["bound_threads"] in ((1,) if k == "save" else (1, 2)), (k, p)' "$tmp/bench" \
    && echo "ok   bench --format json: $(cat "$tmp/bench")" || fail "bench json: $(cat "$tmp/bench")"

[ "$fails" -eq 0 ]
