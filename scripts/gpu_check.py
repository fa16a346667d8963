#!/usr/bin/env python3
"""Run a GPU kit (scripts/gpu-kit.sh) on this machine without building: scripts/gpu-check.sh --kit.

usage: gpu_check.py --kit FILE [--deadline SECONDS] [--logs DIR] [--stages a,b,...]

Stages, most valuable first, each time-boxed so that the whole run ends inside the deadline:
  libs       unpack; find the CUDA libraries (toolkit or Python's nvidia-* packages); every
             kit binary's libraries resolve (ldd)
  gpu        nvidia-smi: name, driver, memory (no GPU: every later stage "no GPU: skipped", exit 77)
  unit       the GPU unit tests (kernels against the CPU backend, determinism, a model step,
             streams, the staged transport)
  ring       the whole trainer on the GPU: every strategy on 4 ranks sharing it, tcp, eval,
             sample (tests/gpu/ring.sh); NCCL (tests/gpu/nccl.sh)
  train      whole `weipipe train --backend cuda` runs at h = 1024 (8 layers, 8 heads of 128,
             ffn 2816, V = 32000, s = 2048, 8 micro-batches): 1 rank and 4 ranks sharing the GPU
             over several strategies; each prints tokens/s and, per rank, the device memory the
             backend held at most (kern_memory) beside the prediction
  long       long context at the 1B shape (h 2048, 16 layers, 32/8 heads, ffn 8192, V 128256, tied)
             with --recompute on one rank: s = 32K, 64K, 128K, causal and with --doc-mask on
             generated packed documents (mean about 4K tokens); tokens/s, step and device memory
             against the simulator's and the memory model's predictions (the same bars)
  bench      weipipe's GPU benchmark (tests/gpu/bench_gpu.c)
  torch      PyTorch on the same shapes (scripts/gpu_torch_bench.py), when python3 has CUDA torch
  sanitizer  compute-sanitizer memcheck of the attention test and of a model step
A summary table is printed last, with each stage's figures; every stage's full output is in
DIR/<stage>-<name>.log. A stage is judged on its exit status and, where it measures, on the bars
below (BARS): a train run whose end-of-run simulator step or device memory is further from the
measurement than its bar fails, whatever its exit status. A stage that had no time left is
"NOT RUN", never a pass.
Exit: 0 every stage ran and passed, 1 something failed or did not run, 77 no GPU (nothing ran).
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import site
import struct
import subprocess
import sys
import tarfile
import time

T0 = time.monotonic()
ROWS = []  # (stage, name, result, seconds, note)
STAGES = ["libs", "gpu", "unit", "ring", "train", "long", "bench", "torch", "sanitizer"]
# The train stage's runs: (name, flags after the common ones).
TRAIN_MODEL = ["--hidden-size", "1024", "--num-layers", "8", "--num-attention-heads", "8", "--ffn-hidden-size", "2816",
               "--vocab-size", "32000", "--seq-length", "2048", "--micro-batch-size", "1", "--num-microbatches", "8",
               "--steps", "4", "--transport", "local", "--threads", "2", "--timeout", "120s"]
TRAIN_RUNS = [("1 rank 1f1b", ["--nranks", "1", "--strategy", "1f1b"]),
              ("4 ranks weipipe-interleave", ["--nranks", "4", "--strategy", "weipipe-interleave"]),
              ("4 ranks weipipe-interleave recompute", ["--nranks", "4", "--strategy", "weipipe-interleave", "--recompute"]),
              ("4 ranks 1f1b", ["--nranks", "4", "--strategy", "1f1b"]),
              ("4 ranks wzb2", ["--nranks", "4", "--strategy", "wzb2"]),
              ("4 ranks fsdp", ["--nranks", "4", "--strategy", "fsdp"])]
# The long stage (issue 39): the 1B shape, one rank, --recompute, at three lengths, causal and masked.
LONG_MODEL = ["--hidden-size", "2048", "--num-layers", "16", "--num-attention-heads", "32", "--num-query-groups", "8",
              "--ffn-hidden-size", "8192", "--vocab-size", "128256", "--tie-word-embeddings", "--recompute",
              "--micro-batch-size", "1", "--num-microbatches", "1", "--nranks", "1", "--strategy", "1f1b",
              "--steps", "3", "--transport", "local", "--threads", "2", "--timeout", "300s"]
LONG_BOUNDARY = 128000  # Llama 3's BOS: where the generated documents start
LONG_SEQS = [32768, 65536, 131072]
LONG_RUNS = [(f"1B s={s // 1024}K {'doc-mask' if masked else 'causal'}",
              ["--seq-length", str(s)] + (["--doc-mask", "--doc-boundary-id", str(LONG_BOUNDARY)] if masked else []))
             for s in LONG_SEQS for masked in (False, True)]


def write_long_shard(path, tokens=2 * 131072 + 4096, mean_doc=4096, seed=39):
    """An llm.c version-7 shard (uint32 tokens) of packed documents for the long stage: each starts
    with LONG_BOUNDARY and runs an exponentially distributed length (mean mean_doc, at least 16),
    the other tokens uniform below LONG_BOUNDARY. Enough for two windows of the longest s."""
    rng = random.Random(seed)
    ids, left = [], 0
    while len(ids) < tokens:
        if left == 0:
            ids.append(LONG_BOUNDARY)
            left = max(16, int(rng.expovariate(1.0 / mean_doc)))
        else:
            ids.append(rng.randrange(LONG_BOUNDARY))
            left -= 1
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240801, 7, len(ids), *([0] * 253)))
        f.write(struct.pack(f"<{len(ids)}I", *ids))
    return ids


# What a measuring stage must reach to pass (issue: "gpu-check that can fail"): the simulator's step
# (op times from the run itself) within 15% of the measured step; each rank's device peak within
# 10% of the memory prediction.
BARS = {"sim": 0.15, "mem": 0.10}
# Most seconds each stage may take when the deadline allows (the unit tests each have their own).
CAPS = {"unit": 60, "ring": 240, "train": 60, "long": 240, "bench": 150, "torch": 150, "sanitizer": 120}
SUMMARY_RESERVE = 3


def left(deadline):
    return deadline - (time.monotonic() - T0) - SUMMARY_RESERVE


def run(stage, name, argv, logs, deadline, cap, env=None, cwd=None):
    """Run argv with a timeout inside the deadline; record (result, seconds, last line)."""
    budget = min(cap, left(deadline))
    if budget < 5:
        ROWS.append((stage, name, NOT_RUN_NO_TIME, 0.0, ""))
        return None
    log = os.path.join(logs, f"{stage}-{name.replace('/', '_').replace(' ', '_')}.log")
    t = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + " ".join(argv) + "\n")
        f.flush()
        try:
            p = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd, timeout=budget)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = None
        except OSError as exc:
            f.write(f"cannot run: {exc}\n")
            rc = 127
    dt = time.monotonic() - t
    with open(log, errors="replace") as f:
        lines = [l.rstrip() for l in f if l.strip()]
    last = lines[-1] if len(lines) > 1 else ""
    result = f"TIMEOUT ({budget:.0f} s)" if rc is None else {0: "pass", 77: "skip"}.get(rc, f"FAIL ({rc})")
    ROWS.append((stage, name, result, dt, last[:110]))
    return rc


NOT_RUN_NO_TIME = "NOT RUN (no time)"
NOT_RUN_NO_GPU = "no GPU: not run"


def train_figures(text):
    """The figures a `weipipe train` run prints at its end: tokens/s of its last step, the
    measured and simulated step time, and each rank's device peak against the prediction (MiB).
    Keys absent when the run did not print them."""
    fig = {}
    tok = [float(m.group(1)) for m in re.finditer(r"\s(\d+(?:\.\d+)?) tok/s", text)]
    if tok:
        fig["tok_s"] = tok[-1]
    m = re.search(r"step time \([^)]*\): measured ([0-9.]+) s, simulator ([0-9.]+) s", text)
    if m:
        fig["step_s"], fig["sim_s"] = float(m.group(1)), float(m.group(2))
    mem = []
    for line in text.splitlines():
        parts = line.split()
        # rank  bubble measured  predicted  payload measured  schedule  memory peak  predicted
        if len(parts) == 7 and parts[0].isdigit():
            try:
                mem.append((int(parts[0]), float(parts[5]), float(parts[6])))
            except ValueError:
                pass
    if mem:
        fig["mem"] = mem
    return fig


def judge_train(fig):
    """(failed bars, the figures as one note) for train_figures' dict."""
    bad, note = [], []
    if "tok_s" in fig:
        note.append(f"{fig['tok_s']:.0f} tok/s")
    if "step_s" in fig:
        off = fig["sim_s"] / fig["step_s"] - 1
        note.append(f"step {fig['step_s']:.4f} s, simulator {fig['sim_s']:.4f} s ({off:+.0%})")
        if abs(off) > BARS["sim"]:
            bad.append(f"simulator {off:+.0%} (bar {BARS['sim']:.0%})")
    else:
        bad.append("no step time printed")
    if "mem" in fig:
        offs = [peak / pred - 1 for _, peak, pred in fig["mem"] if pred > 0]
        worst = max(offs, key=abs) if offs else float("nan")
        note.append(f"device peak / predicted {min(offs) + 1:.2f}-{max(offs) + 1:.2f}")
        if not abs(worst) <= BARS["mem"]:
            bad.append(f"memory {worst:+.0%} (bar {BARS['mem']:.0%})")
    else:
        bad.append("no memory table printed")
    return bad, "; ".join(note)


def cuda_lib_dirs():
    """Folders holding the CUDA libraries: the toolkit first, then Python's nvidia-* packages."""
    want = ["libcudart.so.1*", "libcublas.so.1*", "libcublasLt.so.1*", "libnccl.so.2*", "libcudnn.so.9*", "libnvrtc.so.1*"]
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    dirs = []
    for r in roots:
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
            d = os.path.join(r, sub)
            if r and os.path.isdir(d) and d not in dirs:
                dirs.append(d)
    pkgs = []
    try:
        out = subprocess.run(["python3", "-c", "import site,sys; print('\\n'.join(site.getsitepackages()))"],
                             capture_output=True, text=True, timeout=30).stdout.split()
        pkgs = [p for p in out if os.path.isdir(os.path.join(p, "nvidia"))]
    except (OSError, subprocess.TimeoutExpired):
        pass
    pkgs += [p for p in site.getsitepackages() if os.path.isdir(os.path.join(p, "nvidia")) and p not in pkgs]
    for p in pkgs:
        for pat in want:
            for f in glob.glob(os.path.join(p, "nvidia", "**", pat), recursive=True):
                d = os.path.dirname(f)
                if d not in dirs:
                    dirs.append(d)
    return dirs


def summary(info):
    print()
    print("================ gpu-check summary ================")
    for k, v in info.items():
        print(f"{k}: {v}")
    print()
    print("| stage | what | result | seconds | last line |")
    print("|---|---|---|---:|---|")
    for stage, name, result, dt, note in ROWS:
        print(f"| {stage} | {name} | {result} | {dt:.1f} | {note} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kit", required=True)
    ap.add_argument("--deadline", type=float, default=540)
    ap.add_argument("--logs", default="gpu-check-logs")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--quick", action="store_true", help="benchmarks at s = 1024 only")
    ap.add_argument("--compile", action="store_true", help="PyTorch's block under torch.compile too")
    ap.add_argument("--seq", type=int, action="append", help="benchmark these sequence lengths (default 4096, 16384)")
    a = ap.parse_args()
    stages = a.stages.split(",")
    for s in stages:
        if s not in STAGES:
            print(f"gpu-check: unknown stage '{s}' (stages: {','.join(STAGES)})", file=sys.stderr)
            return 2
    os.makedirs(a.logs, exist_ok=True)
    info = {}
    # ---- libs
    unpack = os.path.join(a.logs, "kit")
    shutil.rmtree(unpack, ignore_errors=True)
    try:
        with tarfile.open(a.kit) as tar:
            tar.extractall(unpack)
    except (OSError, tarfile.TarError) as exc:
        print(f"gpu-check: --kit {a.kit}: {exc}", file=sys.stderr)
        return 2
    kit = os.path.join(unpack, "weipipe-gpu-kit")
    with open(os.path.join(kit, "manifest.json")) as f:
        manifest = json.load(f)
    info["kit"] = f"{a.kit} (commit {manifest['build']['commit']})"
    dirs = cuda_lib_dirs()
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(dirs + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p])
    info["CUDA library folders"] = " ".join(dirs) or "(none found)"
    unresolved, resolved = [], {}
    for b in sorted(os.listdir(os.path.join(kit, "bin"))):
        out = subprocess.run(["ldd", os.path.join(kit, "bin", b)], capture_output=True, text=True, env=env).stdout
        for line in out.splitlines():
            parts = line.split()
            if "not found" in line:
                unresolved.append(f"{b}: {parts[0]}")
            elif len(parts) >= 3 and parts[1] == "=>" and any(x in parts[0] for x in ("cuda", "cublas", "nccl", "cudnn", "nvrtc")):
                resolved[parts[0]] = parts[2]
    with open(os.path.join(a.logs, "libs.log"), "w") as f:
        f.write("\n".join(f"{k} => {v}" for k, v in sorted(resolved.items())) + "\n")
        f.write("unresolved:\n" + "\n".join(unresolved) + "\n")
    ROWS.append(("libs", "ldd of every kit binary", "pass" if not unresolved else "FAIL", time.monotonic() - T0,
                 ("unresolved: " + ", ".join(sorted(set(u.split(": ")[1] for u in unresolved))))[:110] if unresolved
                 else ", ".join(f"{k}" for k in sorted(resolved))[:110]))
    # ---- gpu
    gpu = None
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        gpu = q.stdout.strip() if q.returncode == 0 and q.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    info["GPU"] = gpu or "none"
    if not gpu:
        for s in stages:
            if s not in ("libs",):
                ROWS.append((s, "-", NOT_RUN_NO_GPU, 0.0, ""))
        summary(info)
        return 1 if unresolved else 77
    ROWS.append(("gpu", "nvidia-smi", "pass", 0.0, gpu))

    def sub(argv):
        return [x.replace("@KIT@", kit) for x in argv]

    tests = {t["name"]: t for t in manifest["tests"]}
    tenv = lambda t: {**env, **t["env"]}  # noqa: E731
    if "unit" in stages:
        for name, t in tests.items():
            if name in ("gpu/ring", "gpu/nccl"):
                continue
            run("unit", name, sub(t["argv"]), a.logs, a.deadline, min(t["timeout"] or 120, CAPS["unit"]), tenv(t), cwd=kit)
    if "ring" in stages:
        for name in ("gpu/ring", "gpu/nccl"):
            if name in tests:
                t = tests[name]
                run("ring", name, sub(t["argv"]), a.logs, a.deadline, CAPS["ring"], tenv(t), cwd=kit)
    if "train" in stages:
        data = os.path.join(kit, "share", "tests", "data", "tiny_train.bin")
        weipipe = os.path.join(kit, "bin", "weipipe")
        for name, flags in TRAIN_RUNS:
            rc = run("train", name, [weipipe, "train", "--backend", "cuda", "--data", data] + TRAIN_MODEL + flags, a.logs,
                     a.deadline, CAPS["train"], env)
            if rc == 0:  # a run that finished is judged on its figures too
                with open(os.path.join(a.logs, f"train-{name.replace(' ', '_')}.log"), errors="replace") as f:
                    bad, note = judge_train(train_figures(f.read()))
                stage, nm, _, dt, _ = ROWS[-1]
                ROWS[-1] = (stage, nm, "FAIL (bars: " + ", ".join(bad) + ")" if bad else "pass", dt, note)
    if "long" in stages:
        shard = os.path.join(a.logs, "long_train.bin")
        write_long_shard(shard)
        weipipe = os.path.join(kit, "bin", "weipipe")
        for name, flags in LONG_RUNS:
            rc = run("long", name, [weipipe, "train", "--backend", "cuda", "--data", shard] + LONG_MODEL + flags, a.logs,
                     a.deadline, CAPS["long"], env)
            if rc == 0:
                with open(os.path.join(a.logs, f"long-{name.replace(' ', '_')}.log"), errors="replace") as f:
                    bad, note = judge_train(train_figures(f.read()))
                stage, nm, _, dt, _ = ROWS[-1]
                ROWS[-1] = (stage, nm, "FAIL (bars: " + ", ".join(bad) + ")" if bad else "pass", dt, note)
    seqs = [x for s in (a.seq or []) for x in ("--seq", str(s))]
    if "bench" in stages:
        argv = sub(manifest["bench"]["argv"]) + ["bf16"] + (["--quick"] if a.quick else []) + seqs
        run("bench", "bench_gpu bf16", argv, a.logs, a.deadline, CAPS["bench"], {**env, **manifest["bench"]["env"]})
    if "torch" in stages:
        argv = ["python3", os.path.join(kit, "share", "scripts", "gpu_torch_bench.py")]
        argv += (["--quick"] if a.quick else []) + (["--compile"] if a.compile else []) + seqs
        run("torch", "gpu_torch_bench.py", argv, a.logs, a.deadline, CAPS["torch"], dict(os.environ, PYTHONUNBUFFERED="1"))
    if "sanitizer" in stages:
        cs = shutil.which("compute-sanitizer") or next(iter(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")), None)
        if not cs:
            ROWS.append(("sanitizer", "-", "skip", 0.0, "compute-sanitizer not found"))
        else:
            for name in ("gpu/attention", "gpu/model"):
                if name in tests:
                    t = tests[name]
                    argv = [cs, "--tool", "memcheck", "--error-exitcode", "3"] + sub(t["argv"])
                    run("sanitizer", "memcheck " + name, argv, a.logs, a.deadline, CAPS["sanitizer"],
                        {**tenv(t), "WP_GPU_TEST_QUICK": "1"}, cwd=kit)
    # failed stages' and the benchmarks' log tails first, the summary last (what a caller that
    # keeps only the end of the output sees)
    for stage, name, result, dt, note in ROWS:
        log = os.path.join(a.logs, f"{stage}-{name.replace('/', '_').replace(' ', '_')}.log")
        if os.path.exists(log) and (not result.startswith("pass") or stage in ("train", "long", "bench", "torch")):
            with open(log, errors="replace") as f:
                lines = f.readlines()
            keep = 9 if stage in ("train", "long") and result.startswith("pass") else 40  # a run's summary table
            print(f"\n---- {stage} {name}: {result} (the last {min(len(lines), keep)} lines of {log})")
            sys.stdout.write("".join(lines[-keep:]))
    summary(info)
    not_run = [r for r in ROWS if r[2] == NOT_RUN_NO_TIME]
    failed = [r for r in ROWS if r[2] not in ("pass", "skip", NOT_RUN_NO_TIME)]
    print(f"\ngpu-check: {len(ROWS) - len(failed) - len(not_run)} passed or skipped, {len(failed)} failed, "
          f"{len(not_run)} not run (no time left: a stage that did not run is not a pass)")
    return 1 if failed or not_run else 0


if __name__ == "__main__":
    sys.exit(main())
