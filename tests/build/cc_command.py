#!/usr/bin/env python3
"""The compile command ninja uses for a source of the tree, from compile_commands.json.

usage: cc_command.py COMPILE_COMMANDS_JSON SOURCE_ROOT PATH
PATH is a source file (its own command) or a folder (the first C source under it). Prints two
lines: the directory the command runs in, and the command without the source, the output and the
dependency-file arguments (the flags only). Prints nothing when no command matches. Shared by
tests/build/layers.sh (probes per layer folder) and tests/build/new_op.sh (one file's command).
"""
import json
import os
import shlex
import sys

db, root, path = sys.argv[1:4]
# under the source root: a checkout at /x/ring/ must not make every file "ring"'s
want = os.path.join(os.path.realpath(root), path)
for e in json.load(open(db)):
    src = os.path.realpath(os.path.join(e["directory"], e["file"]))
    if src == want or (src.startswith(want + "/") and src.endswith(".c")):
        out, skip = [], False
        args = shlex.split(e["command"])
        # a compiler launcher meson found (ccache, sccache) goes: the callers put flags after the
        # first word, which must be the compiler itself
        while args and os.path.basename(args[0]) in ("ccache", "sccache"):
            args = args[1:]
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("-o", "-MF", "-MQ", "-MT"):
                skip = True
                continue
            if a in ("-c", "-MD") or a == e["file"]:
                continue
            out.append(a)
        print(e["directory"])
        print(shlex.join(out))
        break
