#!/bin/sh
# The binary itself: bad usage exits 2 with exactly one line on stderr and nothing on stdout.
wp="$1"
fails=0
expect2() {
    out=$("$wp" "$@" 2>/tmp/wp_exit_err.$$)
    rc=$?
    lines=$(wc -l </tmp/wp_exit_err.$$)
    if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || [ -n "$out" ]; then
        echo "FAIL: weipipe $*: exit $rc, $lines stderr lines, stdout '$out'"
        cat /tmp/wp_exit_err.$$
        fails=$((fails + 1))
    fi
}
expect2
expect2 nosuchcommand
expect2 train --bogus
expect2 train --hidden-size abc
expect2 check --precision fp8
expect2 simulate --link-bandwidth 10
expect2 train --config /nonexistent.ini
# the one line names what was probably meant: a typo, another trainer's name, Hugging Face's
# underscores; config files: the right key and line; per-subcommand --format choices
expect_msg() {
    want=$1; shift
    expect2 "$@"
    grep -qF -- "$want" /tmp/wp_exit_err.$$ || { echo "FAIL: weipipe $*: '$(cat /tmp/wp_exit_err.$$)' lacks '$want'"; fails=$((fails + 1)); }
}
expect_msg "did you mean --num-layers?" train --num-layer 3
expect_msg "did you mean --steps?" train --max-steps 3
expect_msg "did you mean --lr?" train --learning_rate 3e-4
expect_msg "did you mean --num-layers? (weipipe spells flags with hyphens" train --num_layers 3
expect_msg "did you mean --ffn-hidden-size?" train --intermediate_size 3
expect_msg "unknown flag '--zzzz-qqq' for 'train'" train --zzzz-qqq 1
expect_msg "does not apply to 'sample'" sample --recompute
expect_msg "'csv' is not one of {text|ids} for sample" sample --format csv x
expect_msg "'ids' is not one of {text|json} for check" check --format ids
# document positions and lengths only mean something with document masks
expect_msg "--doc-positions restart: needs --doc-mask" simulate --device-tflops 100 --doc-positions restart
expect_msg "--doc-positions restart: needs --doc-mask" eval --doc-positions restart --data x model.gguf
expect_msg "--doc-length-mean: needs --doc-mask" simulate --device-tflops 100 --doc-length-mean 512
expect_msg "'sideways' is not one of {continue|restart}" train --doc-mask --doc-positions sideways
ini=/tmp/wp_exit_ini.$$
printf 'num-layers = 2\nnum-layer = 3\nbogus = 1\n' >"$ini"
expect_msg "$ini line 2: unknown key 'num-layer': did you mean --num-layers?" train --config "$ini"
printf 'num-layers = 2\nnot a pair\nbogus = 1\n' >"$ini"
expect_msg "$ini line 2: not 'key = value'" train --config "$ini"
printf '[model]\nnum-layers = 2\n[modle]\nhidden-size = 32\n' >"$ini"
expect_msg "$ini line 4: unknown section [modle]" train --config "$ini"
printf 'num-layers = 2\nnum-layers = 3\n' >"$ini"
expect_msg "$ini line 2: key 'num-layers' is set again (first on line 1" train --config "$ini"
printf 'data = %0300d\n' 0 >"$ini"
expect_msg "$ini line 1: longer than 198 characters, the most a config line holds" train --config "$ini"
rm -f "$ini"
# issue 42: every numeric flag has a range, named when a value is outside it or too small
expect_msg "--peak-tflops: -1 is out of range: the range is [1e-06, 1000000] TFLOP/s (or 0)" train --peak-tflops -1
expect_msg "--temperature: 1e-308 is too small: the range is [1e-06, 1000000] (or 0)" sample x --temperature 1e-308
"$wp" sample --help | grep -q -- --recompute && { echo "FAIL: sample --help lists --recompute"; fails=$((fails + 1)); }
"$wp" sample --help | grep -q -- "--format  *{text|ids}" || { echo "FAIL: sample --help: --format's choices"; fails=$((fails + 1)); }
"$wp" --help | grep -q "^  other:" && { echo "FAIL: a flag without a --help group"; fails=$((fails + 1)); }
"$wp" --help >/dev/null || { echo "FAIL: --help"; fails=$((fails + 1)); }
"$wp" train --help | grep -q -- --num-layers || { echo "FAIL: train --help lacks --num-layers"; fails=$((fails + 1)); }
rm -f /tmp/wp_exit_err.$$
[ "$fails" -eq 0 ]
