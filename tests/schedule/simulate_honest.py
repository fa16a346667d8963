#!/usr/bin/python3
"""weipipe simulate's honest comparison from the outside:
  fits   every row of --strategy all in csv, json and text says whether its peak memory per rank
         is within --device-memory, recomputed here from the peak the row reports (a threshold
         between two strategies' peaks, so both answers occur).

    simulate_honest.py WEIPIPE SOURCE_ROOT
Exit 0 = pass, 1 = fail (every broken check printed).
"""
import csv
import io
import json
import os
import subprocess
import sys

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


def run(wp, *args):
    p = subprocess.run([wp, "simulate", *args], capture_output=True, text=True)
    if not check(p.returncode == 0, f"simulate {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}"):
        return ""
    return p.stdout


def rows_csv(text):
    return list(csv.DictReader(io.StringIO(text)))


def fits_checks(wp, root):
    tiny = ["--config", os.path.join(root, "configs/tiny.ini"), "--nranks", "4", "--num-microbatches", "8",
            "--device-tflops", "1"]
    free = rows_csv(run(wp, "--strategy", "all", "--format", "csv", *tiny))
    peaks = sorted({int(r["peak_bytes_per_rank"]) for r in free if r["step_s"]})
    if not check(len(peaks) >= 2, f"tiny: want two different peaks, have {peaks}"):
        return
    check(all(r["fits"] == "true" for r in free if r["step_s"]), "without --device-memory every row fits")
    limit = (peaks[0] + peaks[-1]) // 2
    args = ["--strategy", "all", *tiny, "--device-memory", str(limit)]
    rows = rows_csv(run(wp, *args, "--format", "csv"))
    check(rows and list(rows[0].keys())[-1] == "fits", "csv: fits is not the last column")
    want = {r["strategy"]: int(r["peak_bytes_per_rank"]) <= limit for r in rows if r["step_s"]}
    check(set(want.values()) == {True, False}, f"limit {limit}: want rows that fit and rows that do not: {want}")
    for r in rows:
        if r["step_s"]:
            check(r["fits"] == ("true" if want[r["strategy"]] else "false"), f"csv {r['strategy']}: fits {r['fits']}")
    js = json.loads(run(wp, *args, "--format", "json") or "{}")
    for r in js.get("strategies", []):
        if "step_s" in r:
            check(r.get("fits") is want[r["strategy"]], f"json {r['strategy']}: fits {r.get('fits')}")
    text = run(wp, *args)
    for name, ok in want.items():
        line = [l for l in text.splitlines() if l.startswith(name + " ")]
        check(line and (("does not fit" in line[0]) != ok), f"text {name}: {line}")


def main():
    wp, root = sys.argv[1], sys.argv[2]
    fits_checks(wp, root)
    for f in failures:
        print("FAIL:", f)
    print("simulate honest: %s" % ("all checks passed" if not failures else f"{len(failures)} failures"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
