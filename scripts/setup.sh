#!/bin/sh
# Install what weipipe needs to build, test and run its demo on Debian 12 (bookworm).
# Everything comes from Debian's archive; nothing else is downloaded. Open MPI is for the mpirun
# launch test and MPI bootstrap, libibverbs for the RDMA transport (it builds without a device),
# iproute2 for the emulated slow links of scripts/netns_ring.sh. SentencePiece (library and its
# spm_train/spm_encode tools) for the tokenizers, g++ for the one C++ file that wraps it.
set -eu
packages="meson ninja-build pkg-config gcc libc6-dev
  libopenblas-dev libopenblas0-pthread libinih-dev libjansson-dev zlib1g-dev
  python3 python3-numpy python3-torch python3-matplotlib fortunes
  openmpi-bin libopenmpi-dev libibverbs-dev rdma-core iproute2
  g++ libsentencepiece-dev sentencepiece"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
fi
# Debian's reference BLAS is ~40x slower than OpenBLAS; make sure OpenBLAS is the one in use.
if command -v update-alternatives >/dev/null; then
    for alt in libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
        path=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas-pthread | head -n 1 || true)
        [ -z "$path" ] || $sudo update-alternatives --set "$alt" "$path" >/dev/null 2>&1 || true
    done
fi
echo "setup: done"
