#!/usr/bin/env python3
"""weipipe prepare on JSON records (.jsonl, .json arrays), byte tokens, against shards this
test builds itself from the records (Python's json module parses them):

  - each record is one document: token 0, then its text's UTF-8 bytes; record k goes to
    validation when floor(f*(k+1)) > floor(f*k); --text-field picks the field; plain-text
    inputs given beside them are read whole as before;
  - a .json array (multi-line elements, strings holding brackets and commas) gives the same
    shards as the same records in JSON Lines;
  - every bad record exits 2 with one line naming FILE:LINE and the reason (not JSON, invalid
    UTF-8, no such field, a non-string, a record that is not an object, an array cut short),
    and leaves no shard; --skip-bad-records skips them and says how many, the first named;
  - --chat/--chat-template/--train-on refuse what they cannot do (no tokenizer, without --chat).

    prepare_jsonl.py WEIPIPE
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

W = os.path.abspath(sys.argv[1])
fails = 0


def check(ok, what):
    global fails
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        fails += 1


def run(*args):
    return subprocess.run([W, "prepare", *args], capture_output=True, text=True)


def read_shard(path):
    raw = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", raw[:12])
    assert magic == 20240520 and version == 1, (magic, version)
    return list(struct.unpack(f"<{count}H", raw[1024:1024 + 2 * count]))


def shards(d, split):
    out = []
    for name in sorted(os.listdir(d)):
        if name.startswith(split + "_") and name.endswith(".bin"):
            out += read_shard(os.path.join(d, name))
    return out


def expected(texts, f):
    train, val = [], []
    for k, t in enumerate(texts):
        part = val if math.floor(f * (k + 1)) > math.floor(f * k) else train
        part += [0] + list(t.encode("utf-8"))
    return train, val


TEXTS = ["hello world", "", "Grüße, 世界 🙂", "line one\nline two\n", "a \"quoted\" [x, y] {z}", "tab\there", "last"]

with tempfile.TemporaryDirectory(prefix="wp-jsonl-") as tmp:
    jl = os.path.join(tmp, "recs.jsonl")
    with open(jl, "w", encoding="utf-8") as fh:
        for i, t in enumerate(TEXTS):
            fh.write(json.dumps({"id": i, "text": t, "body": t.upper()}, ensure_ascii=(i % 2 == 0)) + "\n")
            if i == 2:
                fh.write("   \n")  # a blank line is skipped, lines still counted
    for f in (0.0, 0.5, 0.25):
        out = os.path.join(tmp, f"out{f}")
        r = run(jl, "--out", out, "--val-fraction", str(f))
        check(r.returncode == 0, f"jsonl, val-fraction {f}: exit 0 ({r.stderr.strip()})")
        tr, va = expected(TEXTS, f)
        check(shards(out, "train") == tr and shards(out, "val") == va, f"jsonl, val-fraction {f}: the shards of the records")
        check("7 records" in r.stdout, f"jsonl, val-fraction {f}: the record count is reported")

    # --text-field, and a plain-text input beside the records (read whole: one document)
    plain = os.path.join(tmp, "plain.txt")
    open(plain, "w").write("plain text stays as it is\n")
    out = os.path.join(tmp, "field")
    r = run(jl, plain, "--out", out, "--val-fraction", "0", "--text-field", "body")
    tr, _ = expected([t.upper() for t in TEXTS], 0.0)
    tr += [0] + list(b"plain text stays as it is\n")
    check(r.returncode == 0 and shards(out, "train") == tr, "--text-field body, and a plain-text input beside: its shards")

    # a JSON array: the same records, elements spread over lines
    arr = os.path.join(tmp, "recs.json")
    with open(arr, "w", encoding="utf-8") as fh:
        fh.write("[\n")
        for i, t in enumerate(TEXTS):
            fh.write(("," if i else "") + json.dumps({"text": t, "n": [i, {"k": "]},["}]}, indent=2) + "\n")
        fh.write("]\n")
    out_a, out_l = os.path.join(tmp, "arr"), os.path.join(tmp, "arr_l")
    r = run(arr, "--out", out_a, "--val-fraction", "0.25")
    r2 = run(jl, "--out", out_l, "--val-fraction", "0.25")
    check(r.returncode == 0 and shards(out_a, "train") == shards(out_l, "train") and shards(out_a, "val") == shards(out_l, "val"),
          f"a .json array gives the shards of the same records in JSON Lines ({r.stderr.strip()})")
    empty = os.path.join(tmp, "empty.json")
    open(empty, "w").write(" [ ] \n")
    r = run(empty, jl, "--out", os.path.join(tmp, "emptyarr"), "--val-fraction", "0")
    check(r.returncode == 0, f"an empty .json array is no records ({r.stderr.strip()})")

    # bad records: exit 2, one line naming FILE:LINE, no shard left
    good = json.dumps({"text": "fine"})
    cases = [
        ("not JSON", [good, '{"text": "cut', good], 2, "not JSON"),
        ("invalid UTF-8", [good, good, b'{"text": "caf\xe9"}'], 3, "invalid UTF-8"),
        ("missing field", [good, '{"txt": "x"}'], 2, 'no field "text"'),
        ("number", ['{"text": 5}'], 1, 'field "text" is a number, not a string'),
        ("null", [good, good, good, '{"text": null}'], 4, 'field "text" is null, not a string'),
        ("array record", ['["text"]'], 1, "not an object"),
        ("surrogate escape", ['{"text": "\\ud800"}'], 1, "not JSON"),
    ]
    for name, lines, line, why in cases:
        p = os.path.join(tmp, name.replace(" ", "_") + ".jsonl")
        with open(p, "wb") as fh:
            for x in lines:
                fh.write((x if isinstance(x, bytes) else x.encode()) + b"\n")
        out = os.path.join(tmp, "bad_" + name.replace(" ", "_"))
        r = run(p, "--out", out)
        err = r.stderr.strip()
        check(r.returncode == 2 and f"{p}:{line}: " in err and why in err and len(err.splitlines()) == 1,
              f"{name}: exit 2 naming {os.path.basename(p)}:{line} ({err})")
        check(not os.path.exists(out) or not any(n.endswith(".bin") for n in os.listdir(out)), f"{name}: no shard written")
        r = run(p, "--out", out, "--skip-bad-records", "--val-fraction", "0")
        n_good = sum(1 for x in lines if x == good)
        check(r.returncode == 0 and "skipped 1 bad record" in r.stderr and f"{p}:{line}: " in r.stderr and
              (n_good == 0 or shards(out, "train") == expected(["fine"] * n_good, 0.0)[0]),
              f"{name}: --skip-bad-records skips it, counts it and names it ({r.stderr.strip()})")
    cut = os.path.join(tmp, "cut.json")
    open(cut, "w").write('[{"text": "a"},\n {"text": "b"}\n')
    r = run(cut, "--out", os.path.join(tmp, "cut"), "--skip-bad-records")
    check(r.returncode == 2 and f"{cut}:3: " in r.stderr and "closing ']'" in r.stderr,
          f"an array cut short: exit 2 even with --skip-bad-records ({r.stderr.strip()})")

    # the chat flags refuse what they cannot do
    r = run(jl, "--out", os.path.join(tmp, "c1"), "--chat")
    check(r.returncode == 2 and "--tokenizer" in r.stderr, f"--chat without a tokenizer: exit 2 ({r.stderr.strip()})")
    r = run(jl, "--out", os.path.join(tmp, "c2"), "--chat-template", "chatml")
    check(r.returncode == 2 and "--chat" in r.stderr, f"--chat-template without --chat: exit 2 ({r.stderr.strip()})")
    r = run(jl, "--out", os.path.join(tmp, "c3"), "--train-on", "sometimes")
    check(r.returncode == 2 and "answers" in r.stderr, f"--train-on sometimes: exit 2 listing the choices ({r.stderr.strip()})")

sys.exit(1 if fails else 0)
