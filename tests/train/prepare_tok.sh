#!/bin/bash
# Real tokenizers through prepare, train and checkpoints (src/io/tokenizer/tokenizer.h).
#   prepare_tok.sh spm WEIPIPE PYTHON   a SentencePiece BPE trained here by Debian's spm_train:
#       prepare --tokenizer writes shards whose documents start with BOS and decode (spm_decode,
#       independent of weipipe) to exactly the input's head / tail; the model is copied into the
#       data directory; train finds it there, refuses a tokenizer larger than the model, and
#       keeps it in each checkpoint, listed in the manifest with size and CRC-32 (checked with
#       Python's zlib); a damaged copy makes --resume exit 2 naming it; refusals leave nothing.
#   prepare_tok.sh hf WEIPIPE PYTHON HF_HELPER TOKENIZE_HF   scripts/tokenize_hf.py with a
#       tokenizer.json built by the `tokenizers` library (skipped, 77, without it): the same
#       checks, decoding with the library; weipipe prepare --tokenizer tokenizer.json writes the
#       same shards byte for byte, and sample --prompt the same ids as the library's.
# PYTHON: Debian's python3 (numpy-free checks) or, for hf, a python3 that has `tokenizers`.
set -u
mode=$1
weipipe=$2
py=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wp-preptok-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# Two documents of random words (fixed seed), several lines each, with accents and kana so that
# the validation split must move to a character boundary; no NUL bytes.
RANDOM=7
words=(the quick brown fox jumps over a lazy dog é über naïve 日本 の ka to ri sen 42 , . ! tha)
for f in a b; do
    for _ in $(seq 60); do
        line=""
        for _ in $(seq $((RANDOM % 12 + 1))); do line="$line${words[RANDOM % ${#words[@]}]} "; done
        printf '%s\n' "$line"
    done > "$tmp/$f.txt"
done

# check_shards DIR BOS VAL_FRACTION DECODER: every document of DIR's shards starts with BOS and
# decodes (DECODER reads ids on stdin, writes the text and a newline, as spm_decode) to its part
check_shards() {
    "$py" - "$1" "$2" "$3" "$4" "$tmp/a.txt" "$tmp/b.txt" <<'PY'
import struct, subprocess, sys
d, bos, frac, decoder, inputs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5:]
def tokens(path):
    raw = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    assert (magic, version) == (20240520, 1), f"{path}: header {magic} {version}"
    assert len(raw) == 1024 + 2 * n, f"{path}: size {len(raw)} for {n} tokens"
    return list(struct.unpack(f"<{n}H", raw[1024:]))
def docs(toks):
    assert toks and toks[0] == bos, f"first token {toks[:1]}, want BOS {bos}"
    out, cur = [], []
    for t in toks[1:]:
        if t == bos:
            out.append(cur); cur = []
        else:
            cur.append(t)
    return out + [cur]
def decode(ids):
    out = subprocess.run(decoder, shell=True, input=" ".join(map(str, ids)).encode(), stdout=subprocess.PIPE, check=True).stdout
    assert out.endswith(b"\n"), "the decoder ends its output with a newline"
    return out[:-1]
want_train, want_val = [], []
for p in inputs:
    data = open(p, "rb").read()
    cut = len(data) - round(frac * len(data))
    while cut < len(data) and (data[cut] & 0xC0) == 0x80:
        cut += 1
    want_train.append(data[:cut]); want_val.append(data[cut:])
bad = 0
for split, want in (("train", want_train), ("val", want_val)):
    got = docs(tokens(f"{d}/{split}_000.bin"))
    if len(got) != len(want):
        print(f"{split}: {len(got)} documents, want {len(want)}", file=sys.stderr); bad += 1; continue
    for k, (ids, text) in enumerate(zip(got, want)):
        dec = decode(ids)
        if dec != text:
            print(f"{split} document {k}: decodes to {dec[:60]!r}..., want {text[:60]!r}...", file=sys.stderr); bad += 1
print(f"check_shards {d}: {len(want_train)} + {len(want_val)} documents decode to their inputs" if not bad else "mismatch")
sys.exit(1 if bad else 0)
PY
}

# check_manifest CKPT NAME SOURCE: CKPT/NAME equals SOURCE and the manifest lists its size and CRC
check_manifest() {
    cmp -s "$1/$2" "$3" || { bad "$1/$2 is not a copy of $3"; return; }
    "$py" - "$1" "$2" <<'PY' || bad "manifest entry of $1/$2"
import json, os, sys, zlib
d, name = sys.argv[1], sys.argv[2]
t = json.load(open(f"{d}/manifest.json"))["tokenizer"]
data = open(f"{d}/{name}", "rb").read()
ok = t["name"] == name and t["size"] == len(data) and t["crc32"] == f"{zlib.crc32(data):08x}"
print(f"manifest tokenizer entry {t}: {'ok' if ok else 'WRONG'}")
sys.exit(0 if ok else 1)
PY
}

common_train="--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --steps 2 --quiet"

if [ "$mode" = spm ]; then
    spm_train --input="$tmp/a.txt" --model_prefix="$tmp/m" --vocab_size=300 --model_type=bpe --character_coverage=1.0 \
        --normalization_rule_name=identity --remove_extra_whitespaces=false --byte_fallback=true --num_threads=1 \
        >/dev/null 2>&1 || { echo "spm_train failed"; exit 1; }
    model=$tmp/m.model
    data=$tmp/data

    # refusals first: nothing may be written
    printf 'not a tokenizer\n' > "$tmp/bogus.model"
    "$weipipe" prepare "$tmp/a.txt" --out "$data" --tokenizer "$tmp/bogus.model" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "bogus.model" "$tmp/err" && [ "$(wc -l < "$tmp/err")" -eq 1 ] || bad "bogus tokenizer: exit $rc: $(cat "$tmp/err")"
    "$weipipe" prepare "$tmp/a.txt" --out "$data" --tokenizer "$model" --vocab-size 299 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--vocab-size" "$tmp/err" || bad "--vocab-size below the tokenizer's: exit $rc: $(cat "$tmp/err")"
    printf '{"model": {"type": "BPE", "vocab": {"a": 0}}, "decoder": {"type": "ByteLevel"}}' > "$tmp/tokenizer.json"
    "$weipipe" prepare "$tmp/a.txt" --out "$data" --tokenizer "$tmp/tokenizer.json" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "merges" "$tmp/err" || bad "tokenizer.json without merges in prepare: exit $rc: $(cat "$tmp/err")"
    [ ! -e "$data" ] || bad "a refused prepare left $(ls "$data")"

    # a byte-level run first, so that the tokenizer run must replace its shards
    "$weipipe" prepare "$tmp/a.txt" "$tmp/b.txt" --out "$data" --quiet || bad "byte prepare failed"
    "$weipipe" prepare "$tmp/a.txt" "$tmp/b.txt" --out "$data" --tokenizer "$model" --val-fraction 0.2 > "$tmp/out" \
        || bad "prepare --tokenizer failed"
    grep -q "vocabulary 300" "$tmp/out" || bad "prepare summary: $(cat "$tmp/out")"
    cmp -s "$data/tokenizer.model" "$model" || bad "tokenizer.model not copied into the data directory"
    ls "$data" | grep -q tmp && bad "temp files left: $(ls "$data")"
    check_shards "$data" 1 0.2 "spm_decode --model='$model' --input_format=id" || bad "shards do not decode to the inputs"

    # train: finds DIR/tokenizer.model, refuses a model vocabulary below it, keeps it in checkpoints
    # shellcheck disable=SC2086
    "$weipipe" train --data "$data" --vocab-size 256 $common_train 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] || bad "vocab 256 with a 300-token tokenizer: exit $rc: $(cat "$tmp/err")"
    "$weipipe" prepare "$tmp/a.txt" --out "$tmp/bytes" --quiet || bad "byte prepare failed"
    # shellcheck disable=SC2086
    "$weipipe" train --data "$tmp/bytes" --tokenizer "$model" --vocab-size 256 $common_train 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "exceeds the model's --vocab-size 256" "$tmp/err" || bad "tokenizer above the model: exit $rc: $(cat "$tmp/err")"
    # shellcheck disable=SC2086
    "$weipipe" train --data "$data" --vocab-size 300 --save "$tmp/ck" $common_train --sample-every 2 --sample-tokens 12 \
        --metrics "$tmp/m.jsonl" || bad "train with the data's tokenizer failed"
    # --sample-every: the tokenizer's text from its BOS, the same as `weipipe sample` greedy from
    # that BOS on the step's checkpoint
    bos=$(echo a | spm_encode --model="$model" --output_format=id --extra_options=bos | awk '{print $1}')
    want=$("$weipipe" sample "$tmp/ck/step-2" --prompt-tokens "$bos" --temperature 0 --max-new-tokens 12 --format text)
    got=$(/usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d.get("step") == 2 and "sample" in d: print(d["sample"], end="")' "$tmp/m.jsonl")
    [ -n "$got" ] && [ "$got" = "$want" ] || bad "--sample-every with a tokenizer: '$got', weipipe sample: '$want'"
    check_manifest "$tmp/ck/step-2" tokenizer.model "$model"
    # export: the tokenizer file goes along, and its BOS/EOS (as spm_encode reports them) name
    # the special ids in config.json and generation_config.json
    eos=$(echo a | spm_encode --model="$model" --output_format=id --extra_options=eos | awk '{print $NF}')
    "$weipipe" export "$tmp/ck/step-2" "$tmp/hf" --quiet || bad "export of a tokenizer run failed"
    cmp -s "$tmp/hf/tokenizer.model" "$model" || bad "export did not copy tokenizer.model"
    /usr/bin/python3 - "$tmp/hf" "$bos" "$eos" <<'PY' || bad "export's bos/eos are not the tokenizer's"
import json, sys
d, bos, eos = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for name in ("config.json", "generation_config.json"):
    j = json.load(open(f"{d}/{name}"))
    assert (j["bos_token_id"], j["eos_token_id"]) == (bos, eos), (name, j["bos_token_id"], j["eos_token_id"], bos, eos)
print(f"export: bos {bos}, eos {eos} in config.json and generation_config.json")
PY
    # shellcheck disable=SC2086
    "$weipipe" train --data "$tmp/bytes" --vocab-size 256 --save "$tmp/ckb" $common_train || bad "byte train failed"
    [ ! -e "$tmp/ckb/step-2/tokenizer.model" ] && [ ! -e "$tmp/ckb/step-2/tokenizer.json" ] || bad "a byte run's checkpoint has a tokenizer"
    grep -q '"tokenizer": {' "$tmp/ckb/step-2/manifest.json" && bad "a byte run's manifest lists a tokenizer" # (flags.tokenizer is "")
    # a damaged tokenizer in the checkpoint: --resume refuses naming it
    printf 'x' >> "$tmp/ck/step-2/tokenizer.model"
    # shellcheck disable=SC2086
    "$weipipe" train --data "$data" --vocab-size 300 --save "$tmp/ck" --resume auto $common_train --steps 3 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "tokenizer.model" "$tmp/err" || bad "damaged checkpoint tokenizer: exit $rc: $(cat "$tmp/err")"

    # bytes again into the same directory: the stale tokenizer goes with the stale shards
    "$weipipe" prepare "$tmp/a.txt" --out "$data" --quiet || bad "byte prepare over a tokenizer run failed"
    [ ! -e "$data/tokenizer.model" ] || bad "a byte prepare left the earlier run's tokenizer.model"
else
    helper=$4
    tokenize=$5
    # setup.sh's venv (scripts/hfenv.py) when the given Python lacks `tokenizers`
    venv_py=${WEIPIPE_HF_VENV:-/opt/weipipe-hf}/bin/python
    if ! "$py" -c "import tokenizers" 2>/dev/null && [ -x "$venv_py" ]; then py=$venv_py; fi
    "$py" "$helper" make "$tmp" >/dev/null
    rc=$?
    [ $rc -eq 77 ] && { echo "skipped: no tokenizers module for $py"; exit 77; }
    [ $rc -eq 0 ] || { echo "tokenizer.json helper failed ($rc)"; exit 1; }
    tj=$tmp/tokenizer.json
    vocab=$(cut -d' ' -f1 "$tmp/facts.txt")
    bos=$(cut -d' ' -f2 "$tmp/facts.txt")
    data=$tmp/data
    "$py" "$tokenize" "$tmp/a.txt" /nonexistent.txt --tokenizer "$tj" --out "$data" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q nonexistent "$tmp/err" && [ ! -e "$data" ] || bad "tokenize_hf missing input: exit $rc: $(cat "$tmp/err")"
    "$py" "$tokenize" "$tmp/a.txt" --tokenizer "$tmp/facts.txt" --out "$data" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q facts.txt "$tmp/err" || bad "tokenize_hf bogus tokenizer: exit $rc: $(cat "$tmp/err")"
    "$py" "$tokenize" "$tmp/a.txt" "$tmp/b.txt" --tokenizer "$tj" --out "$data" --val-fraction 0.2 --quiet || bad "tokenize_hf failed"
    cmp -s "$data/tokenizer.json" "$tj" || bad "tokenizer.json not copied into the data directory"
    check_shards "$data" "$bos" 0.2 "'$py' -c 'import sys; from tokenizers import Tokenizer; t = Tokenizer.from_file(\"$tj\"); sys.stdout.buffer.write(t.decode([int(x) for x in sys.stdin.read().split()], skip_special_tokens=False).encode() + b\"\\n\")'" \
        || bad "tokenize_hf shards do not decode to the inputs"
    # weipipe prepare encodes the tokenizer.json itself (src/io/tokenizer/tokjson.h): the same shards
    "$weipipe" prepare "$tmp/a.txt" "$tmp/b.txt" --tokenizer "$tj" --out "$tmp/cdata" --val-fraction 0.2 --quiet \
        || bad "weipipe prepare --tokenizer tokenizer.json failed"
    for f in train_000.bin val_000.bin; do
        cmp -s "$data/$f" "$tmp/cdata/$f" || bad "$f: weipipe prepare's shard differs from scripts/tokenize_hf.py's"
    done
    cmp -s "$tmp/cdata/tokenizer.json" "$tj" || bad "weipipe prepare did not copy tokenizer.json"
    # shellcheck disable=SC2086
    "$weipipe" train --data "$data" --vocab-size "$vocab" --save "$tmp/ck" $common_train || bad "train on tokenize_hf shards failed"
    check_manifest "$tmp/ck/step-2" tokenizer.json "$tj"
    # sample --prompt encodes in C: the same generation as the library's ids given as --prompt-tokens
    prompt="über the 日本 fox <|end_of_text|> hello world"
    ids=$("$py" -c 'import sys; from tokenizers import Tokenizer
t = Tokenizer.from_file(sys.argv[1]); print(",".join(map(str, t.encode(sys.argv[2], add_special_tokens=False).ids)))' "$tj" "$prompt")
    # (stderr too, so a warning must agree; the timing line differs from run to run)
    want=$("$weipipe" sample "$tmp/ck/step-2" --prompt-tokens "$bos,$ids" --temperature 0 --max-new-tokens 6 --format ids 2>&1 | grep -v "^sample: weights loaded")
    got=$("$weipipe" sample "$tmp/ck/step-2" --prompt "$prompt" --temperature 0 --max-new-tokens 6 --format ids 2>&1 | grep -v "^sample: weights loaded")
    [ -n "$got" ] && [ "$got" = "$want" ] || bad "sample --prompt with a tokenizer.json: '$got', with the library's ids: '$want'"
    [ $fail -eq 0 ] && echo "weipipe prepare: the shards of tokenize_hf.py; sample --prompt: as the library's ids ($got)"
fi
[ $fail -eq 0 ] && echo "prepare_tok $mode: all checks passed"
exit $fail
