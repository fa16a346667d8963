#!/usr/bin/env python3
"""A model file is parsed once on the way in (issue 40): each process of a command that reads
SmolLM2's GGUF opens it exactly once, as strace sees it, however many things it takes from it.

    gguf_parse_once.py WEIPIPE

  - `weipipe prepare TEXT --tokenizer MODEL.gguf`: the tokenizer;
  - `weipipe sample MODEL.gguf --chat`: the config, the positions, the tokenizer, the chat
    template and the weights;
  - `weipipe train --init-from MODEL.gguf --nranks 2`: the launcher checks the job (the config),
    and each of the two rank processes it starts reads the config, the tokenizer kept with the
    checkpoints and its masters.
Each run must succeed and its trace must show one open(at) of the file in every process that
reads it (before the parsed handle, sample --chat opened it 8 times; a 2-rank train 2 times in the
launcher and 4 in each rank). Exit 77 without strace or the GGUF.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_smollm2 as g  # noqa: E402  (exits 77 itself when the venv lacks transformers or gguf)

fails = 0


def opens(weipipe, model, args, tmp, name):
    """The command's exit code, the most open/openat/openat2 calls of the file (by its last
    component, as strace prints the path given) by one process image (a thread id between two
    execve of it), their total, and how many weipipe images ran (execve: the command, a re-exec
    of itself, the rank processes a launcher starts). strace -f logs thread ids, not processes:
    the total, at most one per image, catches two threads of a process that each parse it."""
    log = os.path.join(tmp, name + ".strace")
    # LeakSanitizer cannot run under ptrace (it stops the process with "fatal error", exit 23 in
    # the ASan suite): the leak check is off for this traced run only
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat,openat2,execve", "-o", log, weipipe] + args,
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(f"FAIL: weipipe {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
        return r.returncode, -1, -1, -1
    base = os.path.basename(model)
    per, gen, n_proc = {}, {}, 0
    with open(log) as f:
        for line in f:
            tid = line.split()[0]
            if "execve(" in line and "weipipe" in line:
                n_proc += 1
                gen[tid] = gen.get(tid, 0) + 1
            elif base in line and ("open(" in line or "openat" in line):
                key = (tid, gen.get(tid, 0))
                per[key] = per.get(key, 0) + 1
    return 0, max(per.values(), default=0), sum(per.values()), n_proc


def check(what, rc, most, total, n_proc):
    global fails
    ok = rc == 0 and most == 1 and 1 <= total <= n_proc
    print(f"{'ok' if ok else 'FAIL'}: {what}: the GGUF opened {total} time(s) in {n_proc} weipipe process image(s), at most "
          f"{most} by one; want once by each that reads it")
    fails += 0 if ok else 1


if __name__ == "__main__":
    weipipe = sys.argv[1]
    if not shutil.which("strace"):
        print("skipped: no strace (Debian's strace package)")
        sys.exit(77)
    model = g.gguf_or_skip()
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "in.txt")
        with open(text, "w") as f:
            f.write(g.TEXT * 4)
        data = os.path.join(tmp, "data")
        check("prepare --tokenizer MODEL.gguf",
              *opens(weipipe, model, ["prepare", text, "--tokenizer", model, "--out", data, "--quiet"], tmp, "prepare"))
        check("sample MODEL.gguf --chat",
              *opens(weipipe, model, ["sample", model, "--chat", "--prompt", "Hi", "--max-new-tokens", "2", "--temperature", "0",
                               "--format", "ids"], tmp, "sample"))
        check("train --init-from MODEL.gguf --nranks 2",
              *opens(weipipe, model, ["train", "--init-from", model, "--data", data, "--nranks", "2", "--steps", "1",
                               "--seq-length", "16", "--micro-batch-size", "1", "--precision", "fp32"], tmp, "train"))
    sys.exit(1 if fails else 0)
