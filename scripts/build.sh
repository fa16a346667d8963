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
if [ ! -f "$build/build.ninja" ]; then
    # shellcheck disable=SC2086
    meson setup "$build" $native -Dwerror=true "$@" >/dev/null
fi
ninja -C "$build" >/dev/null
