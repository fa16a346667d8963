#!/bin/sh
# Dump the C model's loss and gradients with `weipipe check` and judge them by transformers'
# LlamaForCausalLM itself (tests/reference/dump_vs_hf.py).
#   check_vs_hf.sh WEIPIPE SOURCE_ROOT [weipipe check flags ...]
# Exit 0 pass, 77 skip (no Python with transformers), anything else fail. WP_HF_PYTHON names an
# interpreter that has transformers; default the venv scripts/setup.sh makes (WEIPIPE_HF_VENV,
# /opt/weipipe-hf), else /usr/bin/python3.
set -u
weipipe=$1 root=$2
shift 2
case $weipipe in /*) ;; *) weipipe=$PWD/$weipipe ;; esac
python=${WP_HF_PYTHON:-${WEIPIPE_HF_VENV:-/opt/weipipe-hf}/bin/python}
[ -x "$python" ] || python=/usr/bin/python3
if ! "$python" -c "import transformers" 2> /dev/null; then
    echo "skipped: no transformers for $python (set WP_HF_PYTHON)"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wp-hfref.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
(cd "$root" && "$weipipe" check --config configs/tiny.ini --precision fp32 --quiet --out "$tmp/dump" "$@") || {
    echo "FAIL: weipipe check exited $?"
    exit 1
}
"$python" "$root/tests/reference/dump_vs_hf.py" "$tmp/dump"
