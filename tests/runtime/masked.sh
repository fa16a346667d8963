#!/bin/bash
# Target masks (prepare --chat's .mask files, docs/formats.md) on every strategy: the tiny shard
# with a mask beside it that this test writes itself (python3: a pattern of answer-like runs,
# with windows that hold no target at all), trained 3 steps in fp32 on N = 1..4 ranks (M = 2N):
# every final master within 1e-5 relative of the one-rank masked run (the bound and the
# reasoning of equivalence.sh; interleaved-1f1b and zb-v against an 8-layer run, seq1f1b against
# its own one-rank run, as there); the masked run differs from the unmasked one (the mask is
# read); every step's metrics line says how many targets it had, fewer than its tokens, and
# its loss is finite; a mask whose checksum, count or bytes are wrong exits 2 naming it; a
# dataset whose shards do not all have masks exits 2.
source "$(dirname "$0")/runtime_lib.sh"
FP32_TOL=1e-5
command -v python3 >/dev/null || { echo "skipped: no python3 to write the mask"; exit 77; }
cp "$DATA" "$TMP/d_train.bin" || fail "copy"
# runs of 40 targets after runs of 60 non-targets, and the stretch [2000, 2600) all non-targets
python3 - "$TMP/d_train.bin" "$TMP/d_train.mask" <<'PY' || fail "writing the mask"
import struct, sys, zlib
n = struct.unpack("<3i", open(sys.argv[1], "rb").read(12))[2]
bits = bytes(1 if (i % 100) >= 60 and not 2000 <= i < 2600 else 0 for i in range(n))
head = struct.pack("<5i", 20261128, 1, n, sum(bits), zlib.crc32(bits) - (1 << 32 if zlib.crc32(bits) >= 1 << 31 else 0))
open(sys.argv[2], "wb").write(head + bytes(1024 - len(head)) + bits)
PY
D=$TMP/d_train.bin
mtrain() { "$W" train --config "$CFG" --threads 1 --quiet --timeout 60s "$@"; } # runtime_lib's train with the data given
common=(--steps 3 --lr-decay-style constant --transport local --precision fp32)
mtrain "${common[@]}" --data "$DATA" --nranks 1 --strategy 1f1b --num-microbatches 2 --save "$TMP/plain" || fail "unmasked reference"
for M in 2 4 6 8; do
  ref=$TMP/ref-$M
  mtrain "${common[@]}" --data "$D" --nranks 1 --strategy 1f1b --num-microbatches $M --save "$ref" --metrics "$ref.jsonl" || fail "masked reference M=$M"
  python3 - "$ref.jsonl" <<'PY' || fail "masked reference M=$M: metrics"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert len(rows) == 3, rows
for r in rows:
    assert 0 < r["targets"] < r["tokens"] and r["loss"] is not None and math.isfinite(r["loss"]), r
print("masked reference: targets per step", [r["targets"] for r in rows], "of", rows[0]["tokens"], "tokens")
PY
done
line=$("$DIFF" "$TMP/ref-2/step-3" "$TMP/plain/step-3" $FP32_TOL) && fail "the masked run equals the unmasked one: $line"
for N in 1 2 3 4; do
  M=$((2 * N))
  for S in 1f1b weipipe-naive weipipe-interleave wzb1 wzb2 gpipe zb-h1 zb-h2 zb-v interleaved-1f1b seq1f1b fsdp; do
    shape=()
    # two chunks per rank: an 8-layer model, against an 8-layer one-rank run
    case $S in interleaved-1f1b | zb-v)
      shape=(--num-layers 8 --num-chunks $((2 * N)))
      r8=$TMP/ref8-$M
      [ -d "$r8" ] || mtrain "${common[@]}" --data "$D" --nranks 1 --strategy 1f1b --num-layers 8 --num-microbatches $M --save "$r8" || fail "8-layer reference M=$M" ;;
    esac
    out=$TMP/$S-$N
    mtrain "${common[@]}" "${shape[@]}" --data "$D" --nranks $N --strategy $S --num-microbatches $M --save "$out" || fail "$S N=$N"
    r=$TMP/ref-$M
    case $S in interleaved-1f1b | zb-v) r=$TMP/ref8-$M ;; esac
    if [ $S = seq1f1b ]; then # held to its own one-rank run, as in equivalence.sh (segments sum in another order)
      r=$TMP/refseq-$M
      [ -d "$r" ] || mtrain "${common[@]}" --data "$D" --nranks 1 --strategy seq1f1b --num-microbatches $M --save "$r" || fail "seq1f1b reference M=$M"
    fi
    line=$("$DIFF" "$out/step-3" "$r/step-3" $FP32_TOL) || fail "$S N=$N M=$M masked: $line"
    echo "$S N=$N M=$M masked fp32: $line"
  done
done
# bad masks: exit 2 naming the file and what is wrong
cp "$D" "$TMP/e_train.bin"
bad() { # what, python edit of bytearray b, expected text
  python3 -c "import sys; b = bytearray(open('$TMP/d_train.mask', 'rb').read()); $2; open('$TMP/e_train.mask', 'wb').write(b)"
  out=$(mtrain --steps 1 --data "$TMP/e_train.bin" 2>&1); rc=$?
  [ $rc = 2 ] && [[ $out == *e_train.mask* ]] && [[ $out == *"$3"* ]] || fail "$1: exit $rc: $out"
  echo "ok: $1: exit 2: $out"
}
bad "a target count off by one" "b[1024 + 70] ^= 1" "target count"
bad "two bytes swapped (the count kept)" "b[1024 + 70] ^= 1; b[1024 + 10] ^= 1" "checksum"
bad "a byte 2" "b[1024 + 10] = 2" "not 0 or 1"
bad "truncated" "del b[-5:]" "bytes"
bad "another magic" "b[0] ^= 1" "magic"
# shards of one dataset all have a mask or none
mkdir "$TMP/mixed" && cp "$D" "$TMP/d_train.mask" "$TMP/mixed/" && cp "$DATA" "$TMP/mixed/e_train.bin"
out=$(mtrain --steps 1 --data "$TMP/mixed" 2>&1); rc=$?
[ $rc = 2 ] && [[ $out == *"all have one or none"* ]] || fail "mixed masks: exit $rc: $out"
echo "ok: a mask beside one shard and not the other: exit 2: $out"
echo "masked training: every strategy equals the one-rank masked run"
