#!/bin/bash
# One rank trains the tiny model for 20 steps: the mean loss of the last 5 steps is below the
# mean of the first 5 by a margin (0.5 nats; a byte-level model starts near ln 256 = 5.5).
source "$(dirname "$0")/runtime_lib.sh"
train --nranks 1 --steps 20 --metrics "$TMP/m.jsonl" || fail "train exited $?"
losses "$TMP/m.jsonl" | awk '{v[NR] = $1} END {
  if (NR != 20) { print "FAIL: " NR " metrics lines, expected 20"; exit 1 }
  for (i = 1; i <= 5; i++) { a += v[i] / 5; b += v[15 + i] / 5 }
  printf "mean loss of steps 1-5 %.4f, of steps 16-20 %.4f\n", a, b
  if (!(b < a - 0.5)) { print "FAIL: the loss did not fall by 0.5"; exit 1 } }'
