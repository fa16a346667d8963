#!/bin/sh
# Configure (once) and build into ./build (or $WEIPIPE_BUILD). Extra arguments go to meson setup.
set -eu
cd "$(dirname "$0")/.."
build=${WEIPIPE_BUILD:-build}
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dwerror=true "$@" >/dev/null
fi
ninja -C "$build" >/dev/null
