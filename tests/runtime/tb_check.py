#!/usr/bin/env python3
"""Checker of tensorboard.sh: a --tensorboard directory read back with TensorBoard's own reader
(PyPI tensorboard: event_accumulator, event_file_loader) against the --metrics file of the same
runs.

    tb_check.py METRICS.jsonl TB_DIR FILES STEPS VAL_STEPS

FILES: how many event files (runs) the directory must hold; STEPS, VAL_STEPS: the step numbers
TensorBoard must show (comma-separated), the steps a resumed run redid counted once. Every
number of every step line (the last line of a step: a resumed run's supersedes the crashed
one's) must be the scalar train/<key> at that step, equal to it rounded to float32 (the
seconds, written with 6 decimals, to within that), a JSON null a non-finite scalar, with the
line's Unix time as the event's wall_time; val_loss as val/loss; the last memory line's numbers
as memory/rank<r>/... at the last step. No tag may be missing or extra. The comparison is then
run on poisoned copies (one loss off by one float32 step, or a number where it is NaN; one
scalar missing; a key the writer does not know; a number written as null, or the reverse) and
must fail on each. Exit 77 without tensorboard."""
import glob
import json
import math
import os
import re
import socket
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import hfenv  # noqa: E402

hfenv.use("tensorboard")  # setup.sh's venv when this Python lacks it
try:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator, event_file_loader
except ImportError as e:
    print(f"tb_check: skipped: {e}", file=sys.stderr)
    sys.exit(77)

SECONDS = {"seconds", "compute_s", "wait_s", "issue_s", "device_s"}  # written %.6f in the metrics line


def f32(x):
    return float(np.float32(x))


def same(json_value, tb_value, key):
    """The metrics file's value against TensorBoard's float32 simple_value."""
    if json_value is None:
        return not math.isfinite(tb_value)
    if isinstance(json_value, bool):
        return tb_value == (1.0 if json_value else 0.0)
    if key in SECONDS:
        return abs(tb_value - json_value) <= 5e-7 + abs(json_value) * 2.0**-24
    return tb_value == f32(json_value)


def expected(rows, steps_want, val_want):
    """{tag: {step: (json value, key, time)}} from the metrics lines."""
    want = {}
    steps = {}
    for r in rows:
        if "loss" in r:
            steps[r["step"]] = r  # a later run's line for the same step supersedes
    for step, r in steps.items():
        for key, v in r.items():
            if key in ("step", "time"):
                continue
            want.setdefault("train/" + key, {})[step] = (v, key, r["time"])
    for r in rows:
        if "val_loss" in r:
            want.setdefault("val/loss", {})[r["step"]] = (r["val_loss"], "val_loss", r["time"])
    mem = [r for r in rows if "memory" in r]
    last = max(steps)
    for m in mem[-1:]:
        for rank in m["memory"]:
            base = f"memory/rank{rank['rank']}/"
            for key in ("peak_bytes", "resident_bytes", "predicted_bytes"):
                want.setdefault(base + key, {})[last] = (rank[key], key, m["time"])
            for group in ("terms", "predicted_terms"):
                for name, v in rank[group].items():
                    want.setdefault(f"{base}{group}/{name}", {})[last] = (v, name, m["time"])
    assert sorted(steps) == steps_want, ("metrics steps", sorted(steps), steps_want)
    assert sorted(want.get("val/loss", {})) == val_want, ("metrics validation steps", sorted(want.get("val/loss", {})))
    return want


def compare(want, got):
    """The differences between the expected scalars and TensorBoard's, as lines."""
    bad = []
    for tag in sorted(set(want) | set(got)):
        if tag not in got:
            bad.append(f"{tag}: missing in TensorBoard")
            continue
        if tag not in want:
            bad.append(f"{tag}: in TensorBoard, not in the metrics file")
            continue
        w, g = want[tag], got[tag]
        if sorted(w) != sorted(g):
            bad.append(f"{tag}: steps {sorted(g)}, metrics {sorted(w)}")
            continue
        for step, (v, key, t) in w.items():
            value, wall = g[step]
            if not same(v, value, key):
                bad.append(f"{tag} step {step}: TensorBoard {value!r}, metrics {v!r}")
            # the same Unix time (the memory line writes it with 6 decimals, the others %.17g)
            if (abs(wall - t) > 1e-6) if tag.startswith("memory/") else wall != t:
                bad.append(f"{tag} step {step}: wall_time {wall!r}, metrics time {t!r}")
    return bad


def main():
    metrics, tb_dir, nfiles = sys.argv[1], sys.argv[2], int(sys.argv[3])
    steps_want = [int(s) for s in sys.argv[4].split(",")]
    val_want = [int(s) for s in sys.argv[5].split(",") if s]
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    want = expected(rows, steps_want, val_want)

    # one file per run, named as TensorBoard's writers name theirs, each opening with the file
    # version and a session start at the run's first step
    files = sorted(glob.glob(os.path.join(tb_dir, "*")))
    assert len(files) == nfiles, ("event files", files)
    host = re.escape(re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()))
    starts = []
    for path in files:
        assert re.fullmatch(r"events\.out\.tfevents\.\d+\." + host + r"\.\d+\.\d+", os.path.basename(path)), path
        events = list(event_file_loader.EventFileLoader(path).Load())
        assert events and events[0].file_version == "brain.Event:2", (path, events[:1])
        assert events[1].session_log.status == 1, (path, events[1])  # SessionLog.START
        starts.append(events[1].step)
        # every record's framing and CRCs as TFRecord has them (the reader checks the CRCs too)
        with open(path, "rb") as f:
            data = f.read()
        at = records = 0
        while at < len(data):
            (n,) = struct.unpack_from("<Q", data, at)
            at += 12 + n + 4
            records += 1
        assert at == len(data) and records == len(events), (path, at, len(data), records, len(events))
    run_starts = [r["run"]["start_step"] + 1 for r in rows if "run" in r]
    assert starts == run_starts, ("session starts", starts, "runs' first steps", run_starts)

    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    got = {tag: {e.step: (e.value, e.wall_time) for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
    for tag in got:  # one event per step and tag: a step written twice would hide here
        assert len(acc.Scalars(tag)) == len(got[tag]), (tag, acc.Scalars(tag))
    bad = compare(want, got)
    if bad:
        print("tb_check: " + "\n  ".join([f"{tb_dir} against {metrics}:"] + bad[:20]), file=sys.stderr)
        sys.exit(1)

    # poison: the comparison must see each of these
    def poisoned(change):
        w = {tag: dict(steps) for tag, steps in want.items()}
        g = {tag: dict(steps) for tag, steps in got.items()}
        change(w, g)
        return compare(w, g)

    s = steps_want[-1]

    def loss_off(w, g):
        v, wall = g["train/loss"][s]  # a NaN loss becomes a number
        g["train/loss"][s] = (float(np.nextafter(np.float32(v), np.float32(np.inf))) if math.isfinite(v) else 0.0, wall)

    def missing(w, g):
        del g["train/lr"][s]

    def unknown_key(w, g):
        w["train/targets"] = {s: (7, "targets", w["train/loss"][s][2])}

    def null(w, g):
        v, key, t = w["train/grad_norm"][s]  # a null (a NaN run's norm) becomes a number
        w["train/grad_norm"][s] = (None if v is not None else 1.0, key, t)

    for name, change in (("loss off", loss_off), ("lr missing", missing), ("unknown key", unknown_key), ("null", null)):
        assert poisoned(change), f"poison '{name}' was not seen"
    ntags = len(got)
    print(f"tb_check: {nfiles} file(s), {ntags} tags, steps {steps_want}, validation {val_want}: every scalar equals "
          f"the metrics file (float32); the 4 poisons seen")


main()
