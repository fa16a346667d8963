#!/bin/sh
# The Hugging Face round trip from the command line, with a Llama 3.x-style config: an export
# turned into a tied model with rope_scaling llama3, max_position_embeddings 1234, bos 1 and
# eos [2, 3] is imported (--init-from), trained on one rank, resumed (the manifest keeps scaling
# and tie: a resume takes them, one that contradicts them is refused; bos/eos and max positions are kept), exported
# again (tie_word_embeddings true and no lm_head.weight, as save_pretrained writes a tied model;
# rope_scaling, max_position_embeddings, bos 1 and eos 2 in config.json and
# generation_config.json) and its loss checked by scripts/hf_check.py against weipipe eval.
# The trained head must still be the embedding, bit for bit; so after the tied import trains on
# 2 ranks (weipipe-interleave, the head on another rank than the embedding), where every tensor
# also equals the one-rank run's within 1e-5. Refusals: another model_type, another rope_scaling
# type, an index naming a missing shard.
# usage: hf_roundtrip.sh WEIPIPE TRAIN_SHARD VAL_SHARD [PYTHON HF_CHECK_PY]
set -u
weipipe=$1 data=$2 val=$3 python=${4:-} hf_check=${5:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wp-hfrt-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
model="--num-layers 2 --hidden-size 32 --num-attention-heads 2 --num-query-groups 1 --seq-length 32 --vocab-size 256"
tr1() { "$weipipe" train --data "$data" --quiet --precision fp32 "$@"; }

tr1 $model --steps 1 --save "$tmp/ck0" || bad "first train"
"$weipipe" export "$tmp/ck0" "$tmp/hf0" --quiet || bad "first export"
# the export turned into a tied Llama 3.x-style model (head dim 16: with original 64 the pairs
# fall in all three llama3 bands)
sed -e 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' \
    -e 's/"bos_token_id": 0/"bos_token_id": 1/' -e 's/"eos_token_id": 0/"eos_token_id": [2, 3]/' \
    -e 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 1234/' \
    -e 's/"rope_scaling": null/"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}/' \
    "$tmp/hf0/config.json" > "$tmp/config.json" && mv "$tmp/config.json" "$tmp/hf0/config.json"
grep -q '"rope_type": "llama3"' "$tmp/hf0/config.json" && grep -q '"tie_word_embeddings": true' "$tmp/hf0/config.json" ||
    bad "could not write the llama3 tied config"

tr1 --init-from "$tmp/hf0" --steps 3 --save "$tmp/ck" || bad "--init-from the tied llama3 model"
grep -q '"tie-word-embeddings": true' "$tmp/ck/step-3/manifest.json" || bad "manifest lacks the tie"
grep -q '"rope-scaling"' "$tmp/ck/step-3/manifest.json" || bad "manifest lacks the rope scaling"
# the manifest gives the scaling and tie to a resume that leaves them out; one that contradicts
# them is refused naming every flag
tr1 $model --resume "$tmp/ck" --steps 4 --save "$tmp/ck" --rope-scaling-factor 4 --tie-word-embeddings false 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--rope-scaling-factor" "$tmp/err" && grep -q -- "--tie-word-embeddings" "$tmp/err" ||
    bad "a resume contradicting the scaling and tie: exit $rc, $(cat "$tmp/err")"
# bos/eos and max positions, which only an export reads, are kept from the checkpoint
tr1 $model --resume "$tmp/ck" --steps 4 --save "$tmp/ck" --tie-word-embeddings --rope-scaling-factor 8 \
    --rope-original-max-positions 64 || bad "resume with the same model"

"$weipipe" export "$tmp/ck" "$tmp/hf1" --quiet || bad "export of the tied model"
for want in '"tie_word_embeddings": true' '"max_position_embeddings": 1234' '"rope_type": "llama3"' \
            '"original_max_position_embeddings": 64' '"bos_token_id": 1' '"eos_token_id": 2'; do
    grep -q "$want" "$tmp/hf1/config.json" || bad "config.json lacks $want"
done
grep -q '"bos_token_id": 1' "$tmp/hf1/generation_config.json" && grep -q '"eos_token_id": 2' "$tmp/hf1/generation_config.json" ||
    bad "generation_config.json: $(cat "$tmp/hf1/generation_config.json")"
[ -f "$tmp/hf1/generation_config.json" ] || bad "no generation_config.json"
head -c 4096 "$tmp/hf1/model.safetensors" | grep -q lm_head && bad "a tied export holds lm_head.weight"
head -c 4096 "$tmp/hf1/model.safetensors" | grep -q embed_tokens || bad "the export holds no embedding"

if [ -n "$python" ] && "$python" -c "import numpy" 2> /dev/null; then
    "$python" - "$tmp/ck/step-4" << 'EOF' || bad "the trained head is not the embedding"
import glob, json, sys
import numpy as np
for path in glob.glob(sys.argv[1] + "/rank-*.safetensors"):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    def t(name):
        b, e = head[name]["data_offsets"]
        return raw[8 + n + b:8 + n + e]
    same = t("lm_head.weight") == t("model.embed_tokens.weight")
    print(f"trained 4 steps: lm_head.weight {'==' if same else '!='} model.embed_tokens.weight")
    sys.exit(0 if same else 1)
EOF
fi
if [ -n "$hf_check" ]; then
    "$python" "$hf_check" "$tmp/hf1" --data "$val" --seq-length 32 --batches 4 --ckpt "$tmp/ck" --weipipe "$weipipe" \
        --tolerance 1e-4
    rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 77 ] || bad "hf_check on the tied llama3 export exited $rc"
fi

expect2() { # expect2 CULPRIT ARGS...: exit 2 naming CULPRIT
    culprit=$1
    shift
    tr1 --steps 1 "$@" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$culprit" "$tmp/err" || bad "$*: exit $rc, '$(cat "$tmp/err")' (want 2 naming $culprit)"
}
# tied on 2 ranks (2 layers: 2 chunks at most): the head stays the embedding and the run lands
# on the one-rank weights
tr1 --init-from "$tmp/hf1" --steps 2 --num-microbatches 2 --save "$tmp/r1" || bad "tied import on one rank"
tr1 --init-from "$tmp/hf1" --steps 2 --num-microbatches 2 --nranks 2 --transport local --strategy weipipe-interleave \
    --save "$tmp/r3" || bad "tied import on 2 ranks"
if [ -n "$python" ] && "$python" -c "import numpy" 2> /dev/null; then
    "$python" - "$tmp/r3/step-2" "$tmp/r1/step-2" << 'EOF' || bad "tied on 2 ranks"
import glob, json, sys
import numpy as np
def tensors(d):
    out = {}
    for path in glob.glob(d + "/rank-*.safetensors"):
        raw = open(path, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        for name, v in json.loads(raw[8:8 + n]).items():
            if name != "__metadata__":
                b, e = v["data_offsets"]
                out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.float32)
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
same = a["lm_head.weight"].tobytes() == a["model.embed_tokens.weight"].tobytes()
worst = max(np.linalg.norm(a[k] - b[k]) / np.linalg.norm(b[k]) for k in b)
print(f"2 ranks, 2 steps: lm_head.weight {'==' if same else '!='} model.embed_tokens.weight; "
      f"max relative difference to one rank {worst:.2e} over {len(b)} tensors")
sys.exit(0 if same and worst <= 1e-5 and a.keys() == b.keys() else 1)
EOF
fi
cp -r "$tmp/hf1" "$tmp/other"
sed 's/"model_type": "llama"/"model_type": "mistral"/' "$tmp/hf1/config.json" > "$tmp/other/config.json"
expect2 "config.json: model_type 'mistral'" --init-from "$tmp/other"
sed 's/"rope_type": "llama3"/"rope_type": "yarn"/' "$tmp/hf1/config.json" > "$tmp/other/config.json"
expect2 "rope_scaling.rope_type 'yarn'" --init-from "$tmp/other"
"$weipipe" export "$tmp/ck" "$tmp/sharded" --max-shard-size 20KB --quiet || bad "sharded export"
[ -f "$tmp/sharded/model.safetensors.index.json" ] || bad "20KB shards: no index"
rm -f "$tmp/sharded/model-00002-of-"*.safetensors
expect2 "model.safetensors.index.json: weight_map names model-00002-of-" --init-from "$tmp/sharded"
[ $fail -eq 0 ] && echo "hf round trip: ok"
exit $fail
