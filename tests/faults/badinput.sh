#!/bin/bash
# Malformed configs, flags and token shards across the subcommands (a table): each exits 2 with exactly one
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
# Token shards: a good version-7 one (prepare --vocab-size 128256 writes uint32 tokens), then
# each field broken in a copy (the header is 256 int32: magic, version, count; tokens follow).
awk 'BEGIN { for (i = 0; i < 40; i++) print "a line of text for a small token shard" }' > doc.txt
"$W" prepare doc.txt --out v7 --vocab-size 128256 --val-fraction 0 --quiet || { echo "FAIL: prepare"; exit 1; }
"$W" prepare doc.txt --out v1 --val-fraction 0.2 --quiet || { echo "FAIL: prepare"; exit 1; }
patch_bytes() { cp "$1" "$2"; printf "$4" | dd of="$2" bs=1 seek="$3" conv=notrunc status=none; }
patch_bytes v7/train_000.bin badmagic.bin 0 '\001\002\003\004'      # magic 67305985
patch_bytes v7/train_000.bin badversion.bin 4 '\001'                  # magic 20240801 with version 1
patch_bytes v7/train_000.bin bigtoken.bin 1036 '\000\001\000\000'  # token 3 = 256, not below --vocab-size 256
head -c -2 v7/train_000.bin > short7.bin                            # half a uint32 token cut off
{ cat v7/train_000.bin; printf 'xyzw'; } > long7.bin                  # one token more than the count
mkdir noshards mixed
printf 'notes\n' > noshards/notes.txt
cp v1/train_000.bin mixed/train_000.bin && cp v7/train_000.bin mixed/fineweb_val_000000.bin
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
  "train --vocab-size 2147483648 ${D[*]} ${O[*]}"
  "train --data badmagic.bin ${O[*]}"
  "train --data badversion.bin ${O[*]}"
  "train --data short7.bin ${O[*]}"
  "train --data long7.bin ${O[*]}"
  "train --data bigtoken.bin ${O[*]}"
  "train --data nomatch/*_train_*.bin ${O[*]}"
  "train --data noshards ${O[*]}"
  "train --eval-every 1 ${D[*]} ${O[*]}"
  "train --eval-every 1 --val-data noshards ${D[*]} ${O[*]}"
  "train --eval-every 1 --val-data nomatch_*.bin ${D[*]} ${O[*]}"
  "train --eval-every 1 --data mixed ${O[*]}"
  "train --data v1/*.bin --val-data badmagic.bin ${O[*]}"
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
  "prepare text.txt --out out/prep --vocab-size 100"
  "export missing-ckpt out/hf"
  "export text.txt out/hf"
  "check --precision fp8 --out out/check"
  "bench --format xml"
  "train --bogus-flag"
  "nosuchcommand"
)
bad=0
set -f # patterns in the cases reach weipipe as they are (its own glob(3) expands them)
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
  set +f
  rm -rf out/* out/.[!.]* 2>/dev/null
  set -f
done
set +f
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
