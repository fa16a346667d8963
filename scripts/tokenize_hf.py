#!/usr/bin/env python3
"""Text files -> token shards through a Hugging Face tokenizer.json with the `tokenizers` library:
the reference `weipipe prepare --tokenizer tokenizer.json` is tested against (it writes the same
shards, encoding in C).

    tokenize_hf.py TEXT_FILE... --tokenizer tokenizer.json --out DIR [--val-fraction F]
                   [--vocab-size V] [--shard-tokens N]

The same shards and the same rules as `weipipe prepare` (docs/formats.md): each input is one
document, its first (1-F) of bytes (the split moved forward to a UTF-8 character boundary) to
training and the rest to validation; each non-empty part starts with the tokenizer's BOS (its
EOS when it has none: GPT-2's <|endoftext|>), then the part's text encoded without the
tokenizer's own special tokens (add_special_tokens=False), in pieces of at most 8 MiB cut after
a newline; DIR/train_000.bin, ... and DIR/val_000.bin, ... in llm.c's layout, version 1 (uint16)
when the vocabulary is at most 65536, else version 7 (uint32); the tokenizer copied to
DIR/tokenizer.json (with tokenizer_config.json when it sits beside it, where BOS/EOS are named).
All files are written under temporary names and renamed only when every one is complete; shards
of an earlier, larger run are removed, and so is a tokenizer.model of an earlier run.

BOS/EOS are found as weipipe finds them (src/io/tokenizer/tokenizer.c): bos_token / eos_token of a
tokenizer_config.json beside the tokenizer.json, else (BOS) the special token the file's
TemplateProcessing puts first, else <|begin_of_text|> / <s> for BOS and
<|end_of_text|> / <|endoftext|> / </s> for EOS.

Needs the `tokenizers` library (PyPI), e.g. in a venv that sees Debian's packages:
    /usr/bin/python3 -m venv --system-site-packages VENV && VENV/bin/pip install tokenizers
Exit 2 with one line naming the culprit on bad input (missing file, not a tokenizer.json, a
vocabulary above --vocab-size); 1 when writing fails; 77 when `tokenizers` is not installed.
"""
import argparse
import array
import json
import os
import shutil
import sys
import time

MAGIC = {1: 20240520, 7: 20240801}
PIECE = 8 << 20
PROGRESS_BIG = 64 << 20


def die(msg, code=2):
    print(f"tokenize_hf: {msg}", file=sys.stderr)
    sys.exit(code)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfenv  # noqa: E402

hfenv.use("tokenizers")  # scripts/setup.sh's venv when this Python lacks it
try:
    from tokenizers import Tokenizer
except ImportError as e:
    print(f"tokenize_hf: skipped: {e} (pip install tokenizers, see --help)", file=sys.stderr)
    sys.exit(77)


def template_bos(tok):
    """The special token the file's TemplateProcessing puts first (alone or in a Sequence), -1 when none."""
    def find(pp):
        if not isinstance(pp, dict):
            return -1
        if pp.get("type") == "Sequence":
            for p in pp.get("processors", []):
                if find(p) >= 0:
                    return find(p)
            return -1
        if pp.get("type") != "TemplateProcessing" or not pp.get("single"):
            return -1
        name = pp["single"][0].get("SpecialToken", {}).get("id")
        ids = pp.get("special_tokens", {}).get(name, {}).get("ids", []) if name else []
        return ids[0] if ids and 0 <= ids[0] < tok.get_vocab_size(with_added_tokens=True) else -1
    return find(json.loads(tok.to_str()).get("post_processor"))


def special_ids(path, tok):
    """(bos, eos) as src/io/tokenizer/tokenizer.c finds them; -1 when none."""
    vocab = tok.get_vocab(with_added_tokens=True)

    def find(name):
        return vocab.get(name, -1) if name else -1

    bos = eos = -1
    cfg = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    if os.path.exists(cfg):
        try:
            c = json.load(open(cfg))
            for key in ("bos_token", "eos_token"):
                v = c.get(key)
                if isinstance(v, dict):
                    v = v.get("content")
                if isinstance(v, str):
                    if key == "bos_token":
                        bos = find(v)
                    else:
                        eos = find(v)
        except (OSError, ValueError):
            pass  # as in C: an unreadable config is no config
    if bos < 0:
        bos = template_bos(tok)
    for name in ("<|begin_of_text|>", "<s>"):
        if bos < 0:
            bos = find(name)
    for name in ("<|end_of_text|>", "<|endoftext|>", "</s>"):
        if eos < 0:
            eos = find(name)
    return bos, eos


class Run:
    """train_000.bin, train_001.bin, ... each written to a .tmp name first."""

    def __init__(self, out, prefix, version, shard_tokens):
        self.out, self.prefix, self.version, self.shard_tokens = out, prefix, version, shard_tokens
        self.files, self.buf, self.tokens = [], array.array("H" if version == 1 else "I"), 0

    def name(self, i):
        return os.path.join(self.out, f"{self.prefix}_{i:03d}.bin")

    def append(self, ids):
        self.buf.extend(ids)
        self.tokens += len(ids)
        while len(self.buf) >= self.shard_tokens:
            self.flush(self.buf[: self.shard_tokens])
            self.buf = self.buf[self.shard_tokens:]

    def flush(self, toks):
        tmp = self.name(len(self.files)) + ".tmp"
        header = array.array("i", [MAGIC[self.version], self.version, len(toks)] + [0] * 253)
        if sys.byteorder != "little":
            header.byteswap()
            toks = array.array(toks.typecode, toks)
            toks.byteswap()
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            f.write(toks.tobytes())
            f.flush()
            os.fsync(f.fileno())
        self.files.append(tmp)

    def close(self):
        if len(self.buf):
            self.flush(self.buf)
            self.buf = self.buf[:0]

    def commit(self):
        for i, tmp in enumerate(self.files):
            os.rename(tmp, self.name(i))
        i = len(self.files)
        while os.path.exists(self.name(i)):
            os.unlink(self.name(i))
            i += 1

    def abort(self):
        for tmp in self.files:
            if os.path.exists(tmp):
                os.unlink(tmp)


def pieces(text):
    """Cuts a part into pieces of at most PIECE bytes after a newline (as prepare.c does)."""
    at = 0
    while at < len(text):
        n = len(text) - at
        if n > PIECE:
            nl = text.rfind(b"\n", at, at + PIECE)
            if nl >= 0:
                n = nl + 1 - at
            else:
                n = PIECE
                while n > 1 and (text[at + n] & 0xC0) == 0x80:
                    n -= 1
        yield text[at:at + n]
        at += n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--vocab-size", type=int, default=0, help="default: the tokenizer's")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    if not 0 <= a.val_fraction < 1:
        die(f"--val-fraction: {a.val_fraction} must be in [0, 1)")
    try:
        tok = Tokenizer.from_file(a.tokenizer)
    except Exception as e:  # the library raises Exception for a bad file
        die(f"--tokenizer {a.tokenizer}: not a tokenizer.json: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    tok.no_truncation()  # whole documents, as weipipe prepare
    tok.no_padding()
    tv = max(tok.get_vocab(with_added_tokens=True).values()) + 1
    vocab = a.vocab_size or tv
    if vocab < tv or vocab > 2**31 - 1:
        die(f"--vocab-size: {vocab} is below the vocabulary of the tokenizer {a.tokenizer} ({tv}) or above 2^31-1")
    bos, eos = special_ids(a.tokenizer, tok)
    boundary = bos if bos >= 0 else eos
    if boundary < 0:
        die(f"{a.tokenizer}: the tokenizer has neither a BOS nor an EOS token to start documents with")
    sizes = []
    for p in a.inputs:
        if not os.path.isfile(p) or not os.access(p, os.R_OK):
            die(f"{p}: cannot read input")
        sizes.append(os.path.getsize(p))
    version = 1 if vocab <= 65536 else 7
    os.makedirs(a.out, exist_ok=True)
    train, val = Run(a.out, "train", version, a.shard_tokens), Run(a.out, "val", version, a.shard_tokens)
    total, done, start, last = sum(sizes), 0, time.monotonic(), time.monotonic()
    show = not a.quiet and (sys.stderr.isatty() or total >= PROGRESS_BIG)
    try:
        for p, size in zip(a.inputs, sizes):
            data = open(p, "rb").read()
            n_train = size - round(a.val_fraction * size)
            while n_train < size and (data[n_train] & 0xC0) == 0x80:
                n_train += 1
            for run, part in ((train, data[:n_train]), (val, data[n_train:])):
                if not part:
                    continue
                run.append([boundary])
                for piece in pieces(part):
                    # undecodable bytes become U+FFFD, as they would in any text pipeline
                    run.append(tok.encode(piece.decode("utf-8", errors="replace"), add_special_tokens=False).ids)
                    done += len(piece)
                    now = time.monotonic()
                    if show and now - last >= 1.0 and done < total:
                        last, el = now, now - start
                        toks = train.tokens + val.tokens
                        print(f"tokenize_hf: {done / 1e6:.1f} of {total / 1e6:.1f} MB ({100 * done / total:.0f}%), "
                              f"{toks} tokens, {toks / el:.0f} tokens/s, ETA {el * (total - done) / done:.0f} s",
                              file=sys.stderr)
        train.close()
        val.close()
        # the tokenizer first (atomic), then the shards take their names
        for name, src in (("tokenizer.json", a.tokenizer),
                          ("tokenizer_config.json", os.path.join(os.path.dirname(a.tokenizer), "tokenizer_config.json"))):
            dst = os.path.join(a.out, name)
            if not os.path.exists(src):
                continue
            if os.path.abspath(src) != os.path.abspath(dst):
                shutil.copyfile(src, dst + ".tmp")
                os.replace(dst + ".tmp", dst)
        stale = os.path.join(a.out, "tokenizer.model")
        if os.path.exists(stale):
            os.unlink(stale)
        train.commit()
        val.commit()
    except OSError as e:
        train.abort()
        val.abort()
        die(f"{e.filename or a.out}: {e.strerror}", 1)
    if not a.quiet:
        print(f"tokenize_hf: {len(a.inputs)} input file(s) -> {a.out}: {train.tokens} training tokens in "
              f"{len(train.files)} shard(s), {val.tokens} validation tokens in {len(val.files)} shard(s) "
              f"(tokens of {a.tokenizer}, vocabulary {vocab}: llm.c version {version})")


if __name__ == "__main__":
    main()
