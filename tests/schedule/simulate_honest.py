#!/usr/bin/python3
"""weipipe simulate's honest comparison from the outside:
  fits   every row of --strategy all in csv, json and text says whether its peak memory per rank
         is within --device-memory, recomputed here from the peak the row reports (a threshold
         between two strategies' peaks, so both answers occur).
  auto   --strategy auto on several presets: the csv has --strategy all's columns plus knobs,
         the rows that fit come first, best first; its pick (first row, and text's pick line) is
         the largest tokens/s among the rows that fit, never a row that does not fit (at a limit
         of the median peak: the fastest row of the unlimited listing within it); a sample of rows, the
         pick among them, run again as `simulate --strategy S KNOBS` gives the same tokens/s.
  host   --host-memory (per host, --optimizer-memory host's state of its --ranks-per-node ranks):
         --strategy all's rows fit exactly when their host_bytes_per_host is within it (a limit
         between two rows' needs), those over it say so (csv note "over host", json over "host",
         text "does not fit (host)"); auto under a --device-memory that only host state fits
         picks, with a host limit one byte under its pick's need, the fastest row of the unlimited
         listing within both limits (worked out here): the pick moves.

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


def host_checks(wp, root):
    base = ["--config", os.path.join(root, "configs/tiny.ini"), "--nranks", "4", "--ranks-per-node", "2",
            "--num-microbatches", "8", "--device-tflops", "1", "--optimizer-memory", "host"]
    free = json.loads(run(wp, "--strategy", "all", "--format", "json", *base) or "{}").get("strategies", [])
    needs = sorted({r["host_bytes_per_host"] for r in free if "step_s" in r})
    if not check(len(needs) >= 2 and needs[0] > 0, f"host: want two different host needs, have {needs}"):
        return
    limit = (needs[0] + needs[-1]) // 2
    args = ["--strategy", "all", *base, "--host-memory", str(limit)]
    want = {r["strategy"]: r["host_bytes_per_host"] <= limit for r in free if "step_s" in r}
    check(set(want.values()) == {True, False}, f"host limit {limit}: want rows that fit and rows that do not: {want}")
    for r in json.loads(run(wp, *args, "--format", "json") or "{}").get("strategies", []):
        if "step_s" in r:
            check(r["fits"] is want[r["strategy"]] and r["over"] == ("" if want[r["strategy"]] else "host"),
                  f"host json {r['strategy']}: fits {r['fits']} over '{r['over']}'")
    for r in rows_csv(run(wp, *args, "--format", "csv")):
        if r["step_s"]:
            check((r["fits"], r["note"]) == (("true", "") if want[r["strategy"]] else ("false", "over host")),
                  f"host csv {r['strategy']}: fits {r['fits']} note '{r['note']}'")
    text = run(wp, *args)
    check("host memory: " in text and "per host (--host-memory), for 2 ranks" in text, "host text: no --host-memory line")
    for name, ok in want.items():
        line = [l for l in text.splitlines() if l.startswith(name + " ")]
        check(line and (("does not fit (host)" in line[0]) != ok), f"host text {name}: {line}")
    # auto: device state does not fit the device limit, host state does; then the host's limit
    auto = [a for a in base if a != "--optimizer-memory" and a != "host"] + ["--strategy", "auto"]
    rows = json.loads(run(wp, *auto, "--format", "json") or "{}").get("configurations", [])
    hp = [r["peak_bytes_per_rank"] for r in rows if "--optimizer-memory host" in r["knobs"]]
    dp = [r["peak_bytes_per_rank"] for r in rows if "--optimizer-memory host" not in r["knobs"]]
    if not check(hp and dp and min(hp) < min(dp), f"host auto: no host-state row below every device-state peak"):
        return
    dev = min(dp) - 1  # every host-state row under it fits the device, no device-state row does
    within = lambda r, h: r["peak_bytes_per_rank"] <= dev and r["host_bytes_per_host"] <= h
    first = json.loads(run(wp, *auto, "--device-memory", str(dev), "--format", "json") or "{}")
    pick = first.get("configurations", [{}])[0] if first.get("pick") == 0 else None
    if not check(pick and "--optimizer-memory host" in pick["knobs"], f"host auto: --device-memory {dev} picked {pick}"):
        return
    host = pick["host_bytes_per_host"] - 1
    fit = [r for r in rows if within(r, host)]
    best = max(fit, key=lambda r: r["tokens_per_s"]) if fit else None
    got = json.loads(run(wp, *auto, "--device-memory", str(dev), "--host-memory", str(host), "--format", "json") or "{}")
    conf = got.get("configurations", [])
    now = conf[0] if got.get("pick") == 0 else None
    check(best, f"host auto: no row within --host-memory {host}: the test shows no move to another row")
    check((now is None) == (best is None), f"host auto: pick {now}, want {best}")
    if now and best:
        check(now["tokens_per_s"] == best["tokens_per_s"] and within(now, host),
              f"host auto: pick {now['strategy']} {now['knobs']} {now['tokens_per_s']}, want {best['tokens_per_s']}")
        check((now["strategy"], now["knobs"]) != (pick["strategy"], pick["knobs"]), "host auto: the pick did not move")
    over = [r for r in conf if not r["fits"] and r["host_bytes_per_host"] > host and "host" not in r["over"]]
    check(not over, f"host auto: rows over --host-memory not marked: {over[:2]}")
    text = run(wp, *auto, "--device-memory", str(dev), "--host-memory", str(host))
    line = [l for l in text.splitlines() if l.startswith("pick:")]
    check(line and (line[0].startswith(f"pick: {now['strategy']} {now['knobs']}:") if now else "no configuration fits in"
                                                                                                  in line[0]),
          f"host auto text: {line}")
    print(f"host: --host-memory {limit} splits --strategy all; auto at --device-memory {dev}: {pick['strategy']} "
          f"{pick['knobs']} holds {pick['host_bytes_per_host']} per host, at --host-memory {host} the pick is "
          f"{(now['strategy'] + ' ' + now['knobs']) if now else 'none'}")


def auto_checks(wp, name, args):
    text = run(wp, "--strategy", "auto", "--format", "csv", *args)
    rows = rows_csv(text)
    if not check(len(rows) >= 5, f"{name}: auto lists {len(rows)} configurations"):
        return None
    all_cols = rows_csv(run(wp, "--strategy", "all", "--format", "csv", *args))
    want_cols = list(all_cols[0].keys()) + ["knobs"] if all_cols else []
    check(list(rows[0].keys()) == want_cols, f"{name}: auto columns {list(rows[0].keys())}, want {want_cols}")
    fit = [r for r in rows if r["fits"] == "true"]
    check(rows[:len(fit)] == fit, f"{name}: a row that does not fit is ranked among those that fit")
    rates = [float(r["tokens_per_s"]) for r in fit]
    check(rates == sorted(rates, reverse=True), f"{name}: rows that fit are not best first")
    if fit:
        best = max(rates)
        check(float(rows[0]["tokens_per_s"]) == best and rows[0]["fits"] == "true",
              f"{name}: pick {rows[0]['strategy']} {rows[0]['tokens_per_s']} is not the maximum {best} of the rows that fit")
        pick = [l for l in run(wp, "--strategy", "auto", *args).splitlines() if l.startswith("pick:")]
        check(pick and pick[0].startswith(f"pick: {rows[0]['strategy']} {rows[0]['knobs']}:"), f"{name}: text {pick}")
    for r in [rows[0]] + rows[1::max(1, len(rows) // 4)]:
        again = rows_csv(run(wp, "--strategy", r["strategy"], "--format", "csv", *args, *r["knobs"].split()))
        got = [a for a in again if a["strategy"] == r["strategy"]]
        check(got and got[0]["tokens_per_s"] == r["tokens_per_s"] and got[0]["peak_bytes_per_rank"] == r["peak_bytes_per_rank"],
              f"{name}: {r['strategy']} {r['knobs']}: auto says {r['tokens_per_s']}, direct {got[0]['tokens_per_s'] if got else None}")
    return rows


def main():
    wp, root = sys.argv[1], sys.argv[2]
    fits_checks(wp, root)
    host_checks(wp, root)
    cfg = lambda f: ["--config", os.path.join(root, "configs", f)]
    presets = {
        "tiny N=4 2 per node": cfg("tiny.ini") + ["--nranks", "4", "--num-microbatches", "8", "--device-tflops", "1",
                                                  "--ranks-per-node", "2", "--link-bandwidth", "1Gbit"],
        "small N=4": cfg("small.ini") + ["--nranks", "4", "--num-microbatches", "8", "--device-tflops", "10"],
        "paper s=4096": cfg("paper-h4096-s4k.ini"),
        "paper s=16384": cfg("paper-h4096-s16k.ini"),
    }
    for name, args in presets.items():
        auto_checks(wp, name, args)
    # a limit at the median peak: the pick must be the fastest row of the unlimited listing whose
    # peak is within it (worked out here), and the unlimited pick must move when it does not fit
    args = presets["paper s=16384"]
    rows = rows_csv(run(wp, "--strategy", "auto", "--format", "csv", *args, "--device-memory", "1000G"))
    if check(rows, "no rows with 1000G"):
        peaks = sorted(int(r["peak_bytes_per_rank"]) for r in rows)
        limit = peaks[len(peaks) // 2]
        within = [r for r in rows if int(r["peak_bytes_per_rank"]) <= limit]
        want = max(float(r["tokens_per_s"]) for r in within)
        tight = auto_checks(wp, "paper s=16384, median memory", args + ["--device-memory", str(limit)])
        if tight:
            check(float(tight[0]["tokens_per_s"]) == want and int(tight[0]["peak_bytes_per_rank"]) <= limit,
                  f"limit {limit}: pick {tight[0]['strategy']} {tight[0]['tokens_per_s']}, want {want}")
            if int(rows[0]["peak_bytes_per_rank"]) > limit:
                check((tight[0]["strategy"], tight[0]["knobs"]) != (rows[0]["strategy"], rows[0]["knobs"]),
                      "a limit below the fastest configuration's peak leaves it the pick")
    for f in failures:
        print("FAIL:", f)
    print("simulate honest: %s" % ("all checks passed" if not failures else f"{len(failures)} failures"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
