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
  paper      (only when named in --stages) the paper's claim on real compute (issue 37 item 3): the
             135M shape (configs/smollm2-135m-shape.ini) at s = 8192, 8 micro-batches, 4 ranks as
             processes sharing the GPU over tcp, every hop paced at 2.5 Gbit/s (--ranks-per-node 1:
             each rank has about a quarter of the GPU, so a quarter of a 10 Gbit/s Ethernet keeps
             a cluster's ratio of compute to link time); weipipe-interleave, wzb2, 1f1b, zb-v, fsdp
             and --strategy auto's pick, each with tokens/s and step time beside the simulator's,
             the ratio to 1f1b in its note
  offload    (only when named in --stages) optimizer state in host memory (issue 41): one rank, s =
             2048, b = 1, the device capped at 24 GB (--device-memory 24G): the 1B shape
             host-resident and device-resident under the cap (the memory model says which fits;
             device-resident without the cap where it does not: the tokens/s to compare), and
             Llama-3.1-8B's layer dims at as many layers as the cap and this host hold (worked out
             from the memory model by the kit's `weipipe simulate`, printed) host-resident, and
             device-resident under the cap, which must be refused at start-up (exit 2, the memory
             line); tokens/s, the device's memory (allocator and cudaMemGetInfo) and the host's
             (VmHWM) beside the predictions, the device held to the train stage's bars and the cap
  sanitizers (only when named in --stages) issue 37 item 4's sanitizer runs beyond the default
             stage's memcheck: racecheck and synccheck of a model step (gpu/model, quick), and
             memcheck, racecheck and synccheck of a 2-rank ring (--transport local, the tiny
             config, 2 steps of weipipe-interleave); each fails on any report (exit 3)
  bf16       (only when named in --stages) `--precision bf16` for BF16_STEPS steps on the GPU
             against the same run on the CPU backend (tiny config, one rank): every step's loss
             within BF16_BARS of the CPU's, relative (the GPU keeps activations in bf16, the CPU
             in fp32: they drift apart by roundings, never by a trend), both losses falling
  graphs     (only when named in --stages) CUDA graphs (--graphs, issue 38: "measure first; keep
             only if it wins"): one rank, the 135M shape at s = 2048 and 4096, mixed, each run
             twice, --graphs false then true, STEP_STEPS steps: the median step after the first
             STEP_WARMUP and the launch ratio (issue_s / device_s) of each, how many actions
             replayed; fails when the two runs' losses differ in any bit or nothing replayed (the
             speed is reported, not judged: it decides the flag's default)
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
import statistics
import struct
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_flops  # noqa: E402

T0 = time.monotonic()
ROWS = []  # (stage, name, result, seconds, note)
STAGES = ["libs", "gpu", "unit", "ring", "step", "torchstep", "train", "sanitizer", "measure", "long", "paper", "offload",
          "graphs", "sanitizers", "bf16", "bench", "torch"]
DEFAULT_STAGES = ["libs", "gpu", "unit", "ring", "step", "torchstep", "train", "sanitizer"]
# Each stage's time box in seconds (the default stages': libs and gpu take a few seconds, the
# summary SUMMARY_RESERVE), planned so that --deadline 330 runs them all; from the H200 runs of
# 2026-11-27 (docs/gpu-runs/): the unit tests took 48 s, gpu/ring 46 s, a 4-rank h = 1024 run 4-9 s,
# memcheck 5 s. Not yet run: the step stage (weipipe's host-side initialisation of 1.5e9 fp32
# values at 1B, some 30 s per run, and its cuDNN graphs) and torchstep (one process per shape,
# torch.compile of one block and of the loss's softmax, some 20-30 s; PyTorch's import).
PLAN = {"unit": 55, "ring": 52, "step": 110, "torchstep": 85, "train": 12, "sanitizer": 8, "measure": 60, "long": 540,
        "paper": 240, "offload": 420, "graphs": 150, "sanitizers": 240,
        "bf16": 60, "bench": 60, "torch": 60}
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
# The graphs stage (issue 38 item 3), named in --stages; not yet run: four runs of the 135M shape,
# its box from the step stage's cap for that shape (40 s a run).
GRAPHS_SEQS = [2048, 4096]
GRAPHS_RE = re.compile(r"^graphs: (\d+) of (\d+) compute actions replayed a recording, (\d+) recorded, (\d+) eager", re.M)
# The sanitizers and bf16 stages (issue 37 item 4), named in --stages; not yet run: their boxes a
# guess (compute-sanitizer slows a run 10-100x; the default stage's memcheck of three tests took
# 5 s on the H200). The bf16 bars a guess too, from bf16's unit roundoff (2^-8): a step's loss
# within 3% of the CPU's, the mean of the last 10 steps' relative gaps within 1%.
SANITIZER_RING = ["--nranks", "2", "--transport", "local", "--strategy", "weipipe-interleave", "--steps", "2",
                  "--num-microbatches", "2", "--threads", "1", "--timeout", "300s"]
BF16_STEPS = 50
BF16_BARS = {"step": 0.03, "last10": 0.01}
# Most seconds one run of a stage may take (the unit tests each have their own).
CAPS = {"graphs": 40, "sanitizers": 80, "bf16": 40, "unit": 60, "ring": 240, "measure": 240, "train": 60, "long": 150, "paper": 90, "offload": 180, "bench": 150,
        "torch": 150, "sanitizer": 120}
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


# The paper stage (issue 37 item 3). Not yet run; its box a guess from `weipipe simulate` at these
# flags with --device-tflops 100 (a quarter of an H200 at about 40% of its peak): 1f1b and zb-v
# about 1.5 s a step, fsdp 4.6 s, the weight-passing strategies about 10 s (at the 135M shape the
# weights, 163M parameters with the tied 49152-row embedding, outweigh a round's activations on a
# 2.5 Gbit/s link: the simulator puts 1f1b 6.5x ahead of weipipe-interleave here). 3 steps each,
# the first left out of the step time.
PAPER_MODEL = ["--config", "configs/smollm2-135m-shape.ini", "--seq-length", "8192", "--micro-batch-size", "1",
               "--num-microbatches", "8", "--nranks", "4", "--transport", "tcp", "--ranks-per-node", "1",
               "--link-bandwidth", "2.5Gbit", "--precision", "mixed", "--steps", "3", "--threads", "2",
               "--timeout", "120s"]
PAPER_RUNS = ["weipipe-interleave", "wzb2", "1f1b", "zb-v", "fsdp", "auto"]


PAPER_TOKENS = 8192 * 8  # a step's tokens at PAPER_MODEL's flags (auto may choose others: its own line says)


def strip_ranks(text):
    """A multi-process run's output without the launcher's "[rank R] " line prefixes."""
    return re.sub(r"^\[rank \d+\] ", "", text, flags=re.M)


def auto_line(text):
    """(strategy, predicted tokens/s, measured tokens/s) from a --strategy auto run's end-of-run
    'auto:' line, or None."""
    m = re.search(r"^auto: (\S+) predicted ([0-9.]+) tokens/s, measured ([0-9.]+) tokens/s", text, flags=re.M)
    return (m.group(1), float(m.group(2)), float(m.group(3))) if m else None


def paper_notes(figs, tokens=PAPER_TOKENS):
    """The paper stage's notes: {strategy: train_figures dict, with 'auto' = auto_line's triple
    for the auto run} -> {strategy: note}: tokens/s measured (a step's tokens over the measured
    step; auto's from its own line, since it may pick another micro-batch size) and simulated,
    and the ratio to 1f1b's measured tokens/s."""
    def tok_s(f):
        return f["auto"][2] if f.get("auto") else tokens / f["step_s"]
    base = tok_s(figs["1f1b"]) if "step_s" in figs.get("1f1b", {}) else None
    notes = {}
    for name, f in figs.items():
        if "step_s" not in f:
            notes[name] = "no step time printed"
            continue
        sim = f["auto"][1] if f.get("auto") else tokens / f["sim_s"]
        note = f"{tok_s(f):.0f} tok/s, simulator {sim:.0f} tok/s ({tok_s(f) / sim - 1:+.0%})"
        if base:
            note += f"; {tok_s(f) / base:.2f}x 1f1b"
        if f.get("auto"):
            note = f"picked {f['auto'][0]}; " + note
        notes[name] = note
    return notes


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


# The offload stage (issue 41 item 5), named in --stages after the default plan; not yet run (written
# where there is no GPU): its box a guess, five runs of which three train (the host-side
# initialisation of 1.5e9 fp32 values at 1B, some 30 s per run by the step stage's estimate; the
# 8B-dims run has more)
# and two are refused at start-up, plus the memory model's layer count (up to 32 simulate calls of
# one rank, well under a second each).
OFFLOAD_CAP, OFFLOAD_CAP_BYTES = "24G", 24 * 2**30  # --device-memory: a 24 GB consumer GPU on a larger one
OFFLOAD_STEPS = 8  # the median of the steps after STEP_WARMUP
OFFLOAD_RUN = ["--seq-length", "2048", "--micro-batch-size", "1", "--num-microbatches", "1", "--nranks", "1",
               "--strategy", "1f1b", "--transport", "local", "--precision", "mixed", "--steps", str(OFFLOAD_STEPS),
               "--timeout", "300s"]
OFFLOAD_1B = "configs/llama32-1b-shape.ini"
OFFLOAD_8B = "configs/llama31-8b-shape.ini"  # Llama-3.1-8B's dims; the stage sets --num-layers
OFFLOAD_8B_DIMS = dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, tied=False)
# What the 8B-dims run's host side may plan on: this share of the host's MemTotal (the kit machine:
# 128 GiB), the rest left to the system, the page cache and the program; and what train's start-up
# check adds to a prediction (src/runtime/memlimit.h: 10% + 64 MiB; on a GPU the CUDA context,
# src/schedule/memory.h's WP_MEM_CUDA_CONTEXT_MIB, and cuDNN's fp32 dQ workspace, b x s x heads x
# head_dim x 4 bytes, beside the allocations).
OFFLOAD_HOST_SHARE = 0.75
MEMLIMIT_MARGIN, MEMLIMIT_FIXED = 0.10, 64 * 2**20
CUDA_CONTEXT = 500 * 2**20
LATER = {"boxes": 0.0}  # the time boxes of the stages still to come (main sets it per stage)


def left(deadline):
    return deadline - (time.monotonic() - T0) - SUMMARY_RESERVE - LATER["boxes"]


def log_path(logs, stage, name):
    """Where run() writes a stage's run's output."""
    return os.path.join(logs, f"{stage}-{name.replace('/', '_').replace(' ', '_')}.log")


def run(stage, name, argv, logs, deadline, cap, env=None, cwd=None):
    """Run argv with a timeout inside the deadline and outside the later stages' boxes; record
    (result, seconds, last line)."""
    budget = min(cap, left(deadline))
    if budget < 5:
        ROWS.append((stage, name, NOT_RUN_NO_TIME, 0.0, ""))
        return None
    log = log_path(logs, stage, name)
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


def judged_run(stage, name, argv, logs, deadline, cap, env=None):
    """run(), then a `weipipe train` run that finished judged on its end-of-run figures
    (judge_train: the simulator and memory bars) whatever its exit status; the launcher's
    "[rank R] " prefixes of a multi-process run are stripped first. (rc, the output, the figures:
    {} when it did not finish)."""
    rc = run(stage, name, argv, logs, deadline, cap, env)
    if rc != 0:
        return rc, "", {}
    with open(log_path(logs, stage, name), errors="replace") as f:
        text = strip_ranks(f.read())
    fig = train_figures(text)
    bad, note = judge_train(fig)
    st, nm, _, dt, _ = ROWS[-1]
    ROWS[-1] = (st, nm, "FAIL (bars: " + ", ".join(bad) + ")" if bad else "pass", dt, note)
    return rc, text, fig


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
    scale overflowed) ran no AdamW: not a whole step, left out and counted. launch: the median of
    the same steps' issue_s / device_s (the host's launch time over the device's busy time: near 1,
    the step is launch-bound and CUDA graphs would pay; None where the file has no such keys)."""
    secs, mem, skipped, launch = [], [], 0, []
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
                if isinstance(r.get("issue_s"), (int, float)) and isinstance(r.get("device_s"), (int, float)) \
                        and r["device_s"] > 0:
                    launch.append(r["issue_s"] / r["device_s"])
        for m in r.get("memory", []) if isinstance(r.get("memory"), list) else []:
            mem.append((m["rank"], m["peak_bytes"] / 2**20, m["predicted_bytes"] / 2**20))
    secs.sort()
    med = None
    if len(secs) >= 2:
        k = len(secs)
        med = secs[k // 2] if k % 2 else (secs[k // 2 - 1] + secs[k // 2]) / 2
    return {"step_s": med, "timed": len(secs), "skipped": skipped, "mem": mem,
            "launch": statistics.median(launch) if launch else None}


def metrics_losses(metrics_text):
    """Each step's loss as written (%.17g), in order: the text, so that equal means equal bits."""
    return re.findall(r'"loss": ([^,}]*)', metrics_text)


def graphs_verdict(off_metrics, on_metrics, on_log):
    """The graphs stage's judgement of one pair of runs (--graphs false, then true): (bad, note).
    Bad when the losses differ in any step (a replay must issue the very calls the run without
    makes), when the run with graphs printed no 'graphs:' line or replayed nothing; the note has
    both medians, their ratio, both launch ratios and the replay counts."""
    bad = []
    lo, ln = metrics_losses(off_metrics), metrics_losses(on_metrics)
    if not lo or lo != ln:
        diff = next((i for i, (x, y) in enumerate(zip(lo, ln)) if x != y), min(len(lo), len(ln)))
        bad.append(f"losses differ from step {diff + 1} ({len(lo)} and {len(ln)} steps)")
    m = GRAPHS_RE.search(on_log)
    if not m:
        bad.append("no 'graphs:' line")
    elif int(m.group(1)) == 0:
        bad.append(f"nothing replayed ({m.group(0)})")
    fo, fn = step_figures(off_metrics), step_figures(on_metrics)
    note = []
    if fo["step_s"] and fn["step_s"]:
        note.append(f"step {fo['step_s']:.4g} s without, {fn['step_s']:.4g} s with: x{fo['step_s'] / fn['step_s']:.3f}")
    if fo["launch"] is not None and fn["launch"] is not None:
        note.append(f"launch ratio {fo['launch']:.2f} -> {fn['launch']:.2f}")
    if m:
        note.append(f"{m.group(1)} of {m.group(2)} actions replayed")
    return bad, "; ".join(note)


def bf16_verdict(gpu_metrics, cpu_metrics):
    """The bf16 stage's judgement: (bad, note). Each step's loss on the GPU against the CPU's,
    relative; bad past BF16_BARS, with fewer than BF16_STEPS losses on either side, or when
    either run's mean loss over its last 10 steps is not below its first 10 steps'."""
    g = [float(x) for x in metrics_losses(gpu_metrics)]
    c = [float(x) for x in metrics_losses(cpu_metrics)]
    bad = []
    if len(g) < BF16_STEPS or len(c) < BF16_STEPS:
        return [f"{len(g)} GPU and {len(c)} CPU losses, want {BF16_STEPS}"], ""
    rel = [abs(x - y) / abs(y) if y else float("inf") for x, y in zip(g, c)]
    worst = max(range(len(rel)), key=lambda i: rel[i])
    last10 = statistics.mean(rel[-10:])
    if rel[worst] > BF16_BARS["step"]:
        bad.append(f"step {worst + 1} loss {g[worst]:.6g} against the CPU's {c[worst]:.6g} ({rel[worst]:.2%} > "
                   f"{BF16_BARS['step']:.0%})")
    if last10 > BF16_BARS["last10"]:
        bad.append(f"last 10 steps {last10:.2%} apart on average (> {BF16_BARS['last10']:.0%})")
    for side, x in (("GPU", g), ("CPU", c)):
        if not statistics.mean(x[-10:]) < statistics.mean(x[:10]):
            bad.append(f"the {side}'s loss did not fall ({statistics.mean(x[:10]):.4f} -> {statistics.mean(x[-10:]):.4f})")
    note = (f"loss {g[0]:.4f} -> {g[-1]:.4f} (CPU {c[0]:.4f} -> {c[-1]:.4f}); worst step {worst + 1} {rel[worst]:.2%}, "
            f"last 10 {last10:.2%}")
    return bad, note


def compute_sanitizer():
    """compute-sanitizer's path (on PATH, else in a CUDA toolkit under /usr/local), or None."""
    return shutil.which("compute-sanitizer") or next(iter(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")), None)


def graphs_stage(weipipe, kit, data, logs, deadline, env):
    """The graphs stage's runs (see the module's header): one row per sequence length."""
    shape = step_flops.SHAPES["smollm2-135m"]
    for seq in GRAPHS_SEQS:
        batch = step_flops.default_batch(shape, seq)
        texts = {}
        for on in ("false", "true"):
            name = f"smollm2-135m s{seq} mixed graphs {on}"
            metrics = os.path.join(logs, f"graphs-s{seq}-{on}.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            argv = [weipipe, "train", "--backend", "cuda", "--config", os.path.join(kit, "share", shape["config"]),
                    "--data", data, "--seq-length", str(seq), "--micro-batch-size", str(batch), "--num-microbatches", "1",
                    "--nranks", "1", "--strategy", "1f1b", "--transport", "local", "--precision", "mixed", "--steps",
                    str(STEP_STEPS), "--metrics", metrics, "--timeout", "120s", "--graphs", on]
            rc = run("graphs", name, argv, logs, deadline, CAPS["graphs"], env)
            if rc != 0:
                break
            with open(log_path(logs, "graphs", name), errors="replace") as f:
                log = f.read()
            texts[on] = (open(metrics).read() if os.path.exists(metrics) else "", log)
        if len(texts) == 2:
            bad, note = graphs_verdict(texts["false"][0], texts["true"][0], texts["true"][1])
            stage, nm, result, dt, _ = ROWS[-1]
            ROWS[-1] = (stage, nm, f"FAIL ({'; '.join(bad)})" if bad else result, dt, note)


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


def llama_params(hidden, layers, heads, kv_heads, ffn, vocab, tied):
    """Parameters of a Llama shape, counted here (not by weipipe's layout): per layer the q and o
    projections (h x h each), k and v (h x kv_heads x head_dim each), the SwiGLU's three (h x ffn)
    and two RMSNorm weights; the embedding, the LM head unless tied, the final norm."""
    hd = hidden // heads
    per = 2 * hidden * hidden + 2 * hidden * kv_heads * hd + 3 * hidden * ffn + 2 * hidden
    return layers * per + vocab * hidden * (1 if tied else 2) + hidden


def simulate_memory(text):
    """(device peak, host bytes per host) of the 1f1b row of `weipipe simulate --format json`
    (the memory model: schedule/memory.h), or None when the output holds no such row."""
    try:
        rows = json.loads(text)["strategies"]
    except (ValueError, KeyError, TypeError):
        return None
    row = next((r for r in rows if r.get("strategy") == "1f1b" and "step_s" in r), None)
    return (row["peak_bytes_per_rank"], row.get("host_bytes_per_host", 0)) if row else None


def device_need(peak, seq, heads, head_dim, batch=1):
    """What train's start-up check holds --device-memory to on a GPU, one rank: the predicted
    allocations plus the CUDA context and cuDNN's workspace, with the 10% + 64 MiB margin."""
    return (peak + CUDA_CONTEXT + batch * seq * heads * head_dim * 4) * (1 + MEMLIMIT_MARGIN) + MEMLIMIT_FIXED


def host_need(host, params):
    """What the 8B-dims run's host side is planned at: its host column (masters, moments,
    accumulator, pinned staging) with train's margin, plus an fp32 copy of every parameter (the
    model's host-side initialisation, src/model/whole.c, which may still be resident)."""
    return host * (1 + MEMLIMIT_MARGIN) + MEMLIMIT_FIXED + 4 * params


def offload_layers(predict, device_cap, host_room, most=32):
    """The most layers L (1..most) of the 8B dims whose host-resident run fits both the device cap
    (device_need) and host_room (host_need), with predict(L) -> (device peak, host bytes, parameters)
    from the memory model; both grow with L, so the first L that does not fit ends the search.
    Returns (L, its prediction, the first L that does not fit and its prediction or None), or None
    when not even one layer fits."""
    best = None
    heads = OFFLOAD_8B_DIMS["heads"]
    for n in range(1, most + 1):
        peak, host, params = predict(n)
        if device_need(peak, 2048, heads, OFFLOAD_8B_DIMS["hidden"] // heads) > device_cap or host_need(host, params) > host_room:
            return (best[0], best[1], n, (peak, host, params)) if best else None
        best = (n, (peak, host, params))
    return (best[0], best[1], None, None)


def offload_figures(log_text, metrics_text):
    """An offload run's figures: train_figures' (the simulator, the allocator's memory table, the
    GPU's own figure), tokens/s from the metrics file's median step (b = 1, s = 2048), the host
    side the start-up check predicted (its "host: X MiB" line, MiB) and the process's resident
    high-water from the metrics file's memory line (MiB), and a start-up refusal's need, need with
    margin and limit (MiB)."""
    fig = train_figures(log_text)
    step = step_figures(metrics_text)
    if step["step_s"]:
        fig["tok_s"] = 2048 / step["step_s"]
    fig["timed"] = step["timed"]
    m = re.search(r"^\s+host: ([0-9.]+) MiB \(optimizer state ([0-9.]+) MiB, pinned staging ([0-9.]+) MiB\)", log_text, re.M)
    if m:
        fig["host_pred"] = float(m.group(1))
    for line in metrics_text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        for x in r.get("memory", []) if isinstance(r.get("memory"), list) else []:
            fig["resident"] = x["resident_bytes"] / 2**20
    m = re.search(r"needs about ([0-9.]+) MiB .*, ([0-9.]+) MiB with the [0-9]+% \+ [0-9]+ MiB margin, "
                  r"more than --device-memory \(([0-9.]+) MiB\)", log_text)
    if m:
        fig["refused"] = tuple(float(m.group(i)) for i in (1, 2, 3))
    return fig


def judge_offload(expect, rc, fig, capped, predicted_need=None):
    """(result, note) of one offload run. expect "refused": exit 2 with the start-up check's line
    naming --device-memory, anything else fails (the memory model says it does not fit). expect
    "run": exit 0, the train stage's bars on the device (simulator 15%, allocator and GPU's own
    figure 10%), a median step from the metrics file, and under a cap the GPU's own figure within
    it; the host's resident high-water is reported beside the predicted host side, not held to a
    bar (it counts the program and its host-side initialisation, which the host column does not,
    and whether pinned pages count in it is the driver's affair)."""
    if expect == "refused":
        if rc == 2 and "refused" in fig:
            need, with_margin, limit = fig["refused"]
            note = (f"refused as predicted: needs {need / 1024:.1f} GiB, {with_margin / 1024:.1f} with the margin, "
                    f"over {limit / 1024:.1f}")
            if predicted_need:
                note += f" (the stage predicted {predicted_need / 2**30:.1f} GiB with the margin)"
            return "pass", note
        return (f"FAIL (exit {rc}, want 2 with the memory line: the memory model says it does not fit)"
                if rc is not None else "FAIL (timeout, want a refusal at start-up)"), ""
    if rc != 0:
        return (f"FAIL ({rc})" if rc is not None else "TIMEOUT"), ""
    bad, note = judge_train(fig)
    notes = [note]  # its tokens/s: the metrics file's median step (offload_figures)
    if "step_s" in fig and fig.get("timed", 0) < 2:
        bad.append(f"{fig.get('timed', 0)} timed steps in the metrics file")
    if capped and "dev" in fig:
        most = max(peak for _, peak, _ in fig["dev"])
        if most > OFFLOAD_CAP_BYTES / 2**20:
            bad.append(f"the GPU's own figure {most / 1024:.1f} GiB over the {OFFLOAD_CAP} cap")
    if "host_pred" in fig or "resident" in fig:
        notes.append(f"host: resident high-water {fig.get('resident', float('nan')) / 1024:.1f} GiB, "
                     f"predicted host side {fig.get('host_pred', 0) / 1024:.1f} GiB")
    return ("FAIL (bars: " + ", ".join(bad) + ")" if bad else "pass"), "; ".join(n for n in notes if n)


def offload_table(rows):
    """One markdown table of the offload stage's runs: what was expected, what happened, and the
    figures beside their predictions (GiB)."""
    out = ["| run | expected | result | tokens/s | allocator peak / predicted | GPU's figure / predicted | "
           "host resident / predicted host side |", "|---|---|---|---:|---|---|---|"]
    g = lambda x: f"{x / 1024:.1f}"  # noqa: E731  MiB -> GiB
    for r in rows:
        f = r.get("fig", {})
        tok = f"{f['tok_s']:.0f}" if "tok_s" in f and r["expect"] == "run" else "-"
        mem = "; ".join(f"{g(pk)} / {g(pr)}" for _, pk, pr in f.get("mem", [])) or "-"
        dev = "; ".join(f"{g(pk)} / {g(pr)}" for _, pk, pr in f.get("dev", [])) or "-"
        host = (f"{g(f['resident'])} / {g(f.get('host_pred', 0))}" if "resident" in f else "-")
        if r["expect"] == "refused" and "refused" in f:
            mem = f"refused: needs {g(f['refused'][1])} with the margin > {g(f['refused'][2])}"
        out.append(f"| {r['name']} | {r['expect']} | {r['result']} | {tok} | {mem} | {dev} | {host} |")
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


def summary(info, step_table=None, offload=None):
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
    if offload:
        print(f"\nOptimizer state in host memory (issue 41), one rank, s = 2048, b = 1, GiB; capped runs under "
              f"--device-memory {OFFLOAD_CAP}:")
        print("\n".join(offload))


def host_memtotal():
    """The host's MemTotal (bytes) from /proc/meminfo; 0 when it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def offload_stage(weipipe, kit, data, logs, deadline, env):
    """The offload stage's runs (see the module's header); its rows for offload_table."""
    config = lambda c: os.path.join(kit, "share", c)  # noqa: E731

    def predict(cfg, flags):
        """The memory model's (device peak, host bytes per host) for a run, by the kit's simulate."""
        argv = [weipipe, "simulate", "--config", config(cfg)] + OFFLOAD_RUN[:10] + flags + [
            "--precision", "mixed", "--device-tflops", "100", "--format", "json"]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return simulate_memory(p.stdout) if p.returncode == 0 else None

    rows = []
    # the 1B shape: its device-resident run under the cap is expected to run only where the memory
    # model says it fits; where it does not, the same run without the cap gives the tokens/s the
    # host-resident run is compared with
    t = time.monotonic()
    sh1 = step_flops.SHAPES["llama32-1b"]
    dev1 = predict(OFFLOAD_1B, ["--optimizer-memory", "device"])
    host1 = predict(OFFLOAD_1B, ["--optimizer-memory", "host"])
    if dev1 is None or host1 is None:
        ROWS.append(("offload", "memory model", "FAIL", time.monotonic() - t, "weipipe simulate gave no 1f1b row at 1B"))
        return rows
    need1 = device_need(dev1[0], 2048, sh1["heads"], sh1["hidden"] // sh1["heads"])
    hneed1 = device_need(host1[0], 2048, sh1["heads"], sh1["hidden"] // sh1["heads"])
    plan = [("1B s2048 host 24G", OFFLOAD_1B, ["--optimizer-memory", "host", "--device-memory", OFFLOAD_CAP],
             "run" if hneed1 <= OFFLOAD_CAP_BYTES else "refused", hneed1, True),
            ("1B s2048 device 24G", OFFLOAD_1B, ["--optimizer-memory", "device", "--device-memory", OFFLOAD_CAP],
             "run" if need1 <= OFFLOAD_CAP_BYTES else "refused", need1, True)]
    if need1 > OFFLOAD_CAP_BYTES:
        plan.append(("1B s2048 device uncapped", OFFLOAD_1B, ["--optimizer-memory", "device"], "run", need1, False))
    # Llama-3.1-8B's dims: as many layers as the cap and this host hold host-resident, by the memory
    # model (one rank owning the whole model keeps 16 bytes a parameter of state and, one chunk, two
    # fp32 staging buffers of it on the host; the device its bf16 weights and gradients and an fp32
    # gradient window: the cap, not the host, is what binds first on the kit machine)
    mem = host_memtotal()
    room = OFFLOAD_HOST_SHARE * mem
    d8 = OFFLOAD_8B_DIMS
    cache = {}

    def predict8(n):
        if n not in cache:
            got = predict(OFFLOAD_8B, ["--num-layers", str(n), "--optimizer-memory", "host"])
            params = llama_params(d8["hidden"], n, d8["heads"], d8["kv_heads"], d8["ffn"], d8["vocab"], d8["tied"])
            cache[n] = (got[0], got[1], params) if got else (float("inf"), float("inf"), params)
        return cache[n]

    found = offload_layers(predict8, OFFLOAD_CAP_BYTES, room) if mem else None
    if not found:
        ROWS.append(("offload", "8B-dims layer count", "FAIL", time.monotonic() - t,
                     f"no layer count fits {OFFLOAD_CAP} and {room / 2**30:.0f} GiB of host "
                     f"(MemTotal {mem / 2**30:.0f} GiB)"))
    else:
        n, (peak, host, params), n_out, over = found
        hd = d8["hidden"] // d8["heads"]
        why = (f"{n} layers ({params / 1e9:.2f} B parameters): the most whose host-resident run fits --device-memory "
               f"{OFFLOAD_CAP} (needs {device_need(peak, 2048, d8['heads'], hd) / 2**30:.1f} GiB with train's margin) and "
               f"{OFFLOAD_HOST_SHARE:.0%} of this host's {mem / 2**30:.0f} GiB (host side {host / 2**30:.1f} GiB, "
               f"{host_need(host, params) / 2**30:.1f} with the margin and an fp32 copy of the model)")
        if n_out:
            why += (f"; {n_out} layers need {device_need(over[0], 2048, d8['heads'], hd) / 2**30:.1f} GiB of device and "
                    f"{host_need(over[1], over[2]) / 2**30:.1f} GiB of host")
        print(f"offload: Llama-3.1-8B's dims at {why}", flush=True)
        ROWS.append(("offload", "8B-dims layer count (memory model)", "pass", time.monotonic() - t, why))
        dev8 = predict(OFFLOAD_8B, ["--num-layers", str(n), "--optimizer-memory", "device"])
        need8 = device_need(dev8[0], 2048, d8["heads"], hd) if dev8 else None
        plan += [(f"8B-dims {n} layers host 24G", OFFLOAD_8B, ["--num-layers", str(n), "--optimizer-memory", "host",
                                                                "--device-memory", OFFLOAD_CAP], "run",
                  device_need(peak, 2048, d8["heads"], hd), True),
                 # the refusal is the expected result whatever the model says: one rank's 16 bytes a
                 # parameter more than the host-resident run, which the cap just holds
                 (f"8B-dims {n} layers device 24G", OFFLOAD_8B, ["--num-layers", str(n), "--optimizer-memory", "device",
                                                                  "--device-memory", OFFLOAD_CAP], "refused", need8, True)]
    for name, cfg, flags, expect, need, capped in plan:
        tag = name.replace(" ", "_")
        metrics = os.path.join(logs, f"offload-{tag}.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        argv = [weipipe, "train", "--backend", "cuda", "--config", config(cfg), "--data", data] + OFFLOAD_RUN + flags + [
            "--metrics", metrics]
        rc = run("offload", name, argv, logs, deadline, CAPS["offload"], env)
        row = {"name": name, "expect": expect, "result": ROWS[-1][2], "fig": {}, "index": len(ROWS) - 1}
        rows.append(row)
        if ROWS[-1][2] == NOT_RUN_NO_TIME:
            continue
        with open(os.path.join(logs, f"offload-{tag}.log"), errors="replace") as f:
            text = f.read()
        row["fig"] = offload_figures(text, open(metrics).read() if os.path.exists(metrics) else "")
        result, note = judge_offload(expect, rc, row["fig"], capped, need)
        stage, nm, _, dt, last = ROWS[-1]
        ROWS[-1] = (stage, nm, result, dt, note or last)
        row["result"] = result
    # host-resident against device-resident at 1B: the ratio of their tokens/s, in the host run's row
    by = {r["name"]: r for r in rows}
    host_run = by.get("1B s2048 host 24G", {}).get("fig", {})
    dev_run = next((by[k]["fig"] for k in ("1B s2048 device 24G", "1B s2048 device uncapped")
                    if k in by and by[k]["expect"] == "run" and "tok_s" in by[k]["fig"]), {})
    if "tok_s" in host_run and "tok_s" in dev_run:
        vs = f"{host_run['tok_s'] / dev_run['tok_s']:.2f}x device-resident's {dev_run['tok_s']:.0f} tok/s"
        print(f"offload: 1B host-resident {host_run['tok_s']:.0f} tok/s, {vs}", flush=True)
        stage, nm, result, dt, note = ROWS[by["1B s2048 host 24G"]["index"]]
        ROWS[by["1B s2048 host 24G"]["index"]] = (stage, nm, result, dt, f"{note}; {vs}")
    return rows


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
                    with open(log_path(a.logs, "step", name), errors="replace") as f:
                        bad, _ = judge_train(train_figures(f.read()))  # the simulator and memory bars
                    fig = step_figures(open(metrics).read() if os.path.exists(metrics) else "")
                    if fig["step_s"] is None:
                        bad.append(f"{fig['timed']} timed steps in the metrics file ({fig['skipped']} skipped)")
                    else:
                        row["step_s"], row["tok_s"] = fig["step_s"], batch * seq / fig["step_s"]
                        row["mfu"], row["mfu_full"] = step_flops.mfu(shape, seq, row["tok_s"], peak)
                    row["mem"], row["bad"], row["launch"] = fig["mem"], bad, fig["launch"]
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
        if row.get("launch") is not None:
            note += f"; launch {row['launch']:.2f} (host issue / device busy)"
        if row["mem"]:
            note += "; device peak / predicted " + ", ".join(f"{pk / pr:.2f}" if pr > 0 else "-" for _, pk, pr in row["mem"])
        row["result"] = "FAIL (bars: " + ", ".join(bad) + ")" if bad else "pass"
        ROWS[row["index"]] = (stage, nm, row["result"], dt, note)
    if "train" in stages:
        box("train")
        for name, flags in TRAIN_RUNS:
            if a.train_runs == "default" and name not in DEFAULT_TRAIN_RUNS:
                continue
            judged_run("train", name, [weipipe, "train", "--backend", "cuda", "--data", data] + TRAIN_MODEL + flags, a.logs,
                       a.deadline, CAPS["train"], env)
    if "sanitizer" in stages:
        box("sanitizer")
        cs = compute_sanitizer()
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
            judged_run("long", name, [weipipe, "train", "--backend", "cuda", "--data", shard] + LONG_MODEL + flags, a.logs,
                       a.deadline, CAPS["long"], env)
    if "paper" in stages:
        box("paper")
        figs, idx = {}, {}
        for strat in PAPER_RUNS:
            name = f"4 ranks tcp 2.5Gbit {strat}"
            argv = [weipipe, "train", "--backend", "cuda", "--data", data, "--strategy", strat] + sub(
                [x.replace("configs/", "@KIT@/share/configs/") for x in PAPER_MODEL])
            rc, text, fig = judged_run("paper", name, argv, a.logs, a.deadline, CAPS["paper"], env)
            idx[strat] = len(ROWS) - 1
            if rc == 0:
                figs[strat] = dict(fig, auto=auto_line(text)) if strat == "auto" else fig
        for strat, note in paper_notes(figs).items():
            stage, nm, result, dt, _ = ROWS[idx[strat]]
            ROWS[idx[strat]] = (stage, nm, result, dt, note)
    offload_rows = []
    if "offload" in stages:
        box("offload")
        offload_rows = offload_stage(weipipe, kit, data, a.logs, a.deadline, env)
    if "graphs" in stages:
        box("graphs")
        graphs_stage(weipipe, kit, data, a.logs, a.deadline, env)
    tiny = os.path.join(kit, "share", "configs", "tiny.ini")
    if "sanitizers" in stages:
        box("sanitizers")
        cs = compute_sanitizer()
        if not cs:
            ROWS.append(("sanitizers", "-", "FAIL (compute-sanitizer not found)", 0.0, ""))
        else:
            for tool in ("racecheck", "synccheck"):
                if "gpu/model" in tests:
                    t = tests["gpu/model"]
                    run("sanitizers", f"{tool} gpu/model", [cs, "--tool", tool, "--error-exitcode", "3"] + sub(t["argv"]),
                        a.logs, a.deadline, CAPS["sanitizers"], {**tenv(t), "WP_GPU_TEST_QUICK": "1"}, cwd=kit)
            for tool in ("memcheck", "racecheck", "synccheck"):
                run("sanitizers", f"{tool} 2-rank ring", [cs, "--tool", tool, "--error-exitcode", "3", weipipe, "train",
                                                          "--backend", "cuda", "--config", tiny, "--data", data] + SANITIZER_RING,
                    a.logs, a.deadline, CAPS["sanitizers"], env)
    if "bf16" in stages:
        box("bf16")
        texts = {}
        for backend in ("cuda", "cpu"):
            metrics = os.path.join(a.logs, f"bf16-{backend}.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            rc = run("bf16", f"{BF16_STEPS} steps {backend}", [weipipe, "train", "--backend", backend, "--config", tiny, "--data",
                                                             data, "--precision", "bf16", "--steps", str(BF16_STEPS),
                                                             "--metrics", metrics, "--threads", "2"],
                     a.logs, a.deadline, CAPS["bf16"], env)
            if rc == 0 and os.path.exists(metrics):
                texts[backend] = open(metrics).read()
        if len(texts) == 2:
            bad, note = bf16_verdict(texts["cuda"], texts["cpu"])
            stage, nm, result, dt, _ = ROWS[-1]
            ROWS[-1] = (stage, nm, f"FAIL ({'; '.join(bad)})" if bad else result, dt, note)
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
        log = log_path(a.logs, stage, name)
        if os.path.exists(log) and (not result.startswith("pass") or stage in ("train", "step", "torchstep", "long", "paper",
                                                                                 "offload", "graphs", "bench", "torch")):
            with open(log, errors="replace") as f:
                lines = f.readlines()
            keep = 9 if stage in ("train", "step", "long", "paper", "offload") and result.startswith("pass") else 40  # a run's summary table
            print(f"\n---- {stage} {name}: {result} (the last {min(len(lines), keep)} lines of {log})")
            sys.stdout.write("".join(lines[-keep:]))
    summary(info, whole_step_table(step_rows, torch_rows) if step_rows or torch_rows else None,
            offload_table(offload_rows) if offload_rows else None)
    not_run = [r for r in ROWS if r[2] == NOT_RUN_NO_TIME]
    failed = [r for r in ROWS if r[2] not in ("pass", "skip", NOT_RUN_NO_TIME)]
    print(f"\ngpu-check: kit commit {commit}: {len(ROWS) - len(failed) - len(not_run)} passed or skipped, "
          f"{len(failed)} failed, {len(not_run)} not run (no time left: a stage that did not run is not a pass)")
    return 1 if failed or not_run else 0


if __name__ == "__main__":
    sys.exit(main())
