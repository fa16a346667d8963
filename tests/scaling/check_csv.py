#!/usr/bin/env python3
"""Checks the CSVs (and PNGs) of a smoke sweep: columns, one row per strategy and point, the
sweep's shape (weak: batch grows with N; strong: fixed), internal arithmetic, and physics the
simulator must show (1F1B traffic proportional to s, weight-passing traffic independent of s,
throughput never falling as bandwidth grows), and rows equal to a direct `weipipe simulate`.

    check_csv.py weak|strong WEIPIPE OUT_DIR
Exit 0 = pass, 1 = fail (every broken check printed).
"""
import csv
import math
import os
import subprocess
import sys

COLUMNS = ["sweep", "source", "label", "strategy", "nranks", "ranks_per_node", "num_microbatches",
           "micro_batch_size", "seq_length", "hidden_size", "num_layers", "link_bytes_per_s",
           "device_tflops", "tokens_per_step", "step_s", "tokens_per_s", "tokens_per_s_per_rank",
           "bubble", "sent_bytes_per_rank", "peak_bytes_per_rank", "note"]
REL = 1e-6  # the CSV holds 9 significant digits
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


def close(a, b, rel=REL):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def read(path):
    with open(path) as f:
        rd = csv.DictReader(f)
        check(rd.fieldnames == COLUMNS, f"{path}: columns {rd.fieldnames}")
        return list(rd)


def simulate(wp, *args):
    out = subprocess.run([wp, "simulate", "--strategy", "all", "--format", "csv", *args], check=True,
                         capture_output=True, text=True).stdout
    return {r["strategy"]: r for r in csv.DictReader(out.splitlines())}


def common(rows, path, strategies):
    groups = {}
    for r in rows:
        key = (r["sweep"], r["source"], r["label"], r["nranks"], r["num_microbatches"], r["seq_length"],
               r["link_bytes_per_s"])
        groups.setdefault(key, []).append(r["strategy"])
    for key, got in groups.items():
        check(sorted(got) == sorted(strategies), f"{path} {key}: strategies {got}, want each of {strategies} once")
    for st in strategies:
        check(any(r["strategy"] == st and r["tokens_per_s"] for r in rows), f"{path}: {st} has no result at all")
    for r in rows:
        what = f"{path}: {r['source']} {r['strategy']} N={r['nranks']} s={r['seq_length']} link={r['link_bytes_per_s']}"
        tps = int(r["num_microbatches"]) * int(r["micro_batch_size"]) * int(r["seq_length"])
        check(int(r["tokens_per_step"]) == tps, f"{what}: tokens_per_step {r['tokens_per_step']} != M*b*s {tps}")
        if r["tokens_per_s"] == "":
            # a shape a strategy cannot lay out (e.g. interleaved-1f1b's 2N chunks need L >= 2N) is
            # a note; anything else without a result is a failure
            refused = r["note"].startswith("not simulated:") if r["source"] == "sim" else \
                r["note"].startswith("train exit 2:")
            check(refused, f"{what}: no result ({r['note'] or 'no note'})")
            continue
        step, rate, per = float(r["step_s"]), float(r["tokens_per_s"]), float(r["tokens_per_s_per_rank"])
        check(step > 0 and math.isfinite(step), f"{what}: step_s {step}")
        check(close(rate * step, tps), f"{what}: tokens_per_s * step_s = {rate * step}, want {tps}")
        check(close(per * int(r["nranks"]), rate), f"{what}: per-rank {per} * N != {rate}")
        check(0 <= float(r["bubble"]) < 1, f"{what}: bubble {r['bubble']}")
        if int(r["nranks"]) > 1:
            check(int(r["sent_bytes_per_rank"]) > 0, f"{what}: sent nothing")


def by(rows, **kv):
    return [r for r in rows if all(r[k] == str(v) for k, v in kv.items())]


def main():
    mode, wp, out = sys.argv[1], sys.argv[2], sys.argv[3]
    strategies = list(simulate(wp, "--config", "configs/tiny.ini", "--nranks", "2", "--device-tflops", "1"))
    check(len(strategies) >= 5, f"simulate --strategy all lists only {strategies}")
    sweep_csv = os.path.join(out, f"{mode}.csv")
    rows = read(sweep_csv)
    common(rows, sweep_csv, strategies)
    sim = by(rows, source="sim", label="smoke-sim")
    real = by(rows, source="real-local")
    check(len(by(rows, label="smoke-real-sim")) == len(strategies), f"{sweep_csv}: no simulated twin of the real runs")
    check(len(sim) == 2 * len(strategies), f"{sweep_csv}: {len(sim)} sim rows, want N=2,4 x {len(strategies)}")
    check(len(real) == len(strategies), f"{sweep_csv}: {len(real)} real rows, want {len(strategies)}")
    batch = {n: int(by(sim, nranks=n)[0]["tokens_per_step"]) for n in (2, 4) if by(sim, nranks=n)}
    if check(len(batch) == 2, f"{sweep_csv}: no rows for N=2 and N=4"):
        if mode == "weak":
            check(batch[4] == 2 * batch[2], f"weak: tokens per step {batch} do not grow with N")
        else:
            check(batch[4] == batch[2], f"strong: tokens per step {batch} not fixed")
    # the rows carry what weipipe simulate says for the same point
    # (N=4 has M=8 in both smoke sweeps: 2N for weak, the fixed 8 for strong)
    direct = simulate(wp, "--config", "configs/tiny.ini", "--nranks", "4", "--ranks-per-node", "1",
                      "--num-microbatches", "8", "--micro-batch-size", "2", "--seq-length", "32",
                      "--link-bandwidth", "20Mbit", "--device-tflops", "0.01")
    for r in by(sim, nranks=4):
        d = direct.get(r["strategy"])
        if not check(d is not None, f"direct simulate has no {r['strategy']}"):
            continue
        if not d["step_s"]:
            check(not r["step_s"], f"{r['strategy']}: a row where simulate lays out nothing")
        else:
            check(close(float(r["step_s"]), float(d["step_s"])), f"{r['strategy']}: row step {r['step_s']} != {d['step_s']}")
            check(r["sent_bytes_per_rank"] == d["sent_bytes_per_rank"], f"{r['strategy']}: row bytes differ")
    # real runs move the schedule's bytes: rank 0's count is at most the largest rank's
    sim2 = {r["strategy"]: r for r in by(rows, label="smoke-real-sim")}
    for r in real:
        if r["tokens_per_s"] and sim2.get(r["strategy"], {}).get("sent_bytes_per_rank"):
            check(0 < int(r["sent_bytes_per_rank"]) <= int(sim2[r["strategy"]]["sent_bytes_per_rank"]),
                  f"real {r['strategy']}: rank 0 sent {r['sent_bytes_per_rank']}, simulated max "
                  f"{sim2[r['strategy']]['sent_bytes_per_rank']}")
    pngs = [f"scaling-{mode}-smoke-sim.png", f"scaling-{mode}-smoke-real.png"]
    if mode == "strong":
        seq = read(os.path.join(out, "seqlen.csv"))
        common(seq, "seqlen.csv", strategies)
        for st in strategies:
            pts = sorted((int(r["seq_length"]), int(r["sent_bytes_per_rank"])) for r in by(seq, strategy=st)
                         if r["tokens_per_s"])
            if not pts:
                continue  # a strategy this shape cannot lay out (noted, checked above)
            if not check(len(pts) == 3, f"seqlen {st}: {len(pts)} points"):
                continue
            if st == "1f1b":  # activations: b*s*h per boundary
                check(pts[1][1] == 2 * pts[0][1] and pts[2][1] == 4 * pts[0][1], f"seqlen 1f1b bytes {pts} not prop. to s")
            elif st.startswith("weipipe") or st.startswith("wzb"):  # weights: independent of s
                check(pts[0][1] == pts[1][1] == pts[2][1], f"seqlen {st} bytes {pts} depend on s")
        bw = read(os.path.join(out, "bandwidth.csv"))
        common(bw, "bandwidth.csv", strategies)
        for st in strategies:
            pts = [float(r["tokens_per_s"]) for r in sorted(by(bw, strategy=st),
                   key=lambda r: float(r["link_bytes_per_s"]) or math.inf) if r["tokens_per_s"]]
            check(len(pts) in (0, 4) and all(b >= a * (1 - REL) for a, b in zip(pts, pts[1:])),
                  f"bandwidth {st}: tokens/s {pts} fall as the link gets faster")
        pngs += ["scaling-seqlen-smoke-sim.png", "scaling-bandwidth-smoke-sim.png"]
    try:
        import matplotlib  # noqa: F401
        for p in pngs:
            path = os.path.join(out, p)
            ok = os.path.exists(path)
            if ok:
                with open(path, "rb") as f:
                    ok = f.read(8) == b"\x89PNG\r\n\x1a\n"
            check(ok, f"{path}: missing or not a PNG")
    except ImportError:
        print("matplotlib missing: PNGs not checked")
    for f in failures:
        print("FAIL:", f)
    print(f"{mode}: {len(rows)} rows, {len(strategies)} strategies, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
