#!/bin/sh
# weipipe schedule / simulate from the outside: exit 0 only for valid lists, 1 when the lists break
# an invariant (WEIPIPE_SCHEDULE_BREAK hook), 2 with exactly one stderr line and no stdout for bad
# input; the drawings and machine-readable outputs parse.
wp="$1"
root="$2"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

expect() { # expect CODE ARGS...: exit code CODE; for 1 and 2 exactly one stderr line
    code=$1; shift
    "$wp" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -ne "$code" ]; then
        fail "weipipe $*: exit $rc, want $code"; head -3 "$tmp/err"; return
    fi
    if [ "$code" -ne 0 ] && [ "$lines" -ne 1 ]; then fail "weipipe $*: $lines stderr lines, want 1"; cat "$tmp/err"; fi
    if [ "$code" -eq 2 ] && [ -s "$tmp/out" ]; then fail "weipipe $*: bad input printed to stdout"; fi
}

json_ok() { python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; }

# every strategy the --strategy flag offers (its help lists them between braces), but 'all'
strategies=$("$wp" simulate --help | sed -n 's/^ *--strategy *{\([^}]*\)}.*/\1/p' | tr '|' ' ' | sed 's/ all//; s/ auto//')
n_strategies=$(echo $strategies | wc -w)
[ "$n_strategies" -ge 9 ] || fail "--strategy help lists $n_strategies strategies: '$strategies'"

# valid lists
for s in $strategies; do
    expect 0 schedule --strategy $s --nranks 3 --num-microbatches 6
    grep -q '^valid:' "$tmp/out" || fail "schedule $s: no 'valid:' line"
done
expect 0 schedule --strategy interleaved-1f1b --i1f1b-order breadth-first --nranks 3 --num-microbatches 5 --num-chunks 9
grep -q '^valid:' "$tmp/out" || fail "interleaved-1f1b breadth-first: no 'valid:' line"
grep -q 'owns 0,3,6' "$tmp/out" || fail "interleaved-1f1b v=3: rank 0 does not own chunks 0, 3 and 6" 
expect 0 schedule --strategy wzb2 --wzb2-owner last --nranks 4 --num-microbatches 4
grep -q 'starts holding .*W\[3\]@0' "$tmp/out" || fail "wzb2 --wzb2-owner last: rank 3 does not stage W[3]"

# broken on purpose: exit 1, one line naming rank and action
for m in drop-send swap-version double-gw free-early update-early; do
    WEIPIPE_SCHEDULE_BREAK=$m expect 1 schedule --strategy weipipe-interleave --nranks 4 --num-microbatches 8
    grep -q 'breaks an invariant: .*rank [0-9]' "$tmp/err" || fail "break $m: '$(cat "$tmp/err")'"
done
WEIPIPE_SCHEDULE_BREAK=nonsense expect 2 schedule --strategy 1f1b --nranks 2

# bad input: exit 2 with one line
expect 2 schedule --strategy nosuch
expect 2 schedule --strategy all
expect 2 schedule --strategy 1f1b --nranks 0
expect 2 schedule --strategy 1f1b --nranks 2 --num-microbatches -3
expect 2 schedule --strategy weipipe-interleave --nranks 4 --num-microbatches 6
grep -q 'multiple of --nranks 4' "$tmp/err" || fail "M not a multiple: '$(cat "$tmp/err")'"
expect 2 schedule --strategy wzb1 --nranks 4 --num-layers 8 --num-chunks 3
grep -q 'one chunk per rank' "$tmp/err" || fail "bad chunk count: '$(cat "$tmp/err")'"
expect 2 schedule --strategy interleaved-1f1b --nranks 4 --num-layers 8 --num-chunks 6
grep -q 'multiple of --nranks 4' "$tmp/err" || fail "interleaved C not vN: '$(cat "$tmp/err")'"
expect 2 schedule --strategy interleaved-1f1b --nranks 4 --num-microbatches 6
grep -q 'breadth-first takes any' "$tmp/err" || fail "interleaved depth-first M: '$(cat "$tmp/err")'"
expect 2 schedule --strategy interleaved-1f1b --i1f1b-order sideways --nranks 2
expect 2 schedule --strategy 1f1b --nranks 4 --num-layers 2
expect 2 simulate --strategy all --config "$root/configs/tiny.ini" --nranks 2
expect 2 simulate --strategy wzb1 --config "$root/configs/tiny.ini" --nranks 4 --num-microbatches 6 --device-tflops 1
expect 2 simulate --strategy all --device-tflops 1 --link-bandwidth 10

# drawings and machine-readable output
expect 0 schedule --strategy wzb1 --nranks 4 --num-microbatches 8 --svg "$tmp/t.svg" --trace "$tmp/t.json" --format csv
head -c 4 "$tmp/t.svg" | grep -q '<svg' || fail "--svg did not write an SVG"
grep -q 'rank 3' "$tmp/t.svg" || fail "--svg lacks rank 3"
json_ok "$tmp/t.json" || fail "--trace is not JSON"
grep -q '"traceEvents"' "$tmp/t.json" || fail "--trace lacks traceEvents"
head -1 "$tmp/out" | grep -q '^rank,index,turn,op' || fail "--format csv header"
expect 0 schedule --strategy 1f1b --nranks 2 --num-microbatches 3 --format json
json_ok "$tmp/out" || fail "schedule --format json is not JSON"

expect 0 simulate --strategy all --config "$root/configs/tiny.ini" --nranks 2 --num-microbatches 4 --device-tflops 1 \
    --link-bandwidth 1Gbit --link-latency 10us --trace "$tmp/s.json"
n=0
for s in $strategies; do
    grep -q "^$s .*x\$" "$tmp/out" && n=$((n + 1))
done
[ "$n" -eq "$n_strategies" ] || fail "simulate all: $n strategy rows with a result, want $n_strategies"
json_ok "$tmp/s.json" || fail "simulate --trace is not JSON"
expect 0 simulate --strategy all --config "$root/configs/tiny.ini" --nranks 2 --device-tflops 1 --format csv
[ "$(wc -l <"$tmp/out")" -eq $((n_strategies + 1)) ] || fail "simulate csv: $(wc -l <"$tmp/out") lines, want $((n_strategies + 1))"
expect 0 simulate --strategy wzb2 --config "$root/configs/tiny.ini" --nranks 4 --device-tflops 1 --format json
json_ok "$tmp/out" || fail "simulate --format json is not JSON"
"$wp" simulate --help | grep -q 'Gbit' || fail "simulate --help does not say which bandwidth units"

# --strategy auto simulates its configurations on every CPU the process may use: the ranking is
# the same, byte for byte, on one CPU (taskset) as on all of them
auto_sim() { # auto_sim [PREFIX...]: the ranking, run under PREFIX (taskset)
    "$@" "$wp" simulate --strategy auto --config "$root/configs/paper-h4096-s4k.ini" --nranks 8 --ranks-per-node 4 \
        --num-microbatches 16 --format csv
}
auto_sim >"$tmp/auto-all" 2>&1 || fail "simulate --strategy auto failed: $(tail -1 "$tmp/auto-all")"
[ "$(wc -l <"$tmp/auto-all")" -gt 100 ] || fail "simulate --strategy auto: $(wc -l <"$tmp/auto-all") lines, want over 100"
if command -v taskset >/dev/null; then
    cpu=$(taskset -pc $$ | sed 's/.*: //' | cut -d, -f1 | cut -d- -f1) # the first CPU we may use
    auto_sim taskset -c "$cpu" >"$tmp/auto-one" 2>&1 || fail "simulate --strategy auto on CPU $cpu alone failed"
    cmp -s "$tmp/auto-one" "$tmp/auto-all" || fail "simulate --strategy auto ranks differently on one CPU and on $(nproc)"
fi

# document masks: --strategy auto ranks by the masked attention. Documents of 1024 in s = 8192
# score (1024 + 1)/(8192 + 1) of the causal pairs (the line says so), and every configuration's
# step is shorter than unmasked: the ranking's input changed
doc_sim() {
    "$wp" simulate --strategy auto --device-tflops 10 --hidden-size 256 --num-layers 4 --num-attention-heads 4 \
        --seq-length 8192 --vocab-size 1024 --nranks 2 --recompute "$@"
}
doc_sim >"$tmp/doc-off" 2>&1 || fail "simulate --strategy auto unmasked: $(tail -1 "$tmp/doc-off")"
doc_sim --doc-mask --doc-length-mean 1024 >"$tmp/doc-on" 2>&1 || fail "simulate --doc-mask: $(tail -1 "$tmp/doc-on")"
grep -q 'document masks: attention scores 0.1251 of the causal' "$tmp/doc-on" || fail "simulate --doc-mask: no share line"
best() { awk '$1 == 1 && $2 != "" {print $3, $4; exit}' "$1"; }
ms() { awk '{v = $1; if ($2 == "s") v *= 1000; print v}'; }
off=$(best "$tmp/doc-off" | ms) on=$(best "$tmp/doc-on" | ms)
awk -v a="$on" -v b="$off" 'BEGIN {exit !(a > 0 && a < 0.8 * b)}' ||
    fail "simulate --doc-mask: best step $on ms, unmasked $off ms (want under 0.8x)"
echo "doc masks: best simulated step $on ms, unmasked $off ms"

# --optimizer-memory as auto's knob: under a --device-memory between the least device peak of the
# host-state rows and that of the device-state rows, only host state fits and auto picks it; with
# no limit the knob is still tried (rows of both settings). Limits from auto's own csv (its
# columns stay as they were; the host column is in text and json).
tiny="--config $root/configs/tiny.ini --nranks 2 --device-tflops 1 --strategy auto"
# shellcheck disable=SC2086
"$wp" simulate $tiny --format csv >"$tmp/auto-om.csv" || fail "simulate --strategy auto --format csv (tiny)"
lims=$(awk -F, 'NR > 1 { h = index($10, "--optimizer-memory host") > 0; if (h) { if (hm == "" || $6 < hm) hm = $6 }
                          else if (dm == "" || $6 < dm) dm = $6 }
                END { if (hm != "" && dm != "" && hm < dm) printf "%d\n", (hm + dm) / 2 }' "$tmp/auto-om.csv")
if [ -z "$lims" ]; then
    fail "auto's csv has no host-state row below every device-state row's peak: $(head -3 "$tmp/auto-om.csv")"
else
    # shellcheck disable=SC2086
    pick=$("$wp" simulate $tiny --device-memory "$lims" | grep '^pick:')
    case $pick in *"--optimizer-memory host"*) ;; *) fail "--device-memory $lims: only host state fits, auto picked: $pick" ;; esac
    # and the host column (json) is the state that left the device: host rows carry bytes, device rows none
    # shellcheck disable=SC2086
    "$wp" simulate $tiny --format json >"$tmp/auto-om.json" || fail "simulate --strategy auto --format json (tiny)"
    python3 -c 'import json, sys
rows = json.load(open(sys.argv[1]))["configurations"]
bad = [r["knobs"] for r in rows if ("--optimizer-memory host" in r["knobs"]) != (r["host_bytes_per_rank"] > 0)]
sys.exit(1 if bad or not rows else 0)' "$tmp/auto-om.json" ||
        fail "auto json: host_bytes_per_rank set on a device-state row or missing on a host-state row"
fi

[ "$fails" -eq 0 ] && echo "cli: all checks passed"
[ "$fails" -eq 0 ]
