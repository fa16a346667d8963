#!/bin/sh
# nvcc, plus the dependency file that meson's ninja rule for .cu objects expects (OUT.d):
# meson asks nvcc for one only from 1.4 on, and Debian 12 ships 1.0. Without it, editing a
# header that a .cu file includes rebuilds the C files but not the kernels, and the two
# disagree on struct layouts (seen on the first GPU runs: a field added to struct wp_kern moved
# impl, and every test that reached a stale kernel file segfaulted). scripts/build.sh and
# scripts/gpu-kit.sh make it meson's CUDA compiler under an older meson (a native file in the
# build folder).
out="" compile=0 prev=""
for a in "$@"; do
    [ "$prev" = "-o" ] && out=$a
    [ "$a" = "-c" ] && compile=1
    prev=$a
done
nvcc=${WP_REAL_NVCC:-nvcc}
command -v "$nvcc" >/dev/null || nvcc=/usr/local/cuda/bin/nvcc
if [ $compile = 1 ] && [ -n "$out" ]; then exec "$nvcc" -MD -MT "$out" -MF "$out.d" "$@"; fi
exec "$nvcc" "$@"
