#!/bin/bash
# Over tcp (N processes started by weipipe's own launcher): every strategy on 4 ranks gives
# bit-for-bit the masters of the same run over the local transport (the executor does the same
# arithmetic; only the wire differs). Then one rank is SIGKILLed mid-run: the job exits non-zero
# within the --timeout, and each of the other three ranks' errors names the dead rank.
source "$(dirname "$0")/runtime_lib.sh"
common=(--nranks 4 --steps 3 --lr-decay-style constant --precision fp32)
for S in 1f1b weipipe-naive weipipe-interleave wzb1 wzb2 gpipe zb-h1 zb-h2 seq1f1b interleaved-1f1b fsdp; do
  shape=() # interleaved-1f1b: two chunks per rank need 8 layers
  [ $S = interleaved-1f1b ] && shape=(--num-layers 8)
  train "${common[@]}" "${shape[@]}" --strategy $S --transport local --save "$TMP/$S-local" || fail "$S local"
  train "${common[@]}" "${shape[@]}" --strategy $S --transport tcp --save "$TMP/$S-tcp" > "$TMP/out" 2>&1 ||
    { cat "$TMP/out"; fail "$S tcp"; }
  line=$("$DIFF" "$TMP/$S-tcp/step-3" "$TMP/$S-local/step-3" 0) || fail "$S: tcp differs from local: $line"
  echo "$S N=4 tcp vs local: $line"
done

"$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --nranks 4 --strategy weipipe-interleave \
  --steps 1000000 --transport tcp --timeout 10s > "$TMP/kill.log" 2>&1 &
launcher=$!
victim=""
for _ in $(seq 100); do # wait until all four ranks run, then a little longer: mid-training
  kids=$(pgrep -P $launcher)
  [ "$(echo "$kids" | wc -w)" = 4 ] && break
  sleep 0.1
done
sleep 2
for p in $kids; do
  [ "$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^RANK=//p')" = 2 ] && victim=$p
done
[ -n "$victim" ] || { kill $launcher; fail "rank 2's process not found among [$kids]"; }
t0=$(date +%s.%N)
kill -9 $victim
wait $launcher
rc=$? t1=$(date +%s.%N)
cat "$TMP/kill.log"
elapsed=$(awk -v a=$t0 -v b=$t1 'BEGIN {printf "%.2f", b - a}')
[ $rc -ne 0 ] || fail "the job exited 0 after a rank was killed"
awk -v e=$elapsed 'BEGIN {exit !(e < 12)}' || fail "the job took ${elapsed}s to end (timeout 10s)"
named=$(grep -c '^\[rank [013]\] .*rank 2' "$TMP/kill.log")
[ "$named" = 3 ] || fail "$named of the 3 surviving ranks named rank 2"
echo "rank 2 killed: job ended in ${elapsed}s with exit $rc; all 3 other ranks named it"
