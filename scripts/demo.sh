#!/bin/sh
# The demo: prepare a real English corpus that Debian ships (the fortunes package), train the
# small config on one rank, then the same model as a 4-rank WeiPipe-Interleave ring over TCP,
# evaluate and export to Hugging Face safetensors. Outputs go to out/demo/.
set -eu
cd "$(dirname "$0")/.."
scripts/build.sh
wp=build/weipipe
out=out/demo
mkdir -p "$out"

corpus=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
echo "== prepare: $(echo "$corpus" | wc -l) fortunes files -> $out/data"
# shellcheck disable=SC2086
$wp prepare $corpus --out "$out/data" --val-fraction 0.05

echo "== train: configs/small.ini on one rank"
rm -rf "$out/ckpt" "$out/metrics.jsonl"
$wp train --config configs/small.ini --data "$out/data" --save "$out/ckpt" \
    --metrics "$out/metrics.jsonl" --eval-every 100

echo "== train: the same model as a 4-rank weipipe-interleave ring over TCP (20 steps)"
$wp train --config configs/small.ini --data "$out/data" --strategy weipipe-interleave \
    --nranks 4 --num-layers 8 --num-microbatches 4 --transport tcp --steps 20 --save "$out/ckpt-ring"

echo "== eval and export"
$wp eval "$out/ckpt" --data "$out/data" --seq-length 256 --batches 32
$wp export "$out/ckpt" "$out/hf"
ls -l "$out/hf"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
    /usr/bin/python3 scripts/plot_metrics.py "$out/metrics.jsonl" --output "$out/loss.png" && echo "loss curve: $out/loss.png"
fi
