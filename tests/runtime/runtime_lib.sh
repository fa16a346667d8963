# Shared by the runtime tests: arguments WEIPIPE CKPT_DIFF CONFIG DATA; a scratch directory
# removed on exit; `train ARGS` runs weipipe train quietly on the tiny config, one thread per rank.
set -u
W=$1 DIFF=$2 CFG=$3 DATA=$4
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
train() { "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --timeout 60s "$@"; }
# The losses of a metrics file, one per line, as written (%.17g).
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
fail() { echo "FAIL: $*"; exit 1; }
