#!/usr/bin/python3
"""Plot training metrics written by `weipipe train --metrics FILE` (JSON lines, docs/runtime.md).

    plot_metrics.py METRICS.jsonl [MORE.jsonl ...] [-o metrics.png] [--keys loss,lr,...]
                    [--labels a,b] [--smooth N] [--x step|tokens_seen|time]

Each file becomes one line per panel (label: --labels, else the file name), so runs of several
strategies or precisions can be compared on one figure. By default the panels are the keys the
files have among loss (with val_loss on the same panel), grad_norm, lr, tokens_per_s and mfu; any
numeric key can be asked for with --keys. The x axis is "step" (--x tokens_seen: tokens seen,
--x time: seconds since the file's first line). A run's first line, {"run": {...}}, describes it
(flags, commit) and is not plotted; a resumed run appends another. Values train could not compute
(a NaN loss, a skipped step's norm) are null and leave gaps. Steps a run skipped (non-finite
gradient, "skipped": true) are marked on the loss panel.
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


def no_constant(name):
    raise ValueError(f"{name} is not JSON")


def read(path):
    """The step and validation lines of a metrics file (run lines skipped), as train writes them:
    strict JSON, so a NaN or Infinity (which train never writes) is reported, not plotted."""
    rows, t0 = [], None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line, parse_constant=no_constant)
            except ValueError as e:
                print(f"plot_metrics: {path}:{n}: skipped, not JSON ({e})", file=sys.stderr)
                continue
            if not isinstance(obj, dict):
                continue
            if isinstance(obj.get("time"), (int, float)) and t0 is None:
                t0 = obj["time"]
            if "run" in obj:
                continue
            obj.setdefault("step", len(rows))
            if isinstance(obj.get("time"), (int, float)):
                obj["time"] -= t0
            rows.append(obj)
    # validation lines carry no tokens_seen: the step line of the same step has it
    seen = {r["step"]: r["tokens_seen"] for r in rows if "tokens_seen" in r}
    for r in rows:
        if "tokens_seen" not in r and r["step"] in seen:
            r["tokens_seen"] = seen[r["step"]]
    return rows


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def series(rows, key, x="step"):
    xs, ys = [], []
    for r in rows:
        if number(r.get(key)) and number(r.get(x)):
            xs.append(r[x])
            ys.append(r[key])
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
    ap.add_argument("--x", choices=["step", "tokens_seen", "time"], default="step", help="x axis")
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit(f"plot_metrics: {sys.executable} has no matplotlib (Debian: apt-get install python3-matplotlib, "
                 "then run this script as it is or with /usr/bin/python3)")

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
    keys = [k for k in wanted if any(series(r, k, args.x)[0] for r in runs)]
    if not keys:
        sys.exit(f"plot_metrics: none of {', '.join(wanted)} in {', '.join(args.files)}")

    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 2.6 * len(keys)), sharex=True, squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        for rows, label in zip(runs, labels):
            xs, ys = series(rows, key, args.x)
            n = args.smooth if key in ("loss", "tokens_per_s", "mfu") else 1
            (line,) = ax.plot(xs, smooth(ys, n), label=label, linewidth=1.2)
            if key == "loss":
                vx, vy = series(rows, "val_loss", args.x)
                if vx:
                    ax.plot(vx, vy, "--o", color=line.get_color(), markersize=3, linewidth=1)
                skipped = [r[args.x] for r in rows if r.get("skipped") is True and number(r.get(args.x))]
                for s in skipped:
                    ax.axvline(s, color=line.get_color(), alpha=0.25, linewidth=0.8)
        ax.set_ylabel(LABELS.get(key, key))
        if key in ("loss", "grad_norm") and all(y > 0 for r in runs for y in series(r, key, args.x)[1]):
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize="small")
    axes[-1, 0].set_xlabel({"step": "step", "tokens_seen": "tokens seen", "time": "seconds"}[args.x])
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"plot_metrics: {len(runs)} run(s), panels {', '.join(keys)} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
