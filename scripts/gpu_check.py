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
  step       weipipe's whole training step (forward, loss, backward, LM head, gradient zeroing,
             loss scaling, AdamW with fp32 masters): `weipipe train --backend cuda`, one rank,
             one micro-batch per step, at SmolLM2-135M's and Llama-3.2-1B's shapes
             (scripts/step_flops.py, configs/*-shape.ini), --precision mixed and bf16, 12 steps
             on tiny_train.bin; the step time is the median of the metrics file's `seconds` after
             the first 2 steps, the device memory the run's peak beside its prediction
  torchstep  PyTorch's whole step at the same shapes and b (scripts/gpu_torch_step.py): the
             strongest fair variant (bf16 + fp32 masters, cuDNN attention, fused projections,
             chunked cross-entropy, compiled blocks) and the usual one (fp32 + autocast, flash)
  train      whole `weipipe train --backend cuda` runs at h = 1024 (8 layers, 8 heads of 128,
             ffn 2816, V = 32000, s = 2048, 8 micro-batches): 4 ranks sharing the GPU over
             several strategies (and 1 rank, when named in --train-runs); each prints tokens/s
             and, per rank, the device memory the backend held at most beside the prediction
  sanitizer  compute-sanitizer memcheck of the attention test and of a model step
  measure    (only when named in --stages) tests/gpu/measure.sh: the end-of-run simulator within
             15% of the measured step and the device's own memory figure (cudaMemGetInfo)
             within 10% of the prediction at N = 1 and 4, and the start-up refusal just below
             the need
  long       (only when named in --stages) long context at the 1B shape (h 2048, 16 layers, 32/8
             heads, ffn 8192, V 128256, tied) with --recompute on one rank: s = 32K, 64K, 128K,
             causal and with --doc-mask on generated packed documents (mean about 4K tokens);
             tokens/s, step and device memory against the simulator's and the memory model's
             predictions, held to the train stage's bars (issue 39)
  bench      (only when named in --stages) weipipe's block benchmark (tests/gpu/bench_gpu.c)
  torch      (only when named in --stages) PyTorch's block benchmark (scripts/gpu_torch_bench.py)
The default stages fit --deadline 330 (PLAN: each stage's time box, the GPU tests first; the
bench/torch pair of the first runs measured blocks, not steps, and is left out of that plan). A
stage may use its box plus what earlier stages left unused, never the boxes of the stages after
it. --step-seq S (repeated) runs both step stages at those lengths instead of 4096, each shape at
those among its own (step_flops.SHAPES: 2048 and 4096; 8192 at 1B) and a length neither lists at
both: the rest of the table is a second call, `--stages step,torchstep --step-seq 2048
--step-seq 8192` (some 4 minutes: SmolLM2 at 2048, Llama-3.2-1B at 2048 and 8192).
A summary table is printed last, with each stage's figures and one table of the whole steps,
weipipe's beside PyTorch's; every stage's full output is in DIR/<stage>-<name>.log. A stage is
judged on its exit status and, where it measures, on the bars below (BARS): a train or step run
whose end-of-run simulator step or device memory is further from the measurement than its bar
fails, whatever its exit status; a step run also fails below the strongest PyTorch's tokens/s at
its shape (or with no PyTorch figure to compare), and at Llama-3.2-1B, s = 4096, below 45% MFU.
A stage that had no time left is "NOT RUN", never a pass.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_flops  # noqa: E402

T0 = time.monotonic()
ROWS = []  # (stage, name, result, seconds, note)
STAGES = ["libs", "gpu", "unit", "ring", "step", "torchstep", "train", "sanitizer", "measure", "long", "bench", "torch"]
DEFAULT_STAGES = ["libs", "gpu", "unit", "ring", "step", "torchstep", "train", "sanitizer"]
# Each stage's time box in seconds (the default stages': libs and gpu take a few seconds, the
# summary SUMMARY_RESERVE), planned so that --deadline 330 runs them all; from the H200 runs of
# 2026-11-27 (docs/gpu-runs/): the unit tests took 48 s, gpu/ring 46 s, a 4-rank h = 1024 run 4-9 s,
# memcheck 5 s. Not yet run: the step stage (weipipe's host-side initialisation of 1.5e9 fp32
# values at 1B, some 30 s per run, and its cuDNN graphs) and torchstep (one process per shape,
# torch.compile of one block and of the loss's softmax, some 20-30 s; PyTorch's import).
PLAN = {"unit": 55, "ring": 52, "step": 110, "torchstep": 85, "train": 12, "sanitizer": 8, "measure": 60, "long": 540,
        "bench": 60, "torch": 60}
# The measure stage (issue 38 item 4, outside the default plan: the train stage judges the same
# bars on its runs): tests/gpu/measure.sh, the simulator and the device's memory at N = 1 and 4 and
# the start-up refusal just below the need; its box a guess (four h = 1024 runs, not yet run).
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
# Those the default plan runs: N = 4 under the paper's strategy and 1F1B (N = 1 is the step stage's,
# at real shapes); --train-runs all runs the six.
DEFAULT_TRAIN_RUNS = ["4 ranks weipipe-interleave", "4 ranks 1f1b"]
# The step stage's runs: each shape of step_flops.SHAPES at these sequence lengths (--step-seq
# chooses others), each precision; one rank, one micro-batch of step_flops.default_batch per optimizer step.
STEP_SEQS = [4096]
STEP_PRECISIONS = ["mixed", "bf16"]
STEP_STEPS, STEP_WARMUP = 12, 2  # the median of the 10 steps after the first 2
STEP_CAPS = {"smollm2-135m": 40, "llama32-1b": 75}  # seconds per weipipe run
TORCH_CAPS = {"smollm2-135m": 40, "llama32-1b": 55}  # seconds per PyTorch process (one shape, its seqs)
TORCH_VARIANTS = "bf16-cudnn-compiled,fp32-autocast-flash"  # bf16-cudnn-eager too with --torch-variants
# What a measuring stage must reach to pass (issue 38: "gpu-check that can fail"): the simulator's
# step (op times from the run itself) within 15% of the measured step; each rank's device peak within
# 10% of the memory prediction; weipipe's whole step at least as fast as the strongest PyTorch at
# the same shape (ratio of tokens/s); MFU (causal attention halved) at least 45% at the MFU_AT shape.
BARS = {"sim": 0.15, "mem": 0.10, "ratio": 1.0, "mfu": 0.45}
MFU_AT = ("llama32-1b", 4096)
# Most seconds one run of a stage may take (the unit tests each have their own).
CAPS = {"unit": 60, "ring": 240, "measure": 240, "train": 60, "long": 150, "bench": 150, "torch": 150, "sanitizer": 120}
SUMMARY_RESERVE = 3
# The long stage (issue 39): the 1B shape, one rank, --recompute, at three lengths, causal and masked;
# not yet run (its box, PLAN["long"], is a guess: the 1B model's host-side initialisation, some 30 s
# per run, and 3 steps of up to ~10^15 FLOPs at 128K). Named in --stages, after the default plan.
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
LATER = {"boxes": 0.0}  # the time boxes of the stages still to come (main sets it per stage)


def left(deadline):
    return deadline - (time.monotonic() - T0) - SUMMARY_RESERVE - LATER["boxes"]


def run(stage, name, argv, logs, deadline, cap, env=None, cwd=None):
    """Run argv with a timeout inside the deadline and outside the later stages' boxes; record
    (result, seconds, last line)."""
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
    # the GPU's own figure (cudaMemGetInfo) beside the prediction with the context, one line per device
    dev = [(int(m.group(1)), float(m.group(2)), float(m.group(3))) for m in re.finditer(
        r"^device (\d+) \(ranks? [0-9,]+\), cudaMemGetInfo total - free: at start-up [0-9.]+ MiB, "
        r"most at a step's end ([0-9.]+) MiB; predicted ([0-9.]+) MiB", text, flags=re.M)]
    if dev:
        fig["dev"] = dev
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
    if "dev" in fig:  # runs from before the device line have none: no figure, no bar
        offs = [peak / pred - 1 for _, peak, pred in fig["dev"] if pred > 0]
        worst = max(offs, key=abs) if offs else float("nan")
        note.append(f"GPU's own figure / predicted {min(offs) + 1:.2f}-{max(offs) + 1:.2f}" if offs else "no device figure")
        if not abs(worst) <= BARS["mem"]:
            bad.append(f"device memory {worst:+.0%} (bar {BARS['mem']:.0%})")
    return bad, "; ".join(note)


def step_figures(metrics_text):
    """A step-stage run's figures from its --metrics file: the median step seconds after the first
    STEP_WARMUP steps (None with fewer than 2 such steps), how many, and each rank's device peak
    and prediction (MiB) from the end-of-run memory line. A skipped step (mixed precision's loss
    scale overflowed) ran no AdamW: not a whole step, left out and counted."""
    secs, mem, skipped = [], [], 0
    for line in metrics_text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "step" in r and isinstance(r.get("seconds"), (int, float)) and r["step"] > STEP_WARMUP:
            if r.get("skipped"):
                skipped += 1
            else:
                secs.append(float(r["seconds"]))
        for m in r.get("memory", []) if isinstance(r.get("memory"), list) else []:
            mem.append((m["rank"], m["peak_bytes"] / 2**20, m["predicted_bytes"] / 2**20))
    secs.sort()
    med = None
    if len(secs) >= 2:
        k = len(secs)
        med = secs[k // 2] if k % 2 else (secs[k // 2 - 1] + secs[k // 2]) / 2
    return {"step_s": med, "timed": len(secs), "skipped": skipped, "mem": mem}


def shape_seqs(shape, seqs):
    """The lengths of seqs a shape runs at: those among its own (step_flops.SHAPES), and a length
    that no shape lists at every shape."""
    listed = {q for sh in step_flops.SHAPES.values() for q in sh["seqs"]}
    return [q for q in seqs if q in shape["seqs"] or q not in listed]


def judge_whole_step(wp, torch_rows, model, seq):
    """The ratio and MFU bars of one weipipe whole-step row (wp: tok_s, mfu) against the PyTorch
    rows of the same shape (gpu_torch_step.py's JSON): (failed bars, the strongest PyTorch row)."""
    bad = []
    best = max((r for r in torch_rows if r.get("model") == model and r.get("seq") == seq and "error" not in r),
               key=lambda r: r["tokens_per_s"], default=None)
    if best is None:
        bad.append("no PyTorch figure to compare")
    elif wp["tok_s"] / best["tokens_per_s"] < BARS["ratio"]:
        bad.append(f"{wp['tok_s'] / best['tokens_per_s']:.2f}x the strongest PyTorch (bar {BARS['ratio']:.1f}x)")
    if (model, seq) == MFU_AT and not (wp["mfu"] or 0) >= BARS["mfu"]:
        bad.append(f"MFU {100 * (wp['mfu'] or 0):.1f}% (bar {100 * BARS['mfu']:.0f}%)")
    return bad, best


def whole_step_table(step_rows, torch_rows):
    """One markdown table: every PyTorch variant and every weipipe precision per shape, with
    tokens/s, both MFUs, memory and the ratio to the strongest PyTorch at that shape."""
    out = ["| shape | s | who | b | step ms | tokens/s | MFU | MFU (full attn) | device memory GiB | "
           "vs strongest PyTorch |", "|---|---:|---|---:|---:|---:|---:|---:|---|---:|"]
    pct = lambda x: f"{100 * x:.1f}%" if x is not None else "-"  # noqa: E731
    keys = sorted({(r["model"], r["seq"]) for r in step_rows + torch_rows if "model" in r},
                  key=lambda k: (list(step_flops.SHAPES).index(k[0]) if k[0] in step_flops.SHAPES else 99, k[1]))
    for model, seq in keys:
        best = max((r for r in torch_rows if (r.get("model"), r.get("seq")) == (model, seq) and "error" not in r),
                   key=lambda r: r["tokens_per_s"], default=None)
        for r in torch_rows:
            if (r.get("model"), r.get("seq")) != (model, seq):
                continue
            if "error" in r:
                out.append(f"| {model} | {seq} | PyTorch {r['variant']} | - | - | - | - | - | - | FAILED: {r['error'][:60]} |")
                continue
            mem = (f"{r['max_allocated_gib']:.1f} allocated, {r['max_reserved_gib']:.1f} reserved"
                   if "max_allocated_gib" in r else "-")
            mark = " (strongest)" if r is best else ""
            out.append(f"| {model} | {seq} | PyTorch {r['variant']}{mark} | {r['batch']} | {r['step_ms']:.1f} | "
                       f"{r['tokens_per_s']:.0f} | {pct(r['mfu'])} | {pct(r['mfu_full'])} | {mem} | "
                       f"{r['tokens_per_s'] / best['tokens_per_s']:.2f}x |")
        for r in step_rows:
            if (r["model"], r["seq"]) != (model, seq):
                continue
            if r.get("tok_s") is None:
                out.append(f"| {model} | {seq} | weipipe {r['precision']} | {r['batch']} | - | - | - | - | - | {r['result']} |")
                continue
            mem = "; ".join(f"{peak / 1024:.1f} peak / {pred / 1024:.1f} predicted" for _, peak, pred in r["mem"]) or "-"
            ratio = f"{r['tok_s'] / best['tokens_per_s']:.2f}x" if best else "no PyTorch"
            out.append(f"| {model} | {seq} | weipipe {r['precision']} | {r['batch']} | {1e3 * r['step_s']:.1f} | "
                       f"{r['tok_s']:.0f} | {pct(r['mfu'])} | {pct(r['mfu_full'])} | {mem} | {ratio} |")
    return out


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


def summary(info, step_table=None):
    print()
    print("================ gpu-check summary ================")
    for k, v in info.items():
        print(f"{k}: {v}")
    print()
    print("| stage | what | result | seconds | figures or last line |")
    print("|---|---|---|---:|---|")
    for stage, name, result, dt, note in ROWS:
        print(f"| {stage} | {name} | {result} | {dt:.1f} | {note} |")
    if step_table:
        print(f"\nThe whole training step, one GPU (MFU: scripts/step_flops.py's count, peak {info.get('peak', '?')}; "
              f"bars: >= {BARS['ratio']:.1f}x the strongest PyTorch, MFU >= {100 * BARS['mfu']:.0f}% at "
              f"{MFU_AT[0]} s={MFU_AT[1]}):")
        print("\n".join(step_table))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kit", required=True)
    ap.add_argument("--deadline", type=float, default=540)
    ap.add_argument("--logs", default="gpu-check-logs")
    ap.add_argument("--stages", default=",".join(DEFAULT_STAGES), help="comma-separated, of: " + ",".join(STAGES))
    ap.add_argument("--quick", action="store_true", help="block benchmarks (bench, torch) at s = 1024 only")
    ap.add_argument("--compile", action="store_true", help="PyTorch's block under torch.compile too (torch stage)")
    ap.add_argument("--seq", type=int, action="append", help="block benchmarks at these sequence lengths (default 4096, 16384)")
    ap.add_argument("--step-seq", type=int, action="append",
                    help="whole steps at these lengths instead of 4096 (each shape at those of its own lengths)")
    ap.add_argument("--torch-variants", default=TORCH_VARIANTS, help="gpu_torch_step.py's --variants")
    ap.add_argument("--train-runs", choices=("default", "all"), default="default", help="the train stage's runs")
    a = ap.parse_args()
    stages = a.stages.split(",")
    for s in stages:
        if s not in STAGES:
            print(f"gpu-check: unknown stage '{s}' (stages: {','.join(STAGES)})", file=sys.stderr)
            return 2
    if any(q < 2 for q in a.step_seq or []):
        print("gpu-check: --step-seq must be at least 2", file=sys.stderr)
        return 2
    stages = [s for s in STAGES if s in stages]  # the plan's order, whatever the order given
    step_seqs = sorted(set(a.step_seq or STEP_SEQS))
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
    commit = manifest["build"]["commit"]
    info["kit"] = f"{a.kit} (commit {commit}{': built from a tree with uncommitted changes' if commit.endswith('-dirty') else ''})"
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
        print(f"\ngpu-check: kit commit {commit}: no GPU, nothing measured")
        return 1 if unresolved else 77
    ROWS.append(("gpu", "nvidia-smi", "pass", 0.0, gpu))
    peak = float(os.environ.get("WP_PEAK_TFLOPS", "0") or 0) or step_flops.peak_tflops(gpu.split(",")[0])
    info["peak"] = f"{peak:g} TFLOP/s dense bf16" if peak else "unknown (set WP_PEAK_TFLOPS)"

    def sub(argv):
        return [x.replace("@KIT@", kit) for x in argv]

    def box(stage):
        """Enter a stage: the boxes of the selected stages after it stay reserved."""
        LATER["boxes"] = sum(PLAN.get(s, 0) for s in stages[stages.index(stage) + 1:] if s not in ("libs", "gpu"))

    tests = {t["name"]: t for t in manifest["tests"]}
    tenv = lambda t: {**env, **t["env"]}  # noqa: E731
    if "unit" in stages:
        box("unit")
        for name, t in tests.items():
            if name in ("gpu/ring", "gpu/nccl", "gpu/measure"):
                continue
            run("unit", name, sub(t["argv"]), a.logs, a.deadline, min(t["timeout"] or 120, CAPS["unit"]), tenv(t), cwd=kit)
    if "ring" in stages:
        box("ring")
        for name in ("gpu/ring", "gpu/nccl"):
            if name in tests:
                t = tests[name]
                run("ring", name, sub(t["argv"]), a.logs, a.deadline, CAPS["ring"], tenv(t), cwd=kit)
    data = os.path.join(kit, "share", "tests", "data", "tiny_train.bin")
    weipipe = os.path.join(kit, "bin", "weipipe")
    step_rows = []
    if "step" in stages:
        box("step")
        for model, shape in step_flops.SHAPES.items():
            for seq in shape_seqs(shape, step_seqs):
                batch = step_flops.default_batch(shape, seq)
                for prec in STEP_PRECISIONS:
                    name = f"{model} s{seq} {prec}"  # logs named in letters, digits, '.', '_', '-' alone
                    tag = name.replace(" ", "_")
                    metrics = os.path.join(a.logs, f"step-{tag}.jsonl")
                    if os.path.exists(metrics):
                        os.remove(metrics)
                    argv = [weipipe, "train", "--backend", "cuda", "--config", os.path.join(kit, "share", shape["config"]),
                            "--data", data, "--seq-length", str(seq), "--micro-batch-size", str(batch),
                            "--num-microbatches", "1", "--nranks", "1", "--strategy", "1f1b", "--transport", "local",
                            "--precision", prec, "--steps", str(STEP_STEPS), "--metrics", metrics, "--timeout", "120s"]
                    rc = run("step", name, argv, a.logs, a.deadline, STEP_CAPS[model], env)
                    row = {"model": model, "seq": seq, "precision": prec, "batch": batch, "tok_s": None, "mem": [],
                           "result": ROWS[-1][2], "index": len(ROWS) - 1, "bad": []}
                    step_rows.append(row)
                    if rc != 0:
                        continue
                    with open(os.path.join(a.logs, f"step-{name.replace(' ', '_')}.log"), errors="replace") as f:
                        bad, _ = judge_train(train_figures(f.read()))  # the simulator and memory bars
                    fig = step_figures(open(metrics).read() if os.path.exists(metrics) else "")
                    if fig["step_s"] is None:
                        bad.append(f"{fig['timed']} timed steps in the metrics file ({fig['skipped']} skipped)")
                    else:
                        row["step_s"], row["tok_s"] = fig["step_s"], batch * seq / fig["step_s"]
                        row["mfu"], row["mfu_full"] = step_flops.mfu(shape, seq, row["tok_s"], peak)
                    row["mem"], row["bad"] = fig["mem"], bad
    torch_rows = []
    if "torchstep" in stages:
        box("torchstep")
        for model, shape in step_flops.SHAPES.items():
            seqs = shape_seqs(shape, step_seqs)
            if not seqs:
                continue
            out = os.path.join(a.logs, f"torchstep-{model}.jsonl")
            if os.path.exists(out):
                os.remove(out)
            argv = ["python3", os.path.join(kit, "share", "scripts", "gpu_torch_step.py"), "--model", model,
                    "--variants", a.torch_variants, "--json", out] + [x for q in seqs for x in ("--seq", str(q))]
            if peak:
                argv += ["--peak-tflops", str(peak)]
            run("torchstep", model, argv, a.logs, a.deadline, TORCH_CAPS[model] + 20 * (len(seqs) - 1),
                dict(env, PYTHONUNBUFFERED="1"))  # each further length: a recompile and its steps
            if os.path.exists(out):  # the rows it finished, also after a timeout
                torch_rows += [json.loads(line) for line in open(out) if line.strip()]
            got = [r for r in torch_rows if r.get("model") == model and "error" not in r]
            stage, nm, result, dt, note = ROWS[-1]
            ROWS[-1] = (stage, nm, result, dt, "; ".join(f"{r['variant']} s={r['seq']}: {r['tokens_per_s']:.0f} tok/s"
                                                        for r in got)[:200] or note)
    # the step rows judged against PyTorch (ratio) and the MFU bar, once both sides ran
    for row in step_rows:
        if row["tok_s"] is None:
            continue
        bad, best = judge_whole_step(row, torch_rows, row["model"], row["seq"])
        bad = row["bad"] + bad
        stage, nm, _, dt, _ = ROWS[row["index"]]
        note = f"{row['tok_s']:.0f} tok/s, MFU {100 * (row['mfu'] or 0):.1f}% ({100 * (row['mfu_full'] or 0):.1f}% full attn)"
        if best:
            note += f", {row['tok_s'] / best['tokens_per_s']:.2f}x PyTorch {best['variant']}"
        if row["mem"]:
            note += "; device peak / predicted " + ", ".join(f"{pk / pr:.2f}" if pr > 0 else "-" for _, pk, pr in row["mem"])
        row["result"] = "FAIL (bars: " + ", ".join(bad) + ")" if bad else "pass"
        ROWS[row["index"]] = (stage, nm, row["result"], dt, note)
    if "train" in stages:
        box("train")
        for name, flags in TRAIN_RUNS:
            if a.train_runs == "default" and name not in DEFAULT_TRAIN_RUNS:
                continue
            rc = run("train", name, [weipipe, "train", "--backend", "cuda", "--data", data] + TRAIN_MODEL + flags, a.logs,
                     a.deadline, CAPS["train"], env)
            if rc == 0:  # a run that finished is judged on its figures too
                with open(os.path.join(a.logs, f"train-{name.replace(' ', '_')}.log"), errors="replace") as f:
                    bad, note = judge_train(train_figures(f.read()))
                stage, nm, _, dt, _ = ROWS[-1]
                ROWS[-1] = (stage, nm, "FAIL (bars: " + ", ".join(bad) + ")" if bad else "pass", dt, note)
    if "sanitizer" in stages:
        box("sanitizer")
        cs = shutil.which("compute-sanitizer") or next(iter(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")), None)
        if not cs:
            ROWS.append(("sanitizer", "-", "skip", 0.0, "compute-sanitizer not found"))
        else:
            for name in ("gpu/attention", "gpu/attention_docs", "gpu/model"):
                if name in tests:
                    t = tests[name]
                    argv = [cs, "--tool", "memcheck", "--error-exitcode", "3"] + sub(t["argv"])
                    run("sanitizer", "memcheck " + name, argv, a.logs, a.deadline, CAPS["sanitizer"],
                        {**tenv(t), "WP_GPU_TEST_QUICK": "1"}, cwd=kit)
    if "measure" in stages and "gpu/measure" in tests:
        box("measure")
        t = tests["gpu/measure"]
        run("measure", "gpu/measure", sub(t["argv"]), a.logs, a.deadline, CAPS["measure"], tenv(t), cwd=kit)
    elif "measure" in stages:  # named but not in the kit (one packed before it existed): a failure, not a pass
        ROWS.append(("measure", "gpu/measure", "FAIL (not in the kit)", 0.0, ""))
    if "long" in stages:
        box("long")
        shard = os.path.join(a.logs, "long_train.bin")
        write_long_shard(shard)
        for name, flags in LONG_RUNS:
            rc = run("long", name, [weipipe, "train", "--backend", "cuda", "--data", shard] + LONG_MODEL + flags, a.logs,
                     a.deadline, CAPS["long"], env)
            if rc == 0:  # judged on its figures as the train stage's runs
                with open(os.path.join(a.logs, f"long-{name.replace(' ', '_')}.log"), errors="replace") as f:
                    bad, note = judge_train(train_figures(f.read()))
                stage, nm, _, dt, _ = ROWS[-1]
                ROWS[-1] = (stage, nm, "FAIL (bars: " + ", ".join(bad) + ")" if bad else "pass", dt, note)
    seqs = [x for s in (a.seq or []) for x in ("--seq", str(s))]
    if "bench" in stages:
        box("bench")
        argv = sub(manifest["bench"]["argv"]) + ["bf16"] + (["--quick"] if a.quick else []) + seqs
        run("bench", "bench_gpu bf16", argv, a.logs, a.deadline, CAPS["bench"], {**env, **manifest["bench"]["env"]})
    if "torch" in stages:
        box("torch")
        argv = ["python3", os.path.join(kit, "share", "scripts", "gpu_torch_bench.py")]
        argv += (["--quick"] if a.quick else []) + (["--compile"] if a.compile else []) + seqs
        run("torch", "gpu_torch_bench.py", argv, a.logs, a.deadline, CAPS["torch"], dict(os.environ, PYTHONUNBUFFERED="1"))
    # failed stages' and the benchmarks' log tails first, the summary last (what a caller that
    # keeps only the end of the output sees)
    for stage, name, result, dt, note in ROWS:
        log = os.path.join(a.logs, f"{stage}-{name.replace('/', '_').replace(' ', '_')}.log")
        if os.path.exists(log) and (not result.startswith("pass") or stage in ("train", "step", "torchstep", "long", "bench",
                                                                                 "torch")):
            with open(log, errors="replace") as f:
                lines = f.readlines()
            keep = 9 if stage in ("train", "step", "long") and result.startswith("pass") else 40  # a run's summary table
            print(f"\n---- {stage} {name}: {result} (the last {min(len(lines), keep)} lines of {log})")
            sys.stdout.write("".join(lines[-keep:]))
    summary(info, whole_step_table(step_rows, torch_rows) if step_rows or torch_rows else None)
    not_run = [r for r in ROWS if r[2] == NOT_RUN_NO_TIME]
    failed = [r for r in ROWS if r[2] not in ("pass", "skip", NOT_RUN_NO_TIME)]
    print(f"\ngpu-check: kit commit {commit}: {len(ROWS) - len(failed) - len(not_run)} passed or skipped, "
          f"{len(failed)} failed, {len(not_run)} not run (no time left: a stage that did not run is not a pass)")
    return 1 if failed or not_run else 0


if __name__ == "__main__":
    sys.exit(main())
