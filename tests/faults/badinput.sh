#!/bin/bash
# Malformed configs and flags across the subcommands (a table): each exits 2 with exactly one
# error line on stderr ("weipipe: error: ...", the last and only line), nothing on stdout, and leaves no output file behind (every output
# flag of the case points into a directory that must stay empty).
source "$(dirname "$0")/faults_lib.sh"
cd "$TMP" || exit 1
mkdir out
printf '[model]\nhidden-sise = 64\n' > unknown-key.ini
printf 'num-layers = -3\n' > negative.ini
printf 'this line has no equals sign\n' > noequals.ini
printf 'config = other.ini\n' > nested.ini
printf '[model]\nnum-layers = 4\nnum-layers = x\n' > badvalue.ini
printf 'precision = fp8\n' > badchoice.ini
printf '\xff\xfe\x00binary\n' > binary.ini
: > empty-file
printf 'hello' > text.txt
D=(--data "$DATA")
O=(--save out/ck --metrics out/m.jsonl --trace out/t.json)
cases=(
  "train --config unknown-key.ini ${D[*]} ${O[*]}"
  "train --config negative.ini ${D[*]} ${O[*]}"
  "train --config noequals.ini ${D[*]} ${O[*]}"
  "train --config nested.ini ${D[*]} ${O[*]}"
  "train --config badvalue.ini ${D[*]} ${O[*]}"
  "train --config badchoice.ini ${D[*]} ${O[*]}"
  "train --config binary.ini ${D[*]} ${O[*]}"
  "train --config missing.ini ${D[*]} ${O[*]}"
  "train --num-layers 0 ${D[*]} ${O[*]}"
  "train --hidden-size 63 ${D[*]} ${O[*]}"
  "train --num-query-groups 3 ${D[*]} ${O[*]}"
  "train --chunk-layers 3,2 ${D[*]} ${O[*]}"
  "train --chunk-layers 3,x,1 ${D[*]} ${O[*]}"
  "train --nranks 0 ${D[*]} ${O[*]}"
  "train --strategy zigzag ${D[*]} ${O[*]}"
  "train --steps 0 ${D[*]} ${O[*]}"
  "train --timeout -5s ${D[*]} ${O[*]}"
  "train --timeout soon ${D[*]} ${O[*]}"
  "train --link-bandwidth 10 ${D[*]} ${O[*]}"
  "train --device-memory 12Q ${D[*]} ${O[*]}"
  "train --max-skipped-steps -1 ${D[*]} ${O[*]}"
  "train --save-every -1 ${D[*]} ${O[*]}"
  "train --data missing.bin ${O[*]}"
  "train --data text.txt ${O[*]}"
  "train --data empty-file ${O[*]}"
  "train --resume missing-ckpt ${D[*]} ${O[*]}"
  "train --save text.txt ${D[*]} --metrics out/m.jsonl"
  "train --vocab-size 100 ${D[*]} ${O[*]}"
  "train ${D[*]} ${O[*]} stray-argument"
  "simulate --strategy zigzag --trace out/t.json"
  "simulate --nranks 0 --trace out/t.json"
  "simulate --format xml"
  "schedule --strategy zigzag --svg out/s.svg --trace out/t.json"
  "schedule --num-microbatches -1 --svg out/s.svg"
  "eval"
  "eval missing-ckpt ${D[*]}"
  "eval text.txt ${D[*]}"
  "prepare missing.txt --out out/prep"
  "prepare text.txt --out out/prep --val-fraction 1.5"
  "export missing-ckpt out/hf"
  "export text.txt out/hf"
  "check --precision fp8 --out out/check"
  "bench --format xml"
  "train --bogus-flag"
  "nosuchcommand"
)
bad=0
for c in "${cases[@]}"; do
  # shellcheck disable=SC2086 # each case is a list of words
  "$W" $c > stdout 2> stderr
  rc=$?
  lines=$(wc -l < stderr)
  left=$(find out -mindepth 1 | head -3 | tr '\n' ' ')
  if [ $rc -ne 2 ] || [ "$lines" -ne 1 ] || [ -s stdout ] || ! tail -1 stderr | grep -q '^weipipe: error: ' || [ -n "$left" ]; then
    echo "FAIL: weipipe $c: exit $rc, $lines error line(s), $(wc -c < stdout) stdout bytes, left [$left]"
    head -3 stderr
    bad=$((bad + 1))
  else
    echo "ok: weipipe $c -> $(tail -1 stderr | cut -c1-140)"
  fi
  rm -rf out/* out/.[!.]* 2>/dev/null
done
# Values holding control bytes (a newline, a terminal escape) are echoed escaped: the error stays
# one line and no raw control byte reaches the terminal.
ctl=0
hostile_value() { # weipipe args...
  "$W" "$@" > stdout 2> stderr
  rc=$?
  ctl=$((ctl + 1))
  if [ $rc -ne 2 ] || [ "$(wc -l < stderr)" -ne 1 ] || LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' stderr \
     || ! grep -q '\\x0a\|\\x1b' stderr; then
    echo "FAIL: weipipe $(printf '%q ' "$@"): exit $rc, $(wc -l < stderr) stderr line(s)"
    head -3 stderr | cat -v
    bad=$((bad + 1))
  else
    echo "ok: weipipe $(printf '%q ' "$@") -> $(cat stderr)"
  fi
}
hostile_value train --strategy $'zig\nweipipe: error: forged line' --data "$DATA"
hostile_value train --config $'\e[2Jgone.ini' --data "$DATA"
hostile_value simulate --format $'csv\n'
hostile_value eval $'ck\e]0;title\a' --data "$DATA"
hostile_value train --data $'shard\n.bin'
echo "$(( ${#cases[@]} + ctl )) malformed invocations, $bad wrong"
[ $bad = 0 ]
