#!/bin/bash
# A user's files beside the outputs are never touched (issue 42, item 1): every name that prepare,
# a checkpoint save, export to safetensors and export to GGUF might use for a temporary or an old
# copy (X.tmp, X.old, X.gguf.tmp, latest.tmp, tokenizer.json.tmp, train_000.bin.tmp, ...) holds a
# user's file or directory first; after the runs (each output written twice: new, then replaced)
# each is there byte for byte, the outputs are complete and no temporary of a successful run is
# left. Was: `export CK out` removed a user's out.tmp/ (thesis.tex in it) and exited 0, and
# `export --format gguf` truncated and removed a user's m.gguf.tmp.
source "$(dirname "$0")/faults_lib.sh"
cd "$TMP" || exit 1
awk 'BEGIN { for (i = 0; i < 60; i++) print "a line of text for a small token shard, number " i }' > doc.txt
# user PATH: a file of random bytes; user PATH/: a directory holding one
user() {
  case $1 in
    */) mkdir -p "$1" && head -c 3000 /dev/urandom > "$1/thesis.tex" ;;
    *) mkdir -p "$(dirname "$1")" && head -c 3000 /dev/urandom > "$1" ;;
  esac
}
for p in data/train_000.bin.tmp data/val_000.bin.tmp data/train_000.bin.old ck.tmp/ ck.old/ hf.tmp/ hf.old/ hf.tmp-1/ \
         m.gguf.tmp m.gguf.old; do user "$p"; done
"$W" prepare doc.txt --out data --val-fraction 0.2 --quiet || fail "prepare"
train --save ck --steps 2 --save-every 2 || fail "train"
# inside --save once it is the run's (a fresh run refuses a --save with step-* names in it)
for p in ck/latest.tmp ck/latest.old ck/step-2.old/ ck/tokenizer.json.tmp; do user "$p"; done
find . -path ./before.sha -prune -o -path ./doc.txt -prune -o -path ./ck/step-2 -prune -o -path ./ck/latest -prune -o -type f -print | grep -v '/train_000.bin$\|/val_000.bin$' |
  sort | xargs sha256sum > before.sha
"$W" prepare doc.txt --out data --val-fraction 0.2 --quiet || fail "prepare again"
train --save ck --resume auto --steps 4 --save-every 2 || fail "train resumed"
for i in 1 2; do
  "$W" export ck hf --quiet || fail "export $i"
  "$W" export ck m.gguf --format gguf --quiet || fail "export --format gguf $i"
done
sha256sum --quiet -c before.sha || fail "a user's file changed or went (above)"
[ -f hf/model.safetensors ] && [ -f hf/config.json ] && [ -s m.gguf ] && [ -f ck/step-4/manifest.json ] || fail "an output is missing"
left=$(find . \( -name '*.tmp-*' -o -name '*.old-*' \) ! -path ./hf.tmp-1 | sort)
[ -z "$left" ] || fail "temporaries left by successful runs: $left"
echo "userfiles: $(wc -l < before.sha) user files kept byte for byte through prepare twice, a run and its resumed run saving, two exports of each format"
