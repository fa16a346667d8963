#!/bin/sh
# Build, here, the CUDA configuration of weipipe (the GPU tests and benchmark included) and pack
# it into one relocatable bundle that runs on a bare CUDA machine without building: no Debian
# -dev packages, no internet (scripts/gpu_kit.py says what it carries and why).
#
#   scripts/gpu-kit.sh [OUT]        (default build-kit/weipipe-gpu-kit.tar.xz)
#   scripts/gpu-check.sh --kit OUT --deadline SECONDS --logs DIR      (on the GPU machine)
#
# Needs the CUDA toolkit (nvcc, cuBLAS, NCCL; cuDNN) and patchelf. Environment: WP_KIT_BUILD
# (the build folder, default build-kit/build), WP_GPU_ARCH (default 80;90), WP_KIT_NO_BUILD=1
# (pack WP_KIT_BUILD as it is: the gpu/kit test packs the build it runs in), WP_KIT_FAST=1
# (light compression), WP_KIT_ALLOW_DIRTY=1 (pack a tree with uncommitted changes). MPI and libibverbs
# are left out of the kit's build: one machine needs neither, and they would add Open MPI's
# plugin tree and rdma-core's providers, which do not relocate.
set -eu
out=${1:-}
case $out in /* | "") ;; *) out=$(pwd)/$out ;; esac # as given, from where it was given
cd "$(dirname "$0")/.."
out=${out:-build-kit/weipipe-gpu-kit.tar.xz}
build=${WP_KIT_BUILD:-build-kit/build}
arch=${WP_GPU_ARCH:-80;90}
command -v nvcc >/dev/null || PATH=$PATH:/usr/local/cuda/bin
command -v nvcc >/dev/null || { echo "gpu-kit: nvcc not found (install the CUDA toolkit)" >&2; exit 1; }
command -v patchelf >/dev/null || { echo "gpu-kit: patchelf not found (apt-get install patchelf)" >&2; exit 1; }
nccl_dir=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/libnccl.so" ] && { nccl_dir=$d; break; }
done
[ -n "$nccl_dir" ] || { echo "gpu-kit: libnccl.so not found in the CUDA toolkit or /usr/lib" >&2; exit 1; }
# A kit names the commit it was built from; figures from a tree with uncommitted changes cannot be
# traced to any commit, so such a tree is refused unless WP_KIT_ALLOW_DIRTY=1 (the manifest's
# commit then reads COMMIT-dirty).
if [ -z "${WP_KIT_ALLOW_DIRTY:-}" ] && git rev-parse --git-dir >/dev/null 2>&1 &&
   [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    echo "gpu-kit: the tree has uncommitted changes (git status): commit them, or set WP_KIT_ALLOW_DIRTY=1" >&2
    exit 1
fi
fast=""
[ -z "${WP_KIT_FAST:-}" ] || fast=--fast
if [ -n "${WP_KIT_NO_BUILD:-}" ]; then
    [ -f "$build/build.ninja" ] || { echo "gpu-kit: WP_KIT_NO_BUILD: $build is not a configured build" >&2; exit 1; }
    exec /usr/bin/python3 scripts/gpu_kit.py "$build" . "$out" $fast
fi
# scripts/build.sh: configure once (with scripts/nvcc-deps.sh under meson < 1.4), then ninja
WEIPIPE_BUILD=$build scripts/build.sh -Dcuda=enabled -Dnccl=enabled -Dmpi=disabled -Dibverbs=disabled \
    "-Dgpu_arch=$arch" "-Dnccl_lib_dir=$nccl_dir" || { echo "gpu-kit: the build failed" >&2; exit 1; }
/usr/bin/python3 scripts/gpu_kit.py "$build" . "$out" $fast
