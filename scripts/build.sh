#!/bin/sh
# Configure (once) and build into ./build (or $WEIPIPE_BUILD). Extra arguments go to meson setup.
set -eu
cd "$(dirname "$0")/.."
build=${WEIPIPE_BUILD:-build}
# meson before 1.4 asks nvcc for no header dependencies of .cu files (scripts/nvcc-deps.sh)
native=""
if [ ! -f "$build/build.ninja" ] && [ "$(printf '1.4\n%s\n' "$(meson --version)" | sort -V | head -n 1)" != 1.4 ]; then
    mkdir -p "$build"
    printf "[binaries]\ncuda = '%s'\n" "$(pwd)/scripts/nvcc-deps.sh" >"$build/nvcc-deps.ini"
    native="--native-file $build/nvcc-deps.ini"
fi
# Quiet when all is well; a failing step's output (the compiler's errors) is shown, not swallowed.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ ! -f "$build/build.ninja" ]; then
    # shellcheck disable=SC2086
    meson setup "$build" $native -Dwerror=true "$@" >"$log" 2>&1 || { cat "$log"; echo "build: meson setup failed" >&2; exit 1; }
fi
ninja -C "$build" >"$log" 2>&1 || { grep -v '^\[[0-9]*/[0-9]*\] ' "$log" | tail -n 60; echo "build: failed (above: the failing steps)" >&2; exit 1; }
