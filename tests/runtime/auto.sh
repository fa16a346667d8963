#!/bin/bash
# train --calibrate and train --strategy auto (docs/runtime.md). Timing is never asserted: the
# fragment's structure is (every line a comment, a section or a flag simulate knows with a
# positive finite value in its unit), and simulate --config reads it back unchanged; --strategy
# auto on 4 ranks over tcp prints one pick line, trains the pick onto the single-rank weights
# (fp32, within 1e-4 relative: seq1f1b's segment sums are the loosest pick, equivalence.sh),
# prints predicted vs measured; flags the user fixed (--warmup-extra, b and M) stay fixed.
source "$(dirname "$0")/runtime_lib.sh"
TOL=1e-4
frag=$TMP/machine.ini

# 1. the fragment: 4 ranks over tcp, two per node (hops inside and between nodes)
train --nranks 4 --transport tcp --ranks-per-node 2 --calibrate "$frag" > "$TMP/cal.out" 2>&1 ||
  { cat "$TMP/cal.out"; fail "train --calibrate"; }
[ -s "$frag" ] || fail "--calibrate wrote no $frag"
[ -e "$frag.tmp" ] && fail "--calibrate left $frag.tmp"
seen=""
while IFS= read -r l; do
  case $l in '#'*|'['*']') continue ;; esac
  [[ $l =~ ^([a-z-]+)\ =\ ([0-9.e+-]+)(Byte|s)?$ ]] || fail "fragment line '$l' is not 'flag = number[unit]'"
  key=${BASH_REMATCH[1]} num=${BASH_REMATCH[2]} unit=${BASH_REMATCH[3]}
  case $key in
    device-tflops) want="" ;;
    link-bandwidth|node-link-bandwidth) want=Byte ;;
    link-latency|node-link-latency) want=s ;;
    *) fail "fragment sets '$key', which the simulator does not read" ;;
  esac
  [ "$unit" = "$want" ] || fail "fragment: $key '$l' has unit '$unit', want '$want'"
  awk -v x="$num" 'BEGIN { exit !(x + 0 > 0 && x + 0 < 1e300) }' || fail "fragment: $key = $num is not positive and finite"
  seen="$seen $key"
done < "$frag"
for k in device-tflops link-bandwidth link-latency node-link-bandwidth node-link-latency; do
  [[ " $seen " == *" $k "* ]] || fail "fragment lacks $k (4 ranks, 2 per node): $(cat "$frag")"
done
# simulate reads it: its machine line shows the fragment's device speed
tf=$(sed -n 's/^device-tflops = //p' "$frag")
sim=$("$W" simulate --config "$CFG" --config "$frag" --nranks 4 --ranks-per-node 2) || fail "simulate --config $frag"
grep -q "; $tf TFLOP/s" <<< "$sim" || fail "simulate did not take device-tflops $tf from the fragment: $(grep '^ring:' <<< "$sim")"
echo "fragment: $(grep -v '^#' "$frag" | tr '\n' ' ')"

# 2. --strategy auto on 4 ranks over tcp lands on the single-rank weights
common=(--steps 3 --lr-decay-style constant --precision fp32 --num-microbatches 8)
train "${common[@]}" --nranks 1 --strategy 1f1b --transport local --save "$TMP/ref" || fail "single-rank reference"
train "${common[@]}" --nranks 4 --transport tcp --strategy auto --save "$TMP/auto" > "$TMP/auto.out" 2> "$TMP/auto.err" ||
  { cat "$TMP/auto.out" "$TMP/auto.err"; fail "train --strategy auto over tcp"; }
picks=$(grep -c 'auto: .* predicted [0-9]* tokens/s (fastest of' "$TMP/auto.out")
[ "$picks" = 1 ] || fail "want one pick line, got $picks: $(cat "$TMP/auto.out")"
pick=$(grep 'auto: .* predicted [0-9]* tokens/s (fastest of' "$TMP/auto.out")
strategy=$(sed 's/^\(\[rank 0\] \)\{0,1\}auto: \([a-z0-9-]*\) .*/\2/' <<< "$pick")
"$W" simulate --config "$CFG" --nranks 4 --device-tflops 1 --strategy "$strategy" > /dev/null || fail "the pick '$strategy' is not a strategy: $pick"
# b and M are the run's (the data of each step)
grep -q -- "--micro-batch-size 2 --num-microbatches 8" <<< "$pick" || fail "the pick changed b or M: $pick"
grep -q "auto: $strategy predicted [0-9]* tokens/s, measured [0-9]* tokens/s" "$TMP/auto.out" ||
  fail "no predicted vs measured line: $(cat "$TMP/auto.out")"
line=$("$DIFF" "$TMP/auto/step-3" "$TMP/ref/step-3" $TOL) || fail "auto ($pick) vs single rank: $line"
echo "$pick"
echo "auto vs single rank, fp32: $line"

# 3. a knob the user fixed keeps its value: every hop slow, two extra warm-up forwards given
train "${common[@]}" --nranks 4 --transport local --strategy auto --ranks-per-node 1 --warmup-extra 2 \
  --metrics "$TMP/held.jsonl" --save "$TMP/held" > "$TMP/held.out" 2>&1 || { cat "$TMP/held.out"; fail "auto with --warmup-extra 2"; }
grep -q -- "--warmup-extra" "$TMP/held.out" && fail "the search varied --warmup-extra the user fixed: $(cat "$TMP/held.out")"
head -1 "$TMP/held.jsonl" | grep -q '"warmup-extra": "2"' || fail "the run did not keep --warmup-extra 2: $(head -c 300 "$TMP/held.jsonl")"
head -1 "$TMP/held.jsonl" | grep -q '"strategy": "auto"' && fail "the metrics run line says auto, not the pick"
line=$("$DIFF" "$TMP/held/step-3" "$TMP/ref/step-3" $TOL) || fail "auto with --warmup-extra 2 vs single rank: $line"
echo "held --warmup-extra 2: $(grep 'auto: .*fastest' "$TMP/held.out"); vs single rank: $line"

# 4. bad input: --calibrate into a directory that does not exist fails with one line, exit 1
train --nranks 2 --transport local --calibrate "$TMP/no/such/dir/m.ini" > "$TMP/bad.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "--calibrate into a missing directory: exit $rc, want 1: $(cat "$TMP/bad.out")"
grep -q "no/such/dir/m.ini" "$TMP/bad.out" || fail "the error does not name the file: $(cat "$TMP/bad.out")"
echo "PASS"
