#!/bin/bash
# Issue 41: a RoundPipe-shaped machine (8 RTX 4090-class GPUs of 24 GB in one host, PCIe 4.0 x16,
# no NVLink) training Llama-3.1-8B (h 4096, 32 layers, 32 query / 8 key-value heads, ffn 14336,
# V 128256, untied) at s = 2048 and 128 sequences per step, mixed precision, recompute on:
# every strategy with its optimizer state on the device and in host memory (--optimizer-memory),
# one `weipipe simulate --strategy all --format json` each, joined into a markdown table.
# The device rate is the RTX 4090's dense FP16/BF16 tensor rate with FP32 accumulation, 165.2
# TFLOP/s (a peak: no MFU applied), its memory 1008 GByte/s; the host link and memory bandwidth
# are simulate's defaults (25 GByte/s per direction and 100 GByte/s, each shared by the 8 ranks).
#
# usage: scripts/compare_host_optim.sh [WEIPIPE]   (default build/weipipe; prints the table)
set -eu
cd "$(dirname "$0")/.."
W=${1:-build/weipipe}
[ -x "$W" ] || { echo "compare_host_optim: no weipipe binary at $W (build first, or pass its path)" >&2; exit 2; }
ARGS=(--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 14336
      --vocab-size 128256 --seq-length 2048 --micro-batch-size 1 --num-microbatches 128 --nranks 8
      --precision mixed --recompute true --ranks-per-node 8 --node-link-bandwidth 25GByte --device-tflops 165.2
      --device-mem-bandwidth 1008GByte --device-memory 24G --strategy all --format json)
echo "\`$W simulate ${ARGS[*]} --optimizer-memory device|host\`"
echo
echo "| strategy | device state: tokens/s | peak GB/GPU | 24 GB | host state: tokens/s | peak GB/GPU | 24 GB | host GB/GPU |"
echo "| --- | ---: | ---: | --- | ---: | ---: | --- | ---: |"
/usr/bin/python3 - <("$W" simulate "${ARGS[@]}" --optimizer-memory device) <("$W" simulate "${ARGS[@]}" --optimizer-memory host) <<'PY'
import json, sys
dev, host = ({r["strategy"]: r for r in json.load(open(f))["strategies"]} for f in sys.argv[1:3])
fit = lambda r: "fits" if r["fits"] else "does not fit"
for name in sorted(dev):
    d, h = dev[name], host[name]
    print("| %s | %.0f | %.1f | %s | %.0f | %.1f | %s | %.1f |" % (name, d["tokens_per_s"], d["peak_bytes_per_rank"] / 1e9,
          fit(d), h["tokens_per_s"], h["peak_bytes_per_rank"] / 1e9, fit(h), h["host_bytes_per_rank"] / 1e9))
PY
