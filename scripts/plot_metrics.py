#!/usr/bin/env python3
"""Plot training metrics written by `weipipe train --metrics FILE` (one JSON object per step).

    plot_metrics.py METRICS.jsonl [MORE.jsonl ...] [-o metrics.png] [--keys loss,lr,...]
                    [--labels a,b] [--smooth N]

Each file becomes one line per panel (label: --labels, else the file name), so runs of several
strategies or precisions can be compared on one figure. By default the panels are the keys the
files have among loss (with val_loss on the same panel), grad_norm, lr, tokens_per_s and mfu; any
numeric key can be asked for with --keys. The x axis is "step" (the line number when absent).
Steps a run skipped (non-finite gradient, "skipped": true) are marked on the loss panel.
Needs matplotlib (Debian: python3-matplotlib); writes PNG, SVG or PDF by the output's suffix.
"""
import argparse
import json
import math
import os
import sys

DEFAULT_KEYS = ["loss", "grad_norm", "lr", "tokens_per_s", "mfu"]
LABELS = {"loss": "loss (train; val dashed)", "grad_norm": "gradient norm", "lr": "learning rate",
          "tokens_per_s": "tokens / s", "mfu": "MFU"}


def read(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"plot_metrics: {path}:{n}: skipped, not JSON ({e.msg})", file=sys.stderr)
                continue
            if isinstance(obj, dict):
                obj.setdefault("step", len(rows))
                rows.append(obj)
    return rows


def series(rows, key):
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(r["step"])
            ys.append(v)
    return xs, ys


def smooth(ys, n):
    if n <= 1:
        return ys
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y - (ys[i - n] if i >= n else 0.0)
        out.append(acc / min(i + 1, n))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--output", default="metrics.png")
    ap.add_argument("--keys", help="comma-separated keys to plot, one panel each")
    ap.add_argument("--labels", help="comma-separated legend labels, one per file")
    ap.add_argument("--smooth", type=int, default=1, help="moving average over N steps (loss and throughput)")
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_metrics: matplotlib is not installed (Debian: apt-get install python3-matplotlib)")

    runs = []
    for path in args.files:
        try:
            runs.append(read(path))
        except OSError as e:
            sys.exit(f"plot_metrics: {path}: {e.strerror}")
    labels = args.labels.split(",") if args.labels else [os.path.basename(p) for p in args.files]
    if len(labels) != len(runs):
        sys.exit(f"plot_metrics: --labels has {len(labels)} names for {len(runs)} files")
    wanted = args.keys.split(",") if args.keys else DEFAULT_KEYS
    keys = [k for k in wanted if any(series(r, k)[0] for r in runs)]
    if not keys:
        sys.exit(f"plot_metrics: none of {', '.join(wanted)} in {', '.join(args.files)}")

    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 2.6 * len(keys)), sharex=True, squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        for rows, label in zip(runs, labels):
            xs, ys = series(rows, key)
            n = args.smooth if key in ("loss", "tokens_per_s", "mfu") else 1
            (line,) = ax.plot(xs, smooth(ys, n), label=label, linewidth=1.2)
            if key == "loss":
                vx, vy = series(rows, "val_loss")
                if vx:
                    ax.plot(vx, vy, "--o", color=line.get_color(), markersize=3, linewidth=1)
                skipped = [r["step"] for r in rows if r.get("skipped") is True]
                for s in skipped:
                    ax.axvline(s, color=line.get_color(), alpha=0.25, linewidth=0.8)
        ax.set_ylabel(LABELS.get(key, key))
        if key in ("loss", "grad_norm") and all(y > 0 for r in runs for y in series(r, key)[1]):
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize="small")
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"plot_metrics: {len(runs)} run(s), panels {', '.join(keys)} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
