#!/usr/bin/env python3
"""gpu-check's bars (scripts/gpu_check.py: train_figures, judge_train) on logs of real GPU runs
(docs/gpu-runs/, an H200) and on the same logs altered: a run whose simulator step or device
memory is off by more than its bar fails, one inside passes, one that printed no figures fails.
The whole-step bars (step_figures, judge_whole_step, whole_step_table): weipipe's step time read
from a real --metrics file, a step below the strongest PyTorch or under 45% MFU at 1B s = 4096
fails, no PyTorch figure is no pass; the default stages' time boxes fit --deadline 330.
The first GPU runs passed these stages on their exit status alone, with the simulator 2.8x the
measured step and device memory 1.5x the prediction: the bars must say FAIL there.

    gpu_check_bars.py SOURCE_ROOT
"""
import json
import os
import re
import statistics
import struct
import sys
import tempfile

root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "scripts"))
import gpu_check as g  # noqa: E402

fail = 0


def expect(what, cond):
    global fail
    print(("ok: " if cond else "FAIL: ") + what)
    fail |= not cond


log = open(os.path.join(root, "docs/gpu-runs/2026-11-27-h200-run4/train-4_ranks_wzb2.log")).read()
fig = g.train_figures(log)
expect(f"figures read from the H200 wzb2 log: {fig}",
       fig.get("step_s") == 0.0776 and fig.get("sim_s") == 0.2149 and fig.get("tok_s") == 212566
       and fig.get("mem") == [(0, 3197.3, 2069.2), (1, 2849.3, 2114.2), (2, 2746.3, 1680.7), (3, 2746.3, 1680.7)])
bad, note = g.judge_train(fig)
print("   note:", note)
expect(f"the real run fails both bars: {bad}", len(bad) == 2 and bad[0].startswith("simulator +177%")
       and bad[1].startswith("memory +63%"))

# the same log with the simulator and every prediction moved inside the bars: passes
inside = log.replace("simulator 0.2149 s", "simulator 0.0850 s")
inside = re.sub(r"(\s)(2069\.2|2114\.2|1680\.7)$", lambda m: m.group(1) + {"2069.2": "3000.0", "2114.2": "2700.0",
                                                                         "1680.7": "2600.0"}[m.group(2)], inside, flags=re.M)
bad, note = g.judge_train(g.train_figures(inside))
expect(f"inside both bars: no failure ({note})", bad == [])
# just outside each bar: fails on that bar alone
sim_out = inside.replace("simulator 0.0850 s", "simulator 0.0900 s")  # +16%
bad, _ = g.judge_train(g.train_figures(sim_out))
expect(f"simulator 16% off fails: {bad}", len(bad) == 1 and bad[0].startswith("simulator +16%"))
mem_out = inside.replace("2746.3     2600.0", "2746.3     2480.0", 1)  # rank 2 +10.7%
bad, _ = g.judge_train(g.train_figures(mem_out))
expect(f"one rank's memory 10.7% off fails: {bad}", len(bad) == 1 and bad[0].startswith("memory +11%"))
# the GPU's own figure (a line per device, weipipe since issue 38 item 4): inside its bar passes, 12% over fails
dev_line = ("device 0 (ranks 0,1,2,3), cudaMemGetInfo total - free: at start-up 520.0 MiB, most at a step's end "
            "%s MiB; predicted 11000.0 MiB = allocations 10400.0 + CUDA context 500.0 + cuDNN and transfer "
            "workspaces 100.0 (the last two estimates, docs/memory.md): +0.0%%\n")
fig = g.train_figures(inside + dev_line % "11500.0")
bad, note = g.judge_train(fig)
expect(f"the device line read and inside its bar: {fig.get('dev')}, {bad}", fig.get("dev") == [(0, 11500.0, 11000.0)] and bad == [])
bad, _ = g.judge_train(g.train_figures(inside + dev_line % "12320.0"))
expect(f"the device 12% over its prediction fails: {bad}", bad == ["device memory +12% (bar 10%)"])
under = inside.replace("simulator 0.0850 s", "simulator 0.0600 s")  # -23%: too fast a prediction fails too
bad, _ = g.judge_train(g.train_figures(under))
expect(f"a simulator 23% under fails: {bad}", len(bad) == 1 and bad[0].startswith("simulator -23%"))
# a run that printed no end-of-run figures cannot pass on its exit status
bad, _ = g.judge_train(g.train_figures("step 1/4  loss 10.5  22543 tok/s\n"))
expect(f"no figures printed: fails ({bad})", bad == ["no step time printed", "no memory table printed"])
expect("a stage with no time is not a pass", g.NOT_RUN_NO_TIME not in ("pass", "skip"))

# ---- the whole-step stages (issue 38): weipipe's step from its --metrics file, judged against PyTorch
# A real metrics file (weipipe train --metrics on the CPU: configs/tiny.ini with 1 layer, s = 2048,
# b = 8, 8 steps; its first line has the flags): the median of the steps after the warm-up.
metrics = open(os.path.join(root, "tests/build/step_metrics_cpu.jsonl")).read()
secs = [json.loads(l)["seconds"] for l in metrics.splitlines() if '"seconds"' in l][g.STEP_WARMUP:]
fig = g.step_figures(metrics)
mem = [m for l in metrics.splitlines() if '"memory"' in l for m in json.loads(l)["memory"]]
expect(f"step_figures: median of {len(secs)} steps after {g.STEP_WARMUP}, memory of {len(mem)} rank(s): {fig}",
       fig["timed"] == len(secs) >= 3 and fig["step_s"] == statistics.median(secs) and len(mem) == 1
       and fig["mem"] == [(0, mem[0]["peak_bytes"] / 2**20, mem[0]["predicted_bytes"] / 2**20)])
expect("a metrics file without steps has no step time", g.step_figures('{"run": {}}\n')["step_s"] is None)
lines = [json.loads(l) for l in metrics.splitlines()]
for r in lines:
    if r.get("step") == 5:
        r["skipped"] = True
fig = g.step_figures("\n".join(json.dumps(r) for r in lines))
kept = [x for i, x in enumerate(secs) if i != 5 - 1 - g.STEP_WARMUP]
expect(f"a skipped step (no AdamW) is left out of the median: {fig}",
       fig["skipped"] == 1 and fig["timed"] == len(secs) - 1 and fig["step_s"] == statistics.median(kept))

torch_rows = [
    {"model": "llama32-1b", "variant": "bf16-cudnn-compiled", "seq": 4096, "batch": 4, "step_ms": 330.0,
     "tokens_per_s": 49648.0, "mfu": 0.42, "mfu_full": 0.45, "max_allocated_gib": 40.1, "max_reserved_gib": 44.0},
    {"model": "llama32-1b", "variant": "fp32-autocast-flash", "seq": 4096, "batch": 4, "step_ms": 500.0,
     "tokens_per_s": 32768.0, "mfu": 0.28, "mfu_full": 0.30, "max_allocated_gib": 60.0, "max_reserved_gib": 66.0},
    {"model": "llama32-1b", "variant": "bf16-cudnn-eager", "seq": 4096, "error": "out of memory at b = 1"},
    {"model": "llama32-1b", "variant": "bf16-cudnn-compiled", "seq": 8192, "batch": 2, "step_ms": 100.0,
     "tokens_per_s": 163840.0, "mfu": 0.9, "mfu_full": 0.95, "max_allocated_gib": 40.0, "max_reserved_gib": 44.0}]
shape = g.step_flops.SHAPES["llama32-1b"]


def wp(tok_s):
    m, mf = g.step_flops.mfu(shape, 4096, tok_s, 989.0)
    return {"tok_s": tok_s, "mfu": m, "mfu_full": mf}


def mfu_tok(x):  # tokens/s at MFU x, 1B s = 4096, 989 TFLOP/s
    return x * 989e12 / g.step_flops.flops_per_token(shape, 4096)


bad, best = g.judge_whole_step(wp(49648.0 * 1.01), torch_rows, "llama32-1b", 4096)
expect(f"the strongest PyTorch at its shape is the fastest row without an error: {best['variant'] if best else None}",
       best is torch_rows[0])
fast = max(49648.0 * 1.01, mfu_tok(0.4501))
bad, _ = g.judge_whole_step(wp(fast), torch_rows, "llama32-1b", 4096)
expect(f"above the strongest PyTorch and at 45.01% MFU: passes ({bad})", bad == [])
bad, _ = g.judge_whole_step(wp(49648.0 * 0.99), torch_rows, "llama32-1b", 4096)
expect(f"0.99x the strongest PyTorch fails: {bad}", any(b.startswith("0.99x the strongest PyTorch") for b in bad))
slow_mfu = mfu_tok(0.449)
bad, _ = g.judge_whole_step(wp(slow_mfu), [dict(torch_rows[0], tokens_per_s=slow_mfu * 0.5)], "llama32-1b", 4096)
expect(f"2x PyTorch but 44.9% MFU at 1B s = 4096 fails on MFU alone: {bad}", bad == ["MFU 44.9% (bar 45%)"])
bad, _ = g.judge_whole_step({"tok_s": 1000.0, "mfu": 0.01, "mfu_full": 0.01},
                            [{"model": "smollm2-135m", "variant": "x", "seq": 2048, "tokens_per_s": 999.0}], "smollm2-135m", 2048)
expect(f"the MFU bar holds at its shape only (SmolLM2 s = 2048 at 1% MFU, 1.001x PyTorch: {bad})", bad == [])
bad, _ = g.judge_whole_step(wp(1e9), [], "llama32-1b", 4096)
expect(f"no PyTorch figure is no pass: {bad}", bad == ["no PyTorch figure to compare"])
bad, _ = g.judge_whole_step(wp(1e9), torch_rows[2:3], "llama32-1b", 4096)
expect(f"a PyTorch row that failed is no figure: {bad}", bad == ["no PyTorch figure to compare"])

step_rows = [{"model": "llama32-1b", "seq": 4096, "precision": "bf16", "batch": 4, "step_s": 0.25, "tok_s": 65536.0,
              "mfu": 0.55, "mfu_full": 0.6, "mem": [(0, 40960.0, 38912.0)], "result": "pass"},
             {"model": "llama32-1b", "seq": 4096, "precision": "mixed", "batch": 4, "tok_s": None, "mem": [],
              "result": "TIMEOUT (75 s)"}]
table = g.whole_step_table(step_rows, torch_rows)
print("\n".join("   " + l for l in table))
expect("the table: PyTorch's strongest marked, weipipe's ratio to it, a failed run's result, memory beside the prediction",
       any("PyTorch bf16-cudnn-compiled (strongest) | 4 | 330.0 | 49648 | 42.0% | 45.0% |" in l for l in table)
       and any("| weipipe bf16 | 4 | 250.0 | 65536 | 55.0% | 60.0% | 40.0 peak / 38.0 predicted | 1.32x |" in l for l in table)
       and any("weipipe mixed" in l and "TIMEOUT (75 s)" in l for l in table)
       and any("PyTorch fp32-autocast-flash | 4 | 500.0 | 32768" in l and "| 0.66x |" in l for l in table)
       and any("bf16-cudnn-eager" in l and "FAILED: out of memory" in l for l in table))

S = g.step_flops.SHAPES
expect("--step-seq: each shape at its own lengths, an unlisted length at both",
       g.shape_seqs(S["smollm2-135m"], [2048, 8192]) == [2048] and g.shape_seqs(S["llama32-1b"], [2048, 8192]) == [2048, 8192]
       and g.shape_seqs(S["smollm2-135m"], [1024]) == [1024] and g.shape_seqs(S["llama32-1b"], g.STEP_SEQS) == [4096])

# the default plan fits one call of --deadline 330: every default stage's box, the summary's reserve and
# 5 s for unpacking the kit and nvidia-smi
plan = sum(g.PLAN[s] for s in g.DEFAULT_STAGES if s not in ("libs", "gpu")) + g.SUMMARY_RESERVE + 5
expect(f"the default stages' time boxes fit --deadline 330: {plan} s", plan <= 330)
expect("the GPU tests first: unit and ring before every measuring stage",
       g.DEFAULT_STAGES[:4] == ["libs", "gpu", "unit", "ring"])

# ---- the long-context stage (issue 39): a stage with a time box, named in --stages (outside the
# default plan: its six runs do not fit --deadline 330); a machine without a GPU lists it as not run
# (gpu/kit), the 1B shape at 32K, 64K and 128K with --recompute, causal and masked
expect(f"the long stage is a stage with a box, not a default one: {g.STAGES}",
       "long" in g.STAGES and "long" in g.PLAN and "long" in g.CAPS and "long" not in g.DEFAULT_STAGES)
shape = " ".join(g.LONG_MODEL)
expect("the long stage runs the 1B shape with --recompute",
       all(f in shape for f in ("--hidden-size 2048", "--num-layers 16", "--num-attention-heads 32",
                                "--num-query-groups 8", "--ffn-hidden-size 8192", "--vocab-size 128256",
                                "--tie-word-embeddings", "--recompute")))
runs = {(r[1][1], "--doc-mask" in r[1]) for r in g.LONG_RUNS}
expect(f"the long stage's runs: {[r[0] for r in g.LONG_RUNS]}",
       runs == {(str(s), m) for s in (32768, 65536, 131072) for m in (False, True)} and len(g.LONG_RUNS) == 6)
with tempfile.TemporaryDirectory() as tmp:
    ids = g.write_long_shard(os.path.join(tmp, "long.bin"))
    raw = open(os.path.join(tmp, "long.bin"), "rb").read()
    head = struct.unpack("<3i", raw[:12])
    docs = ids.count(g.LONG_BOUNDARY)
    expect(f"the long shard: header {head}, {len(ids)} tokens in {docs} documents",
           head == (20240801, 7, len(ids)) and len(raw) == 1024 + 4 * len(ids) and len(ids) >= 2 * 131072 + 1
           and max(ids) == g.LONG_BOUNDARY and 40 <= docs <= 100 and ids[0] == g.LONG_BOUNDARY)
print("PASS" if not fail else "FAILED")
sys.exit(1 if fail else 0)
