#!/bin/bash
# eval and sample check what they are asked against the data and the machine before they
# allocate, and sample never loses what it generated (issue 42):
#  - eval --seq-length 600000 on 11.5k validation tokens: exit 2 naming --seq-length and the
#    data, under a 2 GiB address-space cap (it filled 4.6 GB, then failed a 9.3 GB allocation);
#  - eval and sample under the start-up memory check train has (WEIPIPE_TEST_MEMORY_LIMIT stands
#    in for the cgroup or MemAvailable): a request that does not fit is one line naming the flag
#    that asked for it; one that fits runs;
#  - sample with a model vocabulary padded beyond its tokenizer's (320 rows, a 300-id
#    sentencepiece model): the padded ids are never sampled, the text is printed, exit 0 (it
#    generated everything, then exited 2 on the first padded id, printing nothing);
#  - sample --prompt of 5000 characters (refused over 255 before).
source "$(dirname "$0")/faults_lib.sh"
VAL=$(dirname "$DATA")/tiny_val.bin
# one_line OUT ERR RC WANT-RC PATTERN: exit WANT-RC, nothing on stdout, one stderr line matching
one_line() {
  [ "$3" = "$4" ] && [ ! -s "$1" ] && [ "$(wc -l < "$2")" = 1 ] && grep -q -- "$5" "$2" ||
    { cat "$1" "$2"; fail "exit $3 (want $4), or not one line matching '$5'"; }
}
# capped CMD...: CMD under a 2 GiB address-space cap, so that allocating before checking fails
# here instead of filling the machine; not under a sanitizer, whose shadow memory alone reserves
# terabytes of address space (ASan aborts at start under the cap)
capped() {
  if ldd "$W" 2>/dev/null | grep -q 'libasan\|libtsan'; then "$@"; else (ulimit -v 2000000; "$@"); fi
}
"$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --steps 1 --nranks 1 --save "$TMP/ck" || fail "train"

# 1. the data holds fewer tokens than one sequence
capped "$W" eval "$TMP/ck" --data "$VAL" --seq-length 600000 --threads 1 > "$TMP/o" 2> "$TMP/e"
one_line "$TMP/o" "$TMP/e" $? 2 "error: --seq-length 600000: one sequence takes 600001 tokens, .*tiny_val.bin holds 11523$"
echo "eval --seq-length 600000: $(cat "$TMP/e")"
# without --seq-length the model's positions are taken (a GGUF's 8192 took 10.8 GB before the
# count of sequences was checked): the message says where the length came from
"$W" eval "$TMP/ck" --data "$VAL" --batches 1000 --threads 1 > "$TMP/o" 2> "$TMP/e"
one_line "$TMP/o" "$TMP/e" $? 2 "error: --batches: 1000 sequences of 32 tokens (the model's 32 positions (no --seq-length given)) asked, .*tiny_val.bin holds 360$"
echo "eval --batches 1000: $(cat "$TMP/e")"

# 2. the memory check: 143 MiB for the process (the prediction plus 10% and 64 MiB must fit)
export WEIPIPE_TEST_MEMORY_LIMIT=150000000
"$W" eval "$TMP/ck" --data "$VAL" --batches 1 --threads 1 > "$TMP/o" 2> "$TMP/e" || { cat "$TMP/e"; fail "eval at --seq-length 32 was refused"; }
capped "$W" eval "$TMP/ck" --data "$VAL" --seq-length 8192 --batches 1 --threads 1 > "$TMP/o" 2> "$TMP/e"
one_line "$TMP/o" "$TMP/e" $? 2 "error: --seq-length 8192: eval needs about .* MiB (activations and scratch .*more than WEIPIPE_TEST_MEMORY_LIMIT (143.1 MiB)"
echo "eval --seq-length 8192 in 143 MiB: $(cat "$TMP/e")"
capped "$W" sample "$TMP/ck" --seq-length 10000000 --max-new-tokens 5000000 --prompt-tokens 1 --format ids > "$TMP/o" 2> "$TMP/e"
one_line "$TMP/o" "$TMP/e" $? 2 "error: --max-new-tokens 5000000 after a 1-token prompt: sample needs about .*KV cache of 5000000 positions .*more than WEIPIPE_TEST_MEMORY_LIMIT"
echo "sample --max-new-tokens 5000000 in 143 MiB: $(cat "$TMP/e")"
"$W" sample "$TMP/ck" --max-new-tokens 4 --prompt-tokens 1 --format ids > "$TMP/o" 2> "$TMP/e" && [ -s "$TMP/o" ] ||
  { cat "$TMP/e"; fail "sample of 4 tokens was refused"; }
unset WEIPIPE_TEST_MEMORY_LIMIT

# 3. a 5000-character prompt (bytes: 5000 tokens, so 5100 positions)
prompt=$(head -c 20000 "$(dirname "$0")/../../README.md" | tr -cd 'a-zA-Z ' | head -c 5000)
[ ${#prompt} = 5000 ] || fail "could not make a 5000-character prompt"
"$W" sample "$TMP/ck" --seq-length 5100 --prompt "$prompt" --max-new-tokens 4 --temperature 0 > "$TMP/o" 2> "$TMP/e" ||
  { cat "$TMP/e"; fail "sample --prompt of 5000 characters"; }
echo "sample --prompt of 5000 characters: exit 0, $(wc -c < "$TMP/o") bytes generated"

# 4. a vocabulary padded beyond the tokenizer's
command -v spm_train > /dev/null || { echo "SKIP: spm_train (sentencepiece) not installed"; exit 77; }
spm_train --input="$(dirname "$0")/../../README.md" --model_prefix="$TMP/spm" --vocab_size=300 --model_type=bpe > /dev/null 2>&1 ||
  fail "spm_train"
"$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --steps 1 --nranks 1 --vocab-size 320 --init-std 0.3 \
  --precision fp32 --save "$TMP/ck320" || fail "train (vocabulary 320)"
# temperature 100: nearly uniform, so the draws over 320 ids would hit the 20 padded ones long
# before the EOS (id 2) ends a sample; five seeds, so that one EOS drawn early (the ids depend on
# the trained weights' last bits) cannot leave too few draws to tell
: > "$TMP/o"
for seed in 3 4 5 6 7; do
  S=("$W" sample "$TMP/ck320" --tokenizer "$TMP/spm.model" --prompt "Weights, not" --seq-length 200 --max-new-tokens 150
     --temperature 100 --seed $seed)
  "${S[@]}" --format ids >> "$TMP/o" 2> "$TMP/e" || { cat "$TMP/e"; fail "sample --format ids (vocabulary 320, tokenizer 300)"; }
  echo >> "$TMP/o"
done
n=$(tr ',' '\n' < "$TMP/o" | grep -c .)
[ "$n" -ge 100 ] && [ "$(tr ',' '\n' < "$TMP/o" | awk '$1 >= 300' | wc -l)" = 0 ] ||
  { cat "$TMP/o" "$TMP/e"; fail "padded ids sampled, or fewer than 100 ids in five samples"; }
grep -q "warning: sample: the model's vocabulary of 320 is padded beyond the tokenizer's 300 ids: ids 300..319 are never sampled" "$TMP/e" ||
  { cat "$TMP/e"; fail "no warning about the padded ids"; }
"${S[@]}" > "$TMP/o" 2> "$TMP/e" && [ -s "$TMP/o" ] || { cat "$TMP/o" "$TMP/e"; fail "sample --format text (vocabulary 320, tokenizer 300)"; }
echo "vocabulary 320, tokenizer 300: $n ids sampled, all below 300; the text printed ($(wc -c < "$TMP/o") bytes)"
