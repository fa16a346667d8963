#!/bin/bash
# Document masks' saving on the CPU (docs/performance-cpu.md, "Document masks"): one training
# step at s = 8192 of a byte-level model (V = 256, 4 layers, h = 64, 4 heads, 1 rank, 1 thread),
# unmasked and with --doc-mask, on Debian's fortunes packed two ways:
#   each:  every fortune a document (split at the '%' lines; 168 bytes on average), the shard
#          written here in llm.c's version 1 layout with byte 0 before each document, as
#          weipipe prepare writes them;
#   files: weipipe prepare's own packing of the same files (a file a document: median ~10K bytes).
# Runs alternate, ROUNDS times (default 2); prints each run's per-step compute seconds (steps
# 2..3; step 1 warms up) and the best of each configuration.
#   scripts/bench_doc_mask.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
wp=${1:-build}/weipipe
rounds=${ROUNDS:-2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wp-docmask.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
corpus=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
[ -n "$corpus" ] || { echo "bench_doc_mask: no /usr/share/games/fortunes (Debian's fortunes packages)" >&2; exit 1; }
# shellcheck disable=SC2086
"$wp" prepare $corpus --out "$tmp/files" --val-fraction 0.05 --quiet
mkdir -p "$tmp/each"
# shellcheck disable=SC2086
/usr/bin/python3 - "$tmp/each/train_000.bin" $corpus <<'PY'
import sys, numpy as np
ids = []
for path in sys.argv[2:]:
    text = open(path, "rb").read()
    for doc in text.split(b"\n%\n"):
        doc = doc.strip(b"%\n")
        if doc.strip():
            ids.append(0)
            ids.extend(doc + b"\n")
a = np.array(ids, dtype=np.uint16)
head = np.zeros(256, dtype=np.int32)
head[:3] = (20240520, 1, a.size)
with open(sys.argv[1], "wb") as f:
    f.write(head.tobytes())
    f.write(a.tobytes())
lens = np.diff(np.append(np.flatnonzero(a == 0), a.size))
print(f"each: {lens.size} documents, mean {lens.mean():.0f} tokens, median {np.median(lens):.0f}")
PY
run() { # name shard [flags]
    local name=$1 data=$2
    shift 2
    rm -f "$tmp/$name.jsonl" # --metrics appends
    "$wp" train --data "$data" --seq-length 8192 --micro-batch-size 1 --num-layers 4 --hidden-size 64 \
        --num-attention-heads 4 --vocab-size 256 --steps 3 --threads 1 --nranks 1 --strategy 1f1b --quiet \
        --metrics "$tmp/$name.jsonl" "$@"
    sed -n 's/.*"step": \([23]\),.*"compute_s": \([^,]*\),.*/\2/p' "$tmp/$name.jsonl" >> "$tmp/$name.all"
    echo "$name: $(tr '\n' ' ' < "$tmp/$name.all")"
}
for _ in $(seq "$rounds"); do
    run plain "$tmp/each/train_000.bin"
    run each "$tmp/each/train_000.bin" --doc-mask
    run files "$tmp/files/train_000.bin" --doc-mask
done
for name in plain each files; do echo "best $name: $(sort -g "$tmp/$name.all" | head -n 1) s per step"; done
