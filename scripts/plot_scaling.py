#!/usr/bin/env python3
"""Rows and plots of the scaling sweeps (scripts/weak_scaling.sh, scripts/strong_scaling.sh).

    plot_scaling.py sim-rows  KEY=VALUE... < simulate.csv  >> sweep.csv
    plot_scaling.py real-rows KEY=VALUE... STRATEGY METRICS.jsonl [NOTE] >> sweep.csv
    plot_scaling.py header                                  (the CSV's header line)
    plot_scaling.py plot SWEEP.csv [MORE.csv ...] --img DIR (PNG per sweep and label)

KEY=VALUE gives the run's setting: sweep, source, label, nranks, ranks_per_node,
num_microbatches, micro_batch_size, seq_length, hidden_size, num_layers, link (a rate spelled
as --link-bandwidth, 0 = unlimited), device_tflops. sim-rows turns `weipipe simulate --format
csv` into one row per strategy; real-rows turns a `weipipe train --metrics` file into one row
(median over the steps after the first, which carries connection set-up and first-touch costs).

Plots (needs matplotlib; Debian python3-matplotlib), into --img:
  scaling-<weak|strong>-<label>.png  total tokens/s as bars per N and strategy (left axis),
                                     tokens/s per rank as lines (right axis): the paper's
                                     figures 6-9; real runs carry their simulated twin
                                     (label <label>-sim) as black ticks on the bars
  scaling-seqlen-<label>.png         tokens/s against sequence length; the dotted line is the
                                     analytic traffic crossover b*s = 18*h*L/N
  scaling-bandwidth-<label>.png      tokens/s against link bandwidth; dashed: each strategy on an
                                     unlimited link (the link-0 rows); its marker: the bandwidth
                                     where sent bytes / bandwidth equals that step time
"""
import csv
import json
import math
import os
import re
import statistics
import sys

COLUMNS = ["sweep", "source", "label", "strategy", "nranks", "ranks_per_node", "num_microbatches",
           "micro_batch_size", "seq_length", "hidden_size", "num_layers", "link_bytes_per_s",
           "device_tflops", "tokens_per_step", "step_s", "tokens_per_s", "tokens_per_s_per_rank",
           "bubble", "sent_bytes_per_rank", "peak_bytes_per_rank", "note"]
SETTING_INT = ["nranks", "ranks_per_node", "num_microbatches", "micro_batch_size", "seq_length",
               "hidden_size", "num_layers"]
SETTING = ["sweep", "source", "label", "link", "device_tflops"] + SETTING_INT
NO_FIT = "does not fit in device memory"
RATE_UNITS = {"bit": 1 / 8, "Kbit": 1e3 / 8, "Mbit": 1e6 / 8, "Gbit": 1e9 / 8, "Tbit": 1e12 / 8,
              "Byte": 1, "KByte": 1e3, "MByte": 1e6, "GByte": 1e9, "TByte": 1e12}


def fail(msg, code=2):
    print(f"plot_scaling.py: {msg}", file=sys.stderr)
    sys.exit(code)


def rate_bytes(text):
    """A rate in weipipe's spelling (cli_parse_rate) -> bytes per second; 0 = unlimited."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)([A-Za-z]*)(?:/s)?", text)
    if not m or (m.group(2) == "" and float(m.group(1)) != 0) or (m.group(2) and m.group(2) not in RATE_UNITS):
        fail(f"link={text}: not a rate such as 10Gbit or 400GByte")
    return float(m.group(1)) * (RATE_UNITS[m.group(2)] if m.group(2) else 0)


def parse_setting(args):
    s = {}
    for a in args:
        key, eq, value = a.partition("=")
        if not eq or key not in SETTING:
            fail(f"'{a}' is not KEY=VALUE with KEY one of {', '.join(SETTING)}")
        s[key] = value
    missing = [k for k in SETTING if k not in s]
    if missing:
        fail(f"missing {', '.join(missing)}")
    for k in SETTING_INT:
        if not re.fullmatch(r"[0-9]+", s[k]):
            fail(f"{k}={s[k]}: not a non-negative integer")
        s[k] = int(s[k])
    s["link_bytes_per_s"] = rate_bytes(s.pop("link"))
    s["device_tflops"] = float(s["device_tflops"] or 0)
    s["tokens_per_step"] = s["num_microbatches"] * s["micro_batch_size"] * s["seq_length"]
    return s


def emit(rows):
    w = csv.DictWriter(sys.stdout, COLUMNS, lineterminator="\n")
    for r in rows:
        w.writerow({k: ("%.9g" % v if isinstance(v, float) else v) for k, v in r.items()})


def row_of(setting, strategy, step_s, bubble, sent, peak, note):
    r = {k: setting[k] for k in COLUMNS if k in setting}
    r.update(strategy=strategy, note=note, step_s="", tokens_per_s="", tokens_per_s_per_rank="", bubble="",
             sent_bytes_per_rank="", peak_bytes_per_rank="")
    if step_s is not None and step_s > 0:
        tps = setting["tokens_per_step"] / step_s
        r.update(step_s=step_s, tokens_per_s=tps, tokens_per_s_per_rank=tps / setting["nranks"], bubble=bubble,
                 sent_bytes_per_rank=sent, peak_bytes_per_rank=peak)
    return r


def sim_rows(args):
    s = parse_setting(args)
    rows = []
    for rec in csv.DictReader(sys.stdin):
        if rec.get("step_s"):
            # simulate's fits column (false: peak memory over --device-memory) travels as the note
            rows.append(row_of(s, rec["strategy"], float(rec["step_s"]), float(rec["bubble"]),
                               int(rec["sent_bytes_per_rank"]), int(rec["peak_bytes_per_rank"]),
                               NO_FIT if rec.get("fits") == "false" else ""))
        else:
            rows.append(row_of(s, rec["strategy"], None, None, None, None, rec.get("note", "")))
    if not rows:
        fail("no strategies in the simulator's output", 1)
    emit(rows)


def real_rows(args):
    if len(args) < 2:
        fail("real-rows needs KEY=VALUE... STRATEGY METRICS.jsonl [NOTE]")
    keys = [a for a in args if "=" in a]
    rest = [a for a in args if "=" not in a]
    s = parse_setting(keys)
    strategy, path, note = rest[0], rest[1], " ".join(rest[2:])
    steps = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    obj = json.loads(line)
                    if "seconds" in obj and obj.get("seconds"):
                        steps.append(obj)
    later = steps[1:] if len(steps) > 1 else steps
    if not later:
        emit([row_of(s, strategy, None, None, None, None, note or "no step finished")])
        return
    step_s = statistics.median(o["seconds"] for o in later)
    # bubble and bytes are rank 0's (the metrics file is written by rank 0)
    bubble = statistics.median(max(0.0, 1 - o["compute_s"] / o["seconds"]) for o in later)
    emit([row_of(s, strategy, step_s, bubble, later[-1]["bytes_sent"], "", note)])


def read_rows(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rd = csv.DictReader(f)
            if rd.fieldnames != COLUMNS:
                fail(f"{p}: columns {rd.fieldnames} are not {COLUMNS}", 1)
            rows.extend(rd)
    return rows


def ok(r):
    return r["tokens_per_s"] != ""


def fits(r):
    """A simulated point over the device's memory is drawn as a cross, apart from the lines."""
    return r["note"] != NO_FIT


def mark_no_fit(ax, pts, colour):
    if pts:
        ax.scatter(*zip(*pts), marker="x", s=60, color=colour, zorder=3)


def strategies_of(rows):
    order = []
    for r in rows:
        if r["strategy"] not in order:
            order.append(r["strategy"])
    return order


def colours(strats):
    import matplotlib
    cmap = matplotlib.colormaps["tab10" if len(strats) <= 10 else "tab20"]
    return {s: cmap(i) for i, s in enumerate(strats)}


def describe(r, link=True, seq=True):
    bps = float(r["link_bytes_per_s"]) * 8
    rpn = int(r["ranks_per_node"])
    where = f"{rpn} per node" if 0 < rpn else "one node"
    bw = "" if not link else (f"{bps / 1e9:g} Gbit/s link" if bps >= 1e9 else f"{bps / 1e6:g} Mbit/s link") if bps > 0 \
        else "unlimited link"
    dev = f", {float(r['device_tflops']):g} TFLOP/s" if float(r["device_tflops"]) > 0 else ""
    return f"h {r['hidden_size']}, L {r['num_layers']}, {'s ' + r['seq_length'] + ', ' if seq else ''}b {r['micro_batch_size']}; " \
        f"{bw + ', ' if bw else ''}{where}{dev}"


def plot_scaling(plt, rows, sweep, label, path):
    """Bars: total tokens/s per N and strategy; lines: tokens/s per rank (right axis)."""
    sel = [r for r in rows if r["sweep"] == sweep and r["label"] == label]
    strats = strategies_of(sel)
    ns = sorted({int(r["nranks"]) for r in sel})
    col = colours(strats)
    fig, ax = plt.subplots(figsize=(min(12, max(7, 0.5 * len(ns) * max(1, len(strats)) * 0.45 + 3)), 5.2))
    ax2 = ax.twinx()
    width = 0.8 / max(1, len(strats))
    twins = [r for r in rows if r["sweep"] == sweep and r["label"] == label + "-sim"]
    said = False
    for i, s in enumerate(strats):
        pts = {int(r["nranks"]): r for r in sel if r["strategy"] == s and ok(r)}
        xs = [k for k, n in enumerate(ns) if n in pts]
        if not xs:
            continue
        bars = ax.bar([x - 0.4 + width * (i + 0.5) for x in xs], [float(pts[ns[x]]["tokens_per_s"]) for x in xs], width,
                      color=col[s], label=s, alpha=0.85)
        for x, bar in zip(xs, bars):  # over the device's memory: hatched, not a result one could run
            if not fits(pts[ns[x]]):
                bar.set_hatch("xx")
                bar.set_alpha(0.35)
        ax2.plot(xs, [float(pts[ns[x]]["tokens_per_s_per_rank"]) for x in xs], "o-", color=col[s], lw=1.5,
                 markeredgecolor="black", markeredgewidth=0.5)
        twin = {int(r["nranks"]): r for r in twins if r["strategy"] == s and ok(r)}
        tx = [x for x in xs if ns[x] in twin]
        if tx:  # the simulator's prediction for the same run: a black tick on the bar
            ax.scatter([x - 0.4 + width * (i + 0.5) for x in tx], [float(twin[ns[x]]["tokens_per_s"]) for x in tx],
                       marker="_", s=200, color="black", zorder=3, label="simulated" if not said else None)
            said = True
    ax.set_xticks(range(len(ns)))
    batch = {}
    for r in sel:
        batch[int(r["nranks"])] = int(r["num_microbatches"]) * int(r["micro_batch_size"])
    ax.set_xticklabels([f"N={n}\nbatch {batch[n]}" for n in ns])
    ax.set_ylabel("total tokens/s (bars)")
    ax2.set_ylabel("tokens/s per rank (lines)")
    ax2.set_ylim(bottom=0)
    src = sel[0]["source"] if sel else ""
    ax.set_title(f"{sweep} scaling, {label} ({src}): {describe(sel[0])}" if sel else sweep, fontsize=9)
    ax.legend(fontsize=7, ncol=min(4, max(1, len(strats))), loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_seqlen(plt, rows, label, path):
    sel = [r for r in rows if r["sweep"] == "seqlen" and r["label"] == label]
    strats = strategies_of(sel)
    col = colours(strats)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for s in strats:
        mine = [r for r in sel if r["strategy"] == s and ok(r)]
        pts = sorted((int(r["seq_length"]), float(r["tokens_per_s"])) for r in mine if fits(r))
        if pts:
            ax.plot(*zip(*pts), "o-", color=col[s], label=s, lw=1.5)
        mark_no_fit(ax, sorted((int(r["seq_length"]), float(r["tokens_per_s"])) for r in mine if not fits(r)), col[s])
    r0 = sel[0]
    h, L, n, b = int(r0["hidden_size"]), int(r0["num_layers"]), int(r0["nranks"]), int(r0["micro_batch_size"])
    cross = 18 * h * L / n / b
    ax.axvline(cross, color="black", ls=":", lw=1.2)
    ax.text(cross, 0.98, f" b*s = 18hL/N\n s = {cross:,.0f}", transform=ax.get_xaxis_transform(), va="top",
            fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length s (tokens)")
    ax.set_ylabel("tokens/s")
    ax.set_title(f"throughput vs sequence length, N={n}, M={r0['num_microbatches']} (x: does not fit in memory):\n"
                 f"{describe(r0, seq=False)}",
                 fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bandwidth(plt, rows, label, path):
    """Throughput against link bandwidth. The unlimited-link rows (link 0) give each strategy's
    compute-bound throughput (dashed); the marker sits where the link-bound asymptote
    (tokens per step * bandwidth / sent bytes) meets it: below that bandwidth the link limits."""
    sel = [r for r in rows if r["sweep"] == "bandwidth" and r["label"] == label]
    strats = strategies_of(sel)
    col = colours(strats)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for s in strats:
        mine = [r for r in sel if r["strategy"] == s and ok(r)]
        pts = sorted((float(r["link_bytes_per_s"]) * 8, float(r["tokens_per_s"])) for r in mine
                     if float(r["link_bytes_per_s"]) > 0 and fits(r))
        mark_no_fit(ax, sorted((float(r["link_bytes_per_s"]) * 8, float(r["tokens_per_s"])) for r in mine
                               if float(r["link_bytes_per_s"]) > 0 and not fits(r)), col[s])
        if not pts:
            continue
        ax.plot(*zip(*pts), "o-", color=col[s], label=s, lw=1.5)
        free = [r for r in mine if float(r["link_bytes_per_s"]) == 0]
        if free and float(free[0]["sent_bytes_per_rank"]) > 0:
            top = float(free[0]["tokens_per_s"])
            knee = float(free[0]["sent_bytes_per_rank"]) * 8 / float(free[0]["step_s"])
            ax.axhline(top, color=col[s], ls="--", lw=0.8)
            ax.plot([knee], [top], marker="v", ms=10, color=col[s], markeredgecolor="black")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("link bandwidth per direction (bit/s)")
    ax.set_ylabel("tokens/s")
    r0 = sel[0]
    ax.set_title(f"throughput vs link bandwidth, N={r0['nranks']}, M={r0['num_microbatches']}: "
                 f"{describe(r0, link=False)}\ndashed: unlimited link; marker: sent bytes / bandwidth = that step",
                 fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(args):
    img = None
    paths = []
    it = iter(args)
    for a in it:
        if a == "--img":
            img = next(it, None)
        else:
            paths.append(a)
    if not img or not paths:
        fail("plot needs SWEEP.csv... --img DIR")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is missing (Debian: python3-matplotlib); no plots drawn", 3)
    rows = read_rows(paths)
    os.makedirs(img, exist_ok=True)
    made = []
    pairs = {(r["sweep"], r["label"]) for r in rows}
    for sweep, label in sorted(pairs):
        if not any(ok(r) for r in rows if r["sweep"] == sweep and r["label"] == label):
            continue
        path = os.path.join(img, f"scaling-{sweep}-{label}.png")
        if sweep in ("weak", "strong") and label.endswith("-sim") and (sweep, label[:-4]) in pairs:
            continue  # drawn as ticks on the real runs' bars
        if sweep in ("weak", "strong"):
            plot_scaling(plt, rows, sweep, label, path)
        elif sweep == "seqlen":
            plot_seqlen(plt, rows, label, path)
        elif sweep == "bandwidth":
            plot_bandwidth(plt, rows, label, path)
        else:
            continue
        made.append(path)
    for p in made:
        print(p)


def main():
    if len(sys.argv) < 2:
        fail(__doc__.strip().splitlines()[2].strip())
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "header":
        print(",".join(COLUMNS))
    elif cmd == "sim-rows":
        sim_rows(args)
    elif cmd == "real-rows":
        real_rows(args)
    elif cmd == "plot":
        plot(args)
    else:
        fail(f"unknown command '{cmd}' (header, sim-rows, real-rows, plot)")


if __name__ == "__main__":
    main()
