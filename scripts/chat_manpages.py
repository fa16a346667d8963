#!/usr/bin/env python3
"""A small chat set from the manual pages every Debian system has: questions about coreutils'
commands, answered with sentences taken from their man pages (/usr/share/man/man1/CMD.1.gz).

    scripts/chat_manpages.py OUT.jsonl

Each line of OUT.jsonl is {"messages": [...]} (weipipe prepare --chat). Two conversations per
page, in the order of the fixed list below:
  1. "What does the CMD command do?" -> "The manual page of CMD describes it as: <its NAME line>."
  2. (with a system turn) "Tell me more about CMD." -> the first sentence of its DESCRIPTION.
Deterministic: the same pages give the same file; a page missing here is left out (stderr
counts them). coreutils is Essential in Debian, so its pages are there after scripts/setup.sh
unless the image strips /usr/share/man. Exit 1 when fewer than 20 pages are found."""
import gzip
import json
import os
import re
import sys

MAN = "/usr/share/man/man1"
# coreutils' commands with a page of their own (the list is fixed: the set is the same everywhere)
COMMANDS = """arch b2sum base32 base64 basename basenc cat chgrp chmod chown cksum comm cp csplit cut date dd df
dircolors dirname du echo env expand expr factor fmt fold groups head hostid id install join link ln logname
ls md5sum mkdir mkfifo mknod mktemp mv nice nl nohup nproc numfmt od paste pathchk pinky pr printenv printf
ptx pwd readlink realpath rm rmdir seq sha1sum sha256sum shred shuf sleep sort split stat stdbuf stty sum
sync tac tail tee timeout touch tr truncate tsort tty uname unexpand uniq unlink users wc who whoami yes""".split()
SYSTEM = "You answer questions about the commands of a Debian system from their manual pages."


def plain(line):
    """A roff text line as text: font escapes dropped, \\- as -, a few named characters."""
    line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
    line = line.replace("\\-", "-").replace("\\(aq", "'").replace("\\(cq", "'").replace("\\(oq", "'")
    line = line.replace("\\(dq", '"').replace("\\e", "\\").replace("\\&", "").replace("\\,", "").replace("\\/", "")
    return re.sub(r"\\.", "", line).strip()


def sections(path):
    """{section name: [text lines of its first paragraph]} of a gzipped man page."""
    out, name, para_done = {}, None, False
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if line.startswith(".SH"):
                name = line[3:].strip().strip('"').upper()
                out[name], para_done = [], False
            elif name is None or line.startswith('.\\"'):
                continue
            elif line.startswith("."):
                macro = line.split()[0]
                if macro in (".B", ".I", ".BR", ".IR", ".RB", ".RI") and not para_done:
                    out[name].append(plain(" ".join(line.split()[1:]).replace('"', "")))
                elif out[name]:
                    para_done = True  # a new paragraph, list or table ends the first one
            elif not para_done:
                out[name].append(plain(line))
    return out


def first_sentence(text, limit=240):
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    s = m.group(1) if m else text
    return s if len(s) <= limit else ""


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    convs, missing = [], []
    for cmd in COMMANDS:
        path = os.path.join(MAN, cmd + ".1.gz")
        if not os.path.exists(path):
            missing.append(cmd)
            continue
        sec = sections(path)
        name = " ".join(sec.get("NAME", []))
        what = name.split(" - ", 1)[1].strip() if " - " in name else ""
        desc = first_sentence(" ".join(x for x in sec.get("DESCRIPTION", []) if x))
        if what:
            convs.append([{"role": "user", "content": f"What does the {cmd} command do?"},
                          {"role": "assistant", "content": f"The manual page of {cmd} describes it as: {what.rstrip('.')}."}])
        if desc and not desc.startswith("This manual page"):  # a few pages open with their own history
            convs.append([{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Tell me more about {cmd}."},
                          {"role": "assistant", "content": desc}])
    found = len(COMMANDS) - len(missing)
    print(f"chat_manpages: {len(convs)} conversations from {found} man pages in {MAN}"
          + (f" ({len(missing)} missing: {' '.join(missing)})" if missing else ""), file=sys.stderr)
    if found < 20:
        print(f"chat_manpages: too few pages in {MAN} (is man-db's content stripped from this image?)", file=sys.stderr)
        return 1
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
