#!/usr/bin/python3
"""Copy a `weipipe check` dump and corrupt exactly one thing in the copy.

Used by the negative tests: torch_ref.py must then exit 1, which shows that its 1e-4
tolerance catches one wrong gradient element (not only wholesale errors).

  corrupt_dump.py SRC DST grad   one element of one gradient tensor += 1e-3 * ||that gradient||
  corrupt_dump.py SRC DST param  one element of one norm weight += 0.05 (grads no longer match it)
  corrupt_dump.py SRC DST loss   the loss * (1 + 1e-3)
  corrupt_dump.py SRC DST rope   the reference told of no llama3 rope scaling (config.ini's
                                 rope-scaling-factor = 0): a model that ignored it would pass
  corrupt_dump.py SRC DST untie  the reference told the embeddings are untied: the dump's
                                 summed (tied) gradients must then fail
  corrupt_dump.py SRC DST nodoc  the reference told of no document masks (doc-mask = false):
                                 attention across documents must then change the loss
The tensor and element are drawn from --seed, so every run corrupts the same place.
"""
import argparse
import os
import random
import shutil
import sys

import numpy as np


def read_table(dump):
    rows = []
    with open(os.path.join(dump, "tensors.tsv"), encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 4 and fields[1].isdigit():
                rows.append((fields[0], int(fields[1]) * int(fields[2]), int(fields[3])))
    if not rows:
        raise SystemExit(f"corrupt_dump: {dump}/tensors.tsv lists no tensors")
    return rows


def bump(path, offset, numel, rng, amount):
    data = np.fromfile(path, dtype="<f4")
    piece = data[offset:offset + numel]
    i = rng.randrange(numel)
    step = amount(piece)
    data[offset + i] += step
    data.tofile(path)
    return i, step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("what", choices=["grad", "param", "loss", "rope", "untie", "nodoc"])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    shutil.copytree(args.src, args.dst)
    table = read_table(args.dst)
    if args.what == "grad":
        name, numel, offset = rng.choice(table)
        i, step = bump(os.path.join(args.dst, "grads.bin"), offset, numel, rng,
                       lambda g: 1e-3 * float(np.linalg.norm(g.astype(np.float64))))
    elif args.what == "param":
        name, numel, offset = rng.choice([row for row in table if row[0].endswith("norm.weight")])
        i, step = bump(os.path.join(args.dst, "params.bin"), offset, numel, rng, lambda p: 0.05)
    elif args.what in ("rope", "untie", "nodoc"):
        key, off = {"rope": ("rope-scaling-factor", "0"), "untie": ("tie-word-embeddings", "false"),
                    "nodoc": ("doc-mask", "false")}[args.what]
        path = os.path.join(args.dst, "config.ini")
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        found = [i for i, line in enumerate(lines) if line.replace(" ", "").startswith(key + "=")]
        if not found or lines[found[0]].split("=")[1].strip() in ("0", "false"):
            raise SystemExit(f"corrupt_dump: the dump has no {key} to turn off")
        lines[found[0]] = f"{key} = {off}"
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print(f"corrupt_dump: {key} -> {off}")
        return 0
    else:
        path = os.path.join(args.dst, "loss.txt")
        with open(path, encoding="utf-8") as f:
            loss = float(f.read().split()[0])
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"{loss * (1 + 1e-3):.9g}\n")
        print(f"corrupt_dump: loss {loss:.9g} -> {loss * (1 + 1e-3):.9g}")
        return 0
    print(f"corrupt_dump: {args.what} {name}[{i}] += {step:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
