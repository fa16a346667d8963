#!/usr/bin/env python3
"""gpu-check's bars (scripts/gpu_check.py: train_figures, judge_train) on logs of real GPU runs
(docs/gpu-runs/, an H200) and on the same logs altered: a run whose simulator step or device
memory is off by more than its bar fails, one inside passes, one that printed no figures fails.
The first GPU runs passed these stages on their exit status alone, with the simulator 2.8x the
measured step and device memory 1.5x the prediction: the bars must say FAIL there.

    gpu_check_bars.py SOURCE_ROOT
"""
import os
import re
import sys

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
under = inside.replace("simulator 0.0850 s", "simulator 0.0600 s")  # -23%: too fast a prediction fails too
bad, _ = g.judge_train(g.train_figures(under))
expect(f"a simulator 23% under fails: {bad}", len(bad) == 1 and bad[0].startswith("simulator -23%"))
# a run that printed no end-of-run figures cannot pass on its exit status
bad, _ = g.judge_train(g.train_figures("step 1/4  loss 10.5  22543 tok/s\n"))
expect(f"no figures printed: fails ({bad})", bad == ["no step time printed", "no memory table printed"])
expect("a stage with no time is not a pass", g.NOT_RUN_NO_TIME not in ("pass", "skip"))

# the long-context stage (issue 39): declared (so a machine without a GPU lists it as not run and
# the summary counts it), the 1B shape at 32K, 64K and 128K with --recompute, causal and masked
expect(f"the long stage is a stage: {g.STAGES}", "long" in g.STAGES and "long" in g.CAPS)
shape = " ".join(g.LONG_MODEL)
expect("the long stage runs the 1B shape with --recompute",
       all(f in shape for f in ("--hidden-size 2048", "--num-layers 16", "--num-attention-heads 32",
                                "--num-query-groups 8", "--ffn-hidden-size 8192", "--vocab-size 128256",
                                "--tie-word-embeddings", "--recompute")))
runs = {(r[1][1], "--doc-mask" in r[1]) for r in g.LONG_RUNS}
expect(f"the long stage's runs: {[r[0] for r in g.LONG_RUNS]}",
       runs == {(str(s), m) for s in (32768, 65536, 131072) for m in (False, True)} and len(g.LONG_RUNS) == 6)
import struct  # noqa: E402
import tempfile  # noqa: E402
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
