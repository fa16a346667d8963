#!/bin/bash
# tokenizer.json refusals (issue 31, item 5): every id and count is checked before it sizes an
# allocation, and what the encoder does not support is refused by name, exit 2, one line.
#   tok_bounds.sh TOK_TOOL WEIPIPE
set -u
tool=$1
weipipe=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wp-tokbounds-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# tj NAME MODEL_EXTRA ROOT_EXTRA: a small byte-level BPE tokenizer.json (vocabulary a, b, ab)
tj() {
    printf '{"version": "1.0", %s "model": {"type": "BPE", %s "vocab": %s, "merges": ["a b"]}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}, "decoder": {"type": "ByteLevel"}}' \
        "$3" "$2" "${4:-{\"a\": 0, \"b\": 1, \"ab\": 2\}}" > "$tmp/$1.json"
}
# refused NAME WORDS...: tok_tool facts exits 2 with one line naming the file and each word
refused() {
    local name=$1
    shift
    "$tool" facts "$tmp/$name.json" > /dev/null 2> "$tmp/err"
    local rc=$?
    local ok=1
    [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "$name.json" "$tmp/err" || ok=0
    for w in "$@"; do grep -qF -- "$w" "$tmp/err" || ok=0; done
    [ $ok -eq 1 ] && echo "refused $name: $(cat "$tmp/err")" || bad "$name: exit $rc: $(cat "$tmp/err")"
}

tj ok "" ""
"$tool" facts "$tmp/ok.json" > "$tmp/out" || bad "the small tokenizer.json does not open: $(cat "$tmp/out")"
[ "$(cat "$tmp/out")" = "3 -1 -1" ] || bad "facts of the small tokenizer.json: $(cat "$tmp/out")"
# ids the size of the issue's: a vocabulary id or an added token id of 2147483646
tj huge_vocab_id "" "" '{"a": 0, "b": 1, "ab": 2147483646}'
refused huge_vocab_id 'model.vocab["ab"]' 2147483646
tj huge_added_id "" '"added_tokens": [{"id": 2147483646, "content": "<s>", "special": true}],'
refused huge_added_id 'added_tokens[0]' 2147483646 "tokenizers gives it 3"
tj dup_id "" "" '{"a": 0, "b": 1, "ab": 1}'
refused dup_id 'model.vocab' 'id 1'
tj gap "" "" '{"a": 0, "b": 1, "ab": 3}'
refused gap 'model.vocab["ab"]'
tj added_wrong_vocab_id "" '"added_tokens": [{"id": 2, "content": "a"}],'
refused added_wrong_vocab_id 'added_tokens[0]' "model.vocab id"
tj added_twice "" '"added_tokens": [{"id": 3, "content": "<s>"}, {"id": 4, "content": "<s>"}],'
refused added_twice 'added_tokens[1]' twice
tj bad_merge "" "" '{"a": 0, "b": 1, "x": 2}'
refused bad_merge 'model.merges[0]'
# what the encoder does not support, by field
tj dropout '"dropout": 0.1,' ""
refused dropout model.dropout
sed 's/"type": "BPE"/"type": "WordPiece"/' "$tmp/ok.json" > "$tmp/wordpiece.json"
refused wordpiece model.type WordPiece
sed 's/"pre_tokenizer": {"type": "ByteLevel"/"pre_tokenizer": {"type": "Whitespace"/' "$tmp/ok.json" > "$tmp/whitespace.json"
refused whitespace pre_tokenizer Whitespace
sed 's/"version": "1.0",/"version": "1.0", "normalizer": {"type": "Lowercase"},/' "$tmp/ok.json" > "$tmp/lowercase.json"
refused lowercase normalizer Lowercase
sed 's/"decoder": {"type": "ByteLevel"}/"decoder": {"type": "WordPiece"}/' "$tmp/ok.json" > "$tmp/wpdec.json"
refused wpdec decoder WordPiece
sed 's/"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}/"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}/' \
    "$tmp/ok.json" > "$tmp/badregex.json"
refused badregex "pre_tokenizer Split" regex
# issue 42: an empty vocabulary with an unk_token (was a segfault)
tj empty_unk '"unk_token": "<unk>",' "" '{}'
refused empty_unk model.vocab '0 entries'
# encode_refused NAME TEXTFILE WORDS...: tok_tool encode exits 2, one line naming the file and each word
encode_refused() {
    local name=$1 text=$2
    shift 2
    "$tool" encode "$tmp/$name.json" "$text" > /dev/null 2> "$tmp/err"
    local rc=$?
    local ok=1
    [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "$name.json" "$tmp/err" || ok=0
    for w in "$@"; do grep -qF -- "$w" "$tmp/err" || ok=0; done
    [ $ok -eq 1 ] && echo "refused $name: $(cat "$tmp/err")" || bad "$name: exit $rc: $(cat "$tmp/err")"
}
# a Split regex that backtracks past PCRE2's match limit on 41 bytes (was "out of memory encoding 41 bytes")
sed 's/"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}/"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated"}/' \
    "$tmp/ok.json" > "$tmp/redos.json"
printf 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!' > "$tmp/redos.txt"
encode_refused redos "$tmp/redos.txt" "pre_tokenizer Split" '(a+)+$' "match limit"
# a Replace normalizer writing 1000 bytes for each "a": 100 kB would become 100 MB (was: 1 MB into 3.2 GB)
sed 's/"version": "1.0",/"version": "1.0", "normalizer": {"type": "Replace", "pattern": {"String": "a"}, "content": "'"$(printf 'a%.0s' $(seq 1000))"'"},/' \
    "$tmp/ok.json" > "$tmp/bomb.json"
head -c 100000 /dev/zero | tr '\0' a > "$tmp/bomb.txt"
encode_refused bomb "$tmp/bomb.txt" "normalizer Replace" "100000-byte piece"
# and a Replace that grows text as real ones do (3 bytes for one) still encodes
sed 's/"version": "1.0",/"version": "1.0", "normalizer": {"type": "Replace", "pattern": {"String": "a"}, "content": "\\u2581"},/' \
    "$tmp/ok.json" > "$tmp/grow3.json"
"$tool" encode "$tmp/grow3.json" "$tmp/bomb.txt" > /dev/null 2> "$tmp/err" || bad "a 3x Replace normalizer: $(cat "$tmp/err")"

# weipipe: a byte-vocabulary model and a tokenizer above it, or with the huge id: exit 2 naming both
printf 'the quick brown fox jumps over the lazy dog\n%.0s' $(seq 40) > "$tmp/text.txt"
"$weipipe" prepare "$tmp/text.txt" --out "$tmp/data" --quiet || bad "byte prepare failed"
"$weipipe" train --data "$tmp/data" --vocab-size 256 --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
    --seq-length 8 --steps 1 --save "$tmp/ck" --quiet || bad "tiny train failed"
"$weipipe" sample "$tmp/ck" --tokenizer "$tmp/huge_vocab_id.json" --prompt hi 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -qF 'model.vocab["ab"]' "$tmp/err" || bad "sample with the issue's tokenizer: exit $rc: $(cat "$tmp/err")"
python3 -c 'import json, sys
v = {chr(0x100 + i): i for i in range(300)}
json.dump({"model": {"type": "BPE", "vocab": v, "merges": []}, "decoder": {"type": "ByteLevel"}}, open(sys.argv[1], "w"))' \
    "$tmp/v300.json"
"$weipipe" sample "$tmp/ck" --tokenizer "$tmp/v300.json" --prompt hi 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "v300.json" "$tmp/err" && grep -q "$tmp/ck" "$tmp/err" && grep -q "300" "$tmp/err" && grep -q "256" "$tmp/err" \
    || bad "sample with a tokenizer above the model's vocabulary: exit $rc: $(cat "$tmp/err")"
[ $fail -eq 0 ] && echo "tok_bounds: all checks passed"
exit $fail
