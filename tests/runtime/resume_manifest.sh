#!/bin/bash
# --resume reads the shape, vocabulary and schedule from the checkpoint's manifest: a resume
# with no model or schedule flag (no --config) gives the uninterrupted run's losses bit for bit
# (document masks with restarting positions included: the resumed run's manifest says so);
# flags given that disagree are all named in one exit-2 line; a fresh run into another run's
# --save is refused unless --overwrite-save, which moves the old one aside.
source "$(dirname "$0")/runtime_lib.sh"
bare() { "$W" train --data "$DATA" --threads 1 --quiet --timeout 60s "$@"; } # no --config: weipipe's defaults
run=(--lr-decay-style cosine --warmup-steps 2 --min-lr 1e-4 --steps 6 --doc-mask --doc-boundary-id 10 --doc-positions restart)
train "${run[@]}" --save "$TMP/ck" --save-every 3 --keep-last 0 --metrics "$TMP/full.jsonl" || fail "uninterrupted run"
bare --resume "$TMP/ck/step-3" --save "$TMP/ck2" --metrics "$TMP/resumed.jsonl" || fail "resume with no model flags"
want=$(losses "$TMP/full.jsonl" | tail -n 3) got=$(losses "$TMP/resumed.jsonl")
[ "$(echo "$got" | wc -l)" = 3 ] || fail "resumed run wrote $(echo "$got" | wc -l) steps, want 3 (--steps from the manifest)"
[ "$want" = "$got" ] || fail "losses of steps 4..6 differ: uninterrupted [$want] resumed [$got]"
echo "resume from the manifest alone: steps 4..6 bit-identical:" $got
man=$TMP/ck2/step-6/manifest.json
grep -q '"doc-mask": *true' "$man" && grep -q '"doc-positions": *"restart"' "$man" && grep -q '"doc-boundary-id": *10' "$man" ||
  fail "the resumed run did not carry --doc-mask --doc-boundary-id 10 --doc-positions restart: $(grep -o '"doc-[a-z-]*": *[^,]*' "$man" | tr '
' ' ')"
# every disagreement in one line
out=$(bare --resume "$TMP/ck/step-3" --hidden-size 32 --lr 1e-2 --lr-decay-style linear --num-layers 4 2>&1); rc=$?
[ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && [[ $out == *--hidden-size* && $out == *--lr\ * && $out == *--lr-decay-style* ]] &&
  [[ $out != *--num-layers* ]] && [ "$(echo "$out" | grep -o -- --hidden-size | wc -l)" = 1 ] || fail "disagreeing flags: exit $rc, '$out'"
echo "disagreements: $out"
# a fresh run into a --save holding another run's steps
out=$(train --steps 2 --save "$TMP/ck" 2>&1); rc=$?
[ $rc = 2 ] && [[ $out == *--overwrite-save* ]] || fail "fresh run into another run's --save: exit $rc, '$out'"
train --steps 2 --save "$TMP/ck" --overwrite-save || fail "--overwrite-save"
old=$(ls -d "$TMP"/ck.old-* 2>/dev/null | head -n 1)
[ -n "$old" ] && [ -d "$old/step-3" ] && [ -d "$old/step-6" ] && [ -d "$TMP/ck/step-2" ] && [ ! -e "$TMP/ck/step-6" ] ||
  fail "--overwrite-save: old steps not kept aside ($old) or the new run not in $TMP/ck"
echo "fresh --save refused; --overwrite-save kept the old steps in $(basename "$old")"
