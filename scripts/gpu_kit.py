#!/usr/bin/env python3
"""Pack a CUDA build of weipipe into one relocatable bundle for a bare GPU machine
(scripts/gpu-kit.sh builds, then calls this; scripts/gpu-check.sh --kit runs what it packs).

usage: gpu_kit.py BUILD_DIR SOURCE_DIR OUT.tar.xz [--fast]   (--fast: light compression, for tests)

The bundle, one folder weipipe-gpu-kit/:
  bin/       weipipe, the GPU tests, the GPU benchmark and what the tests run (ckpt_diff),
             each with RUNPATH $ORIGIN/../lib;
  lib/       every shared library those need that a bare CUDA machine may lack: everything
             `ldd` lists but the C library's own parts (libc, libm, libpthread, libdl, librt,
             the loader), the C++ runtime (libstdc++, libgcc_s: every machine that runs CUDA
             has them, and an older copy here would shadow the newer one the CUDA libraries
             were built against), the driver (libcuda) and the CUDA/NVIDIA libraries (cudart,
             cuBLAS, cuBLASLt, cuDNN, NCCL): gpu-check.sh finds those at run time in the CUDA
             toolkit or in Python's nvidia-* packages;
  share/     the files the tests read (configs, token shards, the shell tests), the PyTorch
             benchmarks and the whole-step shapes (scripts/gpu_torch_step.py, step_flops.py,
             configs/*-shape.ini), at their paths in the source tree;
  manifest.json  the GPU suite's tests (meson introspect --tests) with every path rewritten
             to @KIT@/..., their environment and timeouts; the benchmark; the build's commit.
Only the standard library: this runs under whatever python3 is first on PATH.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

# What the bundle must not carry (see the docstring): matched against a library's file name.
SYSTEM = re.compile(r"^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|"
                    r"libutil|libresolv|libstdc\+\+|libgcc_s)")
CUDA = re.compile(r"^(libcuda\.so|libnvidia|libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvrtc|libnvJitLink)")
KIT = "weipipe-gpu-kit"


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def ldd(path):
    """(name, resolved path or None) for each library ldd lists."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            libs.append((m.group(1), None if m.group(2) == "not found" else m.group(2)))
    return libs


def main():
    fast = "--fast" in sys.argv[4:]
    if len(sys.argv) not in (4, 5) or (len(sys.argv) == 5 and not fast):
        sys.exit("usage: gpu_kit.py BUILD_DIR SOURCE_DIR OUT.tar.xz [--fast]")
    build, source, out = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2]), sys.argv[3]
    tests = json.loads(subprocess.run(["meson", "introspect", "--tests", build], capture_output=True, text=True,
                                      check=True).stdout)
    # the GPU suite but gpu/kit itself (which packs a kit)
    tests = [t for t in tests if any(s.split(":")[-1] == "gpu" for s in t["suite"]) and t["name"] != "gpu/kit"]
    benches = json.loads(subprocess.run(["meson", "introspect", "--benchmarks", build], capture_output=True,
                                        text=True, check=True).stdout)
    benches = [b for b in benches if b["name"] == "gpu"]
    if not tests or not benches:
        sys.exit(f"gpu_kit: {build} has no GPU tests or no GPU benchmark: was it configured with -Dcuda=enabled?")
    stage = tempfile.mkdtemp(prefix="gpu-kit-")
    root = os.path.join(stage, KIT)
    for d in ("bin", "lib", "share"):
        os.makedirs(os.path.join(root, d))

    def place(arg, cwd):
        """An argument as it will read inside the kit: a file becomes @KIT@/bin or @KIT@/share."""
        p = os.path.normpath(os.path.join(cwd, arg)) if not os.path.isabs(arg) else os.path.normpath(arg)
        if not os.path.isfile(p):
            return arg
        if is_elf(p):
            dst = os.path.join(root, "bin", os.path.basename(p))
            if not os.path.exists(dst):
                shutil.copy2(p, dst)
            return "@KIT@/bin/" + os.path.basename(p)
        real = os.path.realpath(p)
        if not real.startswith(source + os.sep):
            sys.exit(f"gpu_kit: a test reads {p}, outside the source tree {source}")
        rel = os.path.relpath(real, source)
        dst = os.path.join(root, "share", rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(real, dst)
        return "@KIT@/share/" + rel

    manifest = {"tests": [], "bench": None}
    for t in tests:
        cwd = t["workdir"] or build
        manifest["tests"].append({"name": t["name"], "argv": [place(a, cwd) for a in t["cmd"]],
                                  "env": t["env"], "timeout": t["timeout"]})
    b = benches[0]
    manifest["bench"] = {"argv": [place(a, b["workdir"] or build) for a in b["cmd"]], "env": b["env"]}
    # what gpu-check.sh runs beside the tests
    place(os.path.join(source, "scripts", "gpu_torch_bench.py"), source)
    for extra in ("tests/data/tiny_val.bin", "tests/data/tiny_train.bin", "scripts/gpu_torch_step.py",
                  "scripts/step_flops.py", "configs/smollm2-135m-shape.ini", "configs/llama32-1b-shape.ini",
                  "configs/llama31-8b-shape.ini", "configs/tiny.ini"):
        place(os.path.join(source, extra), source)
    commit = subprocess.run(["git", "-C", source, "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    manifest["build"] = {"commit": commit, "source": source}

    # libraries: the closure of what ldd lists, minus the system and CUDA ones
    bundled, missing = {}, []
    todo = [os.path.join(root, "bin", f) for f in sorted(os.listdir(os.path.join(root, "bin")))]
    for exe in todo:
        for name, path in ldd(exe):
            if SYSTEM.match(name) or CUDA.match(name):
                continue
            if path is None:
                missing.append(f"{os.path.basename(exe)}: {name}")
            elif name not in bundled:
                bundled[name] = path
                shutil.copy2(path, os.path.join(root, "lib", name))  # follows links: the real file
    if missing:
        sys.exit("gpu_kit: unresolved here: " + ", ".join(missing))
    for f in os.listdir(os.path.join(root, "lib")):
        p = os.path.join(root, "lib", f)
        os.chmod(p, 0o755)
        subprocess.run(["patchelf", "--set-rpath", "$ORIGIN", p], check=True)
    for f in os.listdir(os.path.join(root, "bin")):
        subprocess.run(["patchelf", "--set-rpath", "$ORIGIN/../lib", os.path.join(root, "bin", f)], check=True)
    manifest["libs"] = sorted(bundled)
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    # xz with its 64 MiB window: the thirteen binaries share one CUDA fatbin, stored once
    with tarfile.open(out, "w:xz", preset=1 if fast else 9) as tar:
        tar.add(root, arcname=KIT)
    shutil.rmtree(stage)
    size = os.path.getsize(out)
    print(f"gpu_kit: {out}: {size / 1e6:.1f} MB, {len(manifest['tests'])} tests, "
          f"{len(bundled)} libraries bundled ({', '.join(sorted(bundled))}), commit {commit}")


if __name__ == "__main__":
    main()
