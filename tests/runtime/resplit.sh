#!/bin/bash
# A checkpoint written by weipipe-interleave on 4 ranks resumes under 1f1b on 2 ranks (other
# chunking, other owners): the losses of steps 4..6 equal a one-rank uninterrupted run within
# 1e-5 relative (fp32; only the order of fp32 sums differs).
source "$(dirname "$0")/lib.sh"
common=(--transport local --lr-decay-style constant --precision fp32 --num-microbatches 4)
train "${common[@]}" --nranks 1 --strategy 1f1b --steps 6 --metrics "$TMP/full.jsonl" || fail "uninterrupted run"
train "${common[@]}" --nranks 4 --strategy weipipe-interleave --steps 3 --save "$TMP/ck" || fail "first half on 4 ranks"
train "${common[@]}" --nranks 2 --strategy 1f1b --steps 6 --save "$TMP/ck" --resume auto --metrics "$TMP/re.jsonl" || fail "second half on 2 ranks"
paste <(losses "$TMP/full.jsonl" | tail -n 3) <(losses "$TMP/re.jsonl") |
  awk '{d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r; n++}
       END {printf "steps compared %d, max relative loss difference %.3e (tolerance 1e-5)\n", n, m
            if (n != 3 || m > 1e-5) { print "FAIL"; exit 1 } }'
