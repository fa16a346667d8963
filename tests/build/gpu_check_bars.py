#!/usr/bin/env python3
"""gpu-check's bars (scripts/gpu_check.py: train_figures, judge_train) on logs of real GPU runs
(docs/gpu-runs/, an H200) and on the same logs altered: a run whose simulator step or device
memory is off by more than its bar fails, one inside passes, one that printed no figures fails.
The whole-step bars (step_figures, judge_whole_step, whole_step_table): weipipe's step time read
from a real --metrics file, a step below the strongest PyTorch or under 45% MFU at 1B s = 4096
fails, no PyTorch figure is no pass; the default stages' time boxes fit --deadline 330.
The first GPU runs passed these stages on their exit status alone, with the simulator 2.8x the
measured step and device memory 1.5x the prediction: the bars must say FAIL there.

The offload stage (issue 41): its figures read from a log and a metrics file, a start-up refusal
judged as the expected result and a run as a failure where a refusal is expected, the GPU's own
figure over the 24 GB cap failing; the 8B-dims layer count against a made-up memory model (the
boundary) and, given WEIPIPE, against the build's own `simulate` (its host column 24 bytes per
parameter counted here, the count the largest that fits).

The graphs stage (issue 38) and the bf16 stage (issue 37 item 4): their verdicts on real runs of
the build given as WEIPIPE (on the CPU backend) and on those runs altered.

    gpu_check_bars.py SOURCE_ROOT [WEIPIPE]
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
expect(f"a file without issue_s/device_s has no launch figure: {fig['launch']}", fig["launch"] is None)
# the launch figure: the median of issue_s / device_s over the timed steps (skipped ones and the warm-up left out)
rows = [{"step": i, "seconds": 0.1, "issue_s": 0.01 * i, "device_s": 0.1, "skipped": i == 5} for i in range(1, 9)]
lf = g.step_figures("\n".join(json.dumps(r) for r in rows))["launch"]
want = statistics.median(0.1 * i for i in range(1, 9) if i > g.STEP_WARMUP and i != 5)
expect(f"launch = median issue_s / device_s of the timed steps: {lf} (want {want})", lf is not None and abs(lf - want) < 1e-12)
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

# ---- the paper stage (issue 37 item 3): 4 processes over tcp, every hop paced; its figures read from
# real multi-process logs (weipipe train on the CPU: configs/tiny.ini, 4 ranks over tcp, --ranks-per-node
# 1 --link-bandwidth 2.5Gbit, 8 micro-batches, 3 steps; 1f1b, and --strategy auto, which picked zb-h2
# at micro-batch size 2), whose lines carry the launcher's "[rank R] " prefixes
expect(f"the paper stage is a stage with a box, not a default one",
       "paper" in g.STAGES and "paper" in g.PLAN and "paper" in g.CAPS and "paper" not in g.DEFAULT_STAGES)
flags = " ".join(g.PAPER_MODEL)
expect(f"the paper stage: 4 processes over tcp, every hop paced at a quarter of 10 Gbit/s: {flags}",
       all(f in flags for f in ("--nranks 4", "--transport tcp", "--ranks-per-node 1", "--link-bandwidth 2.5Gbit",
                                "smollm2-135m-shape.ini")) and
       set(g.PAPER_RUNS) == {"weipipe-interleave", "wzb2", "1f1b", "zb-v", "fsdp", "auto"})
raw = {k: open(os.path.join(root, f"tests/build/paper_{k}_tcp.log")).read() for k in ("1f1b", "auto")}
expect("the raw tcp logs' memory table is not readable with its prefixes (why strip_ranks exists)",
       "mem" not in g.train_figures(raw["1f1b"]))
figs = {k: g.train_figures(g.strip_ranks(t)) for k, t in raw.items()}
figs["auto"]["auto"] = g.auto_line(g.strip_ranks(raw["auto"]))
expect(f"stripped: step, simulator and 4 ranks' memory read: {figs['1f1b']}",
       figs["1f1b"]["step_s"] == 0.0162 and figs["1f1b"]["sim_s"] == 0.006948 and len(figs["1f1b"]["mem"]) == 4)
expect(f"auto's end-of-run line: {figs['auto']['auto']}", figs["auto"]["auto"] == ("zb-h2", 77228.0, 34038.0))
expect("no auto line: None", g.auto_line(g.strip_ranks(raw["1f1b"])) is None)
tokens = 8 * 2 * 32  # the logs' step: 8 micro-batches of 2 sequences of 32
notes = g.paper_notes(figs, tokens)
want_1f1b = tokens / 0.0162
expect(f"1f1b's note: {notes['1f1b']}", notes["1f1b"].startswith(f"{want_1f1b:.0f} tok/s, simulator {tokens / 0.006948:.0f} tok/s")
       and notes["1f1b"].endswith("1.00x 1f1b"))
expect(f"auto's note: its own measured tokens/s (its micro-batch differs), over 1f1b's: {notes['auto']}",
       notes["auto"].startswith("picked zb-h2; 34038 tok/s, simulator 77228 tok/s (-56%)")
       and notes["auto"].endswith(f"{34038 / want_1f1b:.2f}x 1f1b"))
expect("a run without figures says so", g.paper_notes({"fsdp": {}}) == {"fsdp": "no step time printed"})
# judged_run, as the train, long and paper stages call it: a run that printed a 4-process log (here
# cat of the 1f1b one) is judged on its figures, its row replaced; one that failed keeps run()'s row
with tempfile.TemporaryDirectory() as tmp:
    rows0 = len(g.ROWS)
    rc, text, fig = g.judged_run("paper", "cat 1f1b", ["cat", os.path.join(root, "tests/build/paper_1f1b_tcp.log")], tmp,
                                 1e6, 60)
    row = g.ROWS[-1]
    expect(f"judged_run: the log's figures, prefixes stripped, its row judged: {row}",
           rc == 0 and "[rank" not in text and fig.get("step_s") == 0.0162 and len(fig.get("mem", [])) == 4
           and len(g.ROWS) == rows0 + 1 and row[2].startswith("FAIL (bars: simulator -57%"))
    rc, text, fig = g.judged_run("paper", "false", ["false"], tmp, 1e6, 60)
    expect(f"judged_run of a failed run: run()'s row, no figures: {g.ROWS[-1]}",
           rc == 1 and fig == {} and g.ROWS[-1][2] == "FAIL (1)")
    del g.ROWS[rows0:]

# ---- the offload stage (issue 41 item 5): named in --stages, after the default plan
expect(f"the offload stage is a stage with a box, not a default one, after the default plan: {g.STAGES}",
       "offload" in g.STAGES and "offload" in g.PLAN and "offload" in g.CAPS and "offload" not in g.DEFAULT_STAGES
       and g.STAGES.index("offload") > max(g.STAGES.index(x) for x in g.DEFAULT_STAGES))
# Llama-3.1-8B has 8,030,261,248 parameters (its model card's 8.03 B; h 4096, 32 layers, untied)
d8 = g.OFFLOAD_8B_DIMS
expect("the parameter count of Llama-3.1-8B's dims at 32 layers is 8,030,261,248",
       g.llama_params(d8["hidden"], 32, d8["heads"], d8["kv_heads"], d8["ffn"], d8["vocab"], d8["tied"]) == 8030261248)
expect("and Llama-3.2-1B's (tied) 1,235,814,400",
       g.llama_params(2048, 16, 32, 8, 8192, 128256, True) == 1235814400)
sim_json = json.dumps({"nranks": 1, "strategies": [
    {"strategy": "1f1b", "step_s": 1.0, "peak_bytes_per_rank": 123, "host_bytes_per_host": 456, "fits": True},
    {"strategy": "gpipe", "step_s": 1.0, "peak_bytes_per_rank": 7, "host_bytes_per_host": 8}]})
expect("simulate_memory reads the 1f1b row's device peak and host need",
       g.simulate_memory(sim_json) == (123, 456) and g.simulate_memory("weipipe: error") is None
       and g.simulate_memory(json.dumps({"strategies": [{"strategy": "1f1b", "error": "x"}]})) is None)
GiB = 2**30
# a made-up model: the device 10 GiB + 2 GiB a layer, the host 24 bytes a parameter of 0.25e9 a layer
fake = lambda n: (10 * GiB + 2 * GiB * n, 24 * 0.25e9 * n, 0.25e9 * n)  # noqa: E731
got = g.offload_layers(fake, g.OFFLOAD_CAP_BYTES, 1e15)
want = max(n for n in range(1, 33) if g.device_need(fake(n)[0], 2048, 32, 128) <= g.OFFLOAD_CAP_BYTES)
expect(f"the layer count is the largest whose device need with train's margin fits the cap: {got and got[0]}, want {want}",
       got and got[0] == want and got[2] == want + 1
       and g.device_need(fake(want + 1)[0], 2048, 32, 128) > g.OFFLOAD_CAP_BYTES)
room = g.host_need(*fake(3)[1:]) + 1  # the host binds at 3 layers
got = g.offload_layers(fake, g.OFFLOAD_CAP_BYTES, room)
expect(f"where the host binds first it decides: {got and got[0]}, want 3", got and got[0] == 3 and got[2] == 4)
expect("a model of which not one layer fits: none", g.offload_layers(fake, 1 * GiB, 1e15) is None)
expect("the host need counts train's margin and an fp32 copy of the model",
       g.host_need(100 * GiB, 1e9) == 100 * GiB * 1.1 + 64 * 2**20 + 4e9)

# an offload run's figures: the H200 log inside its bars, with the host line train prints at start-up,
# the GPU's own figure and a metrics file (the CPU one: its steps and resident high-water)
host_line = "predicted peak memory per rank (docs/memory.md):\n  rank 0: 11000.0 MiB (...)\n" \
            "    host: 49000.0 MiB (optimizer state 32700.0 MiB, pinned staging 16300.0 MiB)\n"
run_log = host_line + inside + dev_line % "11500.0"
fig = g.offload_figures(run_log, metrics)
resident = [m["resident_bytes"] for l in metrics.splitlines() if '"memory"' in l for m in json.loads(l)["memory"]][-1]
expect(f"offload_figures: tokens/s of the median step, the host prediction and the resident high-water: "
       f"{ {k: fig.get(k) for k in ('tok_s', 'host_pred', 'resident')} }",
       fig.get("tok_s") == 2048 / statistics.median(secs) and fig.get("host_pred") == 49000.0
       and fig.get("resident") == resident / 2**20 and "refused" not in fig)
result, note = g.judge_offload("run", 0, fig, True)
print("   note:", note)
expect(f"a capped run inside the bars and the cap passes: {result}", result == "pass" and "host: resident high-water" in note)
over = g.offload_figures(host_line + inside + dev_line.replace("predicted 11000.0", "predicted 25000.0") % "25600.0", metrics)
result, _ = g.judge_offload("run", 0, over, True)
expect(f"the GPU's own figure over the 24 GB cap fails, inside its 10% bar or not: {result}",
       result == "FAIL (bars: the GPU's own figure 25.0 GiB over the 24G cap)")
expect("the same run uncapped passes", g.judge_offload("run", 0, over, False)[0] == "pass")
expect("a run that was refused where it should run fails", g.judge_offload("run", 2, fig, True)[0] == "FAIL (2)")
refusal = ("weipipe: error: rank 0 needs about 61234.5 MiB (optimizer 34000.0 MiB, weights 8500.0 MiB, gradients "
           "8500.0 MiB, CUDA context 500 MiB and cuDNN workspace 32.0 MiB (estimates)), 67422.0 MiB with the 10% + 64 MiB "
           "margin, more than --device-memory (24576.0 MiB)\n")
rf = g.offload_figures(refusal, "")
expect(f"the start-up refusal's need, need with the margin and limit: {rf.get('refused')}",
       rf.get("refused") == (61234.5, 67422.0, 24576.0))
result, note = g.judge_offload("refused", 2, rf, True, 67000 * 2**20)
expect(f"the expected refusal passes: {result}: {note}", result == "pass" and "refused as predicted" in note)
expect("a device-resident run that ran where a refusal is expected fails",
       g.judge_offload("refused", 0, fig, True)[0].startswith("FAIL (exit 0, want 2"))
expect("exit 2 without the memory line (bad input elsewhere) is no refusal",
       g.judge_offload("refused", 2, g.offload_figures("weipipe: error: --data: no such file\n", ""), True)[0].startswith("FAIL"))
table = g.offload_table([{"name": "1B s2048 host 24G", "expect": "run", "result": "pass", "fig": fig},
                         {"name": "8B-dims 5 layers device 24G", "expect": "refused", "result": "pass", "fig": rf}])
print("\n".join("   " + l for l in table))
expect("the offload table: tokens/s, the device's figures and the host's beside their predictions, the refusal's need",
       any(f"| 1B s2048 host 24G | run | pass | {fig['tok_s']:.0f} | 3.1 / 2.9" in l and "| 11.2 / 10.7 |" in l
           and f"| {resident / 2**30:.1f} / 47.9 |" in l for l in table)
       and any("| refused | pass | - | refused: needs 65.8 with the margin > 24.0 |" in l for l in table))

# the layer count on the build's own memory model (schedule/memory.h through `weipipe simulate`), at the
# kit machine's 128 GiB: the host column is 24 bytes a parameter counted here (16 of state, two fp32
# staging buffers of the one chunk), and the count is the largest that fits
if len(sys.argv) > 2:
    import subprocess

    def predict(n, om="host"):
        argv = [sys.argv[2], "simulate", "--config", os.path.join(root, g.OFFLOAD_8B), *g.OFFLOAD_RUN[:10], "--num-layers",
                str(n), "--optimizer-memory", om, "--precision", "mixed", "--device-tflops", "100", "--format", "json"]
        got = g.simulate_memory(subprocess.run(argv, capture_output=True, text=True).stdout)
        return got[0], got[1], g.llama_params(d8["hidden"], n, d8["heads"], d8["kv_heads"], d8["ffn"], d8["vocab"], False)

    for n in (1, 2, 5):
        peak, host, params = predict(n)
        expect(f"memory model, 8B dims at {n} layers: host side {host} = 24 x {params} parameters", host == 24 * params)
    got = g.offload_layers(predict, g.OFFLOAD_CAP_BYTES, g.OFFLOAD_HOST_SHARE * 128 * GiB)
    hd = d8["hidden"] // d8["heads"]
    expect(f"the kit machine's 8B-dims count: {got and got[0]} layers, device "
           f"{got and g.device_need(got[1][0], 2048, 32, hd) / GiB:.2f} GiB, {got and got[2]} layers "
           f"{got and g.device_need(got[3][0], 2048, 32, hd) / GiB:.2f} GiB",
           got and g.device_need(got[1][0], 2048, 32, hd) <= g.OFFLOAD_CAP_BYTES
           and g.host_need(got[1][1], got[1][2]) <= g.OFFLOAD_HOST_SHARE * 128 * GiB
           and (g.device_need(got[3][0], 2048, 32, hd) > g.OFFLOAD_CAP_BYTES
                or g.host_need(got[3][1], got[3][2]) > g.OFFLOAD_HOST_SHARE * 128 * GiB))
    dev = predict(got[0], "device") if got else None
    expect(f"device-resident at that count the memory model says refused: {dev and g.device_need(dev[0], 2048, 32, hd) / GiB:.1f} GiB",
           dev and g.device_need(dev[0], 2048, 32, hd) > g.OFFLOAD_CAP_BYTES)
else:
    print("skip: no WEIPIPE argument, the layer count not run on the memory model")

# The graphs stage (issue 38): its verdict on a real pair of runs of this build (the CPU backend
# replays its own record of the calls, and prints the same 'graphs:' line), then on that pair
# altered: a loss off in its last digit, a run that replayed nothing, no 'graphs:' line.
if len(sys.argv) > 2:
    import subprocess
    with tempfile.TemporaryDirectory() as tmp:
        out = {}
        for on in ("false", "true"):
            m = os.path.join(tmp, f"m-{on}.jsonl")
            r = subprocess.run([sys.argv[2], "train", "--config", os.path.join(root, "configs/tiny.ini"), "--data",
                                os.path.join(root, "tests/data/tiny_train.bin"), "--threads", "1", "--steps", "6",
                                "--metrics", m, "--graphs", on], capture_output=True, text=True)
            out[on] = (open(m).read() if os.path.exists(m) else "", r.stdout + r.stderr, r.returncode)
        (mo, _, rco), (mn, logn, rcn) = out["false"], out["true"]
        bad, note = g.graphs_verdict(mo, mn, logn)
        expect(f"graphs verdict on a real CPU pair (exit {rco}, {rcn}): passes: {bad} {note}",
               rco == 0 and rcn == 0 and not bad and "actions replayed" in note and "step " in note)
        losses = g.metrics_losses(mn)
        expect(f"the pair's losses read: {len(losses)} steps", len(losses) == 6)
        last = losses[-1]
        off_by_one = last[:-1] + ("1" if last[-1] != "1" else "2")
        bad, _ = g.graphs_verdict(mo, mn.replace(last, off_by_one), logn)
        expect(f"a loss off in its last digit fails: {bad}", any("losses differ from step 6" in b for b in bad))
        bad, _ = g.graphs_verdict(mo, mn, re.sub(r"^graphs: \d+ of", "graphs: 0 of", logn, flags=re.M))
        expect(f"nothing replayed fails: {bad}", any("nothing replayed" in b for b in bad))
        bad, _ = g.graphs_verdict(mo, mn, "")
        expect(f"no 'graphs:' line fails: {bad}", "no 'graphs:' line" in bad)

# The bf16 stage (issue 37 item 4): its verdict on two real runs of this build (both on the CPU
# here, so equal), then on one altered: a loss 5% off at one step, every loss 2% off (each inside
# the step bar, past the last-10 bar), a run cut short, losses that do not fall.
if len(sys.argv) > 2:
    import subprocess
    with tempfile.TemporaryDirectory() as tmp:
        m = os.path.join(tmp, "bf16.jsonl")
        r = subprocess.run([sys.argv[2], "train", "--config", os.path.join(root, "configs/tiny.ini"), "--data",
                            os.path.join(root, "tests/data/tiny_train.bin"), "--threads", "1", "--precision", "bf16",
                            "--steps", str(g.BF16_STEPS), "--metrics", m], capture_output=True, text=True)
        cpu = open(m).read() if os.path.exists(m) else ""
        bad, note = g.bf16_verdict(cpu, cpu)
        expect(f"bf16 verdict, a real {g.BF16_STEPS}-step CPU run against itself (exit {r.returncode}): passes: {bad} {note}",
               r.returncode == 0 and not bad and "worst step" in note)
        losses = g.metrics_losses(cpu)

        def scaled(text, f):
            out = []
            for line in text.splitlines():
                mm = re.search(r'"loss": ([^,}]*)', line)
                out.append(line.replace(mm.group(0), f'"loss": {f(float(mm.group(1)), len(out)):.17g}') if mm else line)
            return "\n".join(out)

        bad, _ = g.bf16_verdict(scaled(cpu, lambda x, i: x * (1.05 if i == 30 else 1.0)), cpu)
        expect(f"one step's loss 5% off fails: {bad}", any("step" in b and "> 3%" in b for b in bad))
        bad, _ = g.bf16_verdict(scaled(cpu, lambda x, i: x * 1.02), cpu)
        expect(f"every loss 2% off fails the last-10 bar only: {bad}",
               len(bad) == 1 and "last 10 steps" in bad[0])
        short = "\n".join(cpu.splitlines()[:20])
        bad, _ = g.bf16_verdict(short, cpu)
        expect(f"a run cut short fails: {bad}", any("want 50" in b for b in bad))
        flat = scaled(cpu, lambda x, i: float(losses[0]))
        bad, _ = g.bf16_verdict(flat, flat)
        expect(f"losses that do not fall fail: {bad}", any("did not fall" in b for b in bad))
print("PASS" if not fail else "FAILED")
sys.exit(1 if fail else 0)
