#!/usr/bin/env python3
"""Reference side of test_tokenizer's tokenizer.json case: Hugging Face's `tokenizers` library.

    tok_hf_ref.py make DIR    a byte-level BPE (GPT-2 / Llama-3 layout) trained here on random
                              text, with special tokens at both ends of the id range and a plain
                              added token: DIR/tokenizer.json, DIR/facts.txt ("vocab bos eos"),
                              DIR/cases.txt (id sequences, one a line)
    tok_hf_ref.py check DIR   DIR/ours.txt (weipipe's decode of each case, hex) against
                              Tokenizer.decode(ids, skip_special_tokens=False)
Exit 77 when the library is not importable, 1 on a difference."""
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import hfenv  # noqa: E402

hfenv.use("tokenizers")  # setup.sh's venv when this Python lacks it
try:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:
    print(f"tok_hf_ref: skipped: {e}", file=sys.stderr)
    sys.exit(77)

SYL = ["ka", "to", "ri", "mu", "sen", "tha", " an", " es", "ol", "qu", "é", "ü", "の", "日本", ",", ".", "\n",
       " ", "x", "zz", "42", "Ω", "ing", " the", "pre", "\t", "😀"]


def text(rng, words):
    return "".join(rng.choice(SYL) for _ in range(words))


def make(d):
    rng = random.Random(17)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text(rng, 40) for _ in range(300)], trainer)
    # Llama-3's special tokens come after the BPE ids; a plain added token with a space in it is
    # not in the byte-level alphabet, so it decodes as its own bytes
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    tok.add_tokens([AddedToken("hello world", special=False)])
    tok.save(os.path.join(d, "tokenizer.json"))
    v = tok.get_vocab_size(with_added_tokens=True)
    with open(os.path.join(d, "facts.txt"), "w") as f:
        f.write(f"{v} {tok.token_to_id('<|begin_of_text|>')} {tok.token_to_id('<|end_of_text|>')}\n")
    # random ids over the whole range, less the byte-0 token (weipipe drops NUL bytes, which
    # would change how a partial UTF-8 sequence around it is replaced), then real encodings
    nul = tok.token_to_id("\u0100")
    cases = []
    for _ in range(40):
        cases.append([i for i in (rng.randrange(v) for _ in range(rng.randrange(0, 50))) if i != nul])
    for _ in range(40):
        cases.append(tok.encode(text(rng, rng.randrange(1, 60)) + rng.choice(["", "<|end_of_text|>", "hello world"])).ids)
    with open(os.path.join(d, "cases.txt"), "w") as f:
        for c in cases:
            f.write(" ".join(map(str, c)) + "\n")


def check(d):
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    cases = [[int(x) for x in line.split()] for line in open(os.path.join(d, "cases.txt")).read().split("\n")[:-1]]
    ours = open(os.path.join(d, "ours.txt")).read().split("\n")[:-1]
    assert len(ours) == len(cases), f"{len(ours)} decodes for {len(cases)} cases"
    bad = 0
    for k, (ids, h) in enumerate(zip(cases, ours)):
        want = tok.decode(ids, skip_special_tokens=False).replace("\x00", "")
        # the library returns String::from_utf8_lossy of the bytes; ours are the bytes
        got = bytes.fromhex(h).decode("utf-8", errors="replace")
        if got != want:
            bad += 1
            print(f"case {k} {ids}: weipipe {got!r}, tokenizers {want!r}", file=sys.stderr)
    print(f"tok_hf_ref: {len(cases) - bad} of {len(cases)} decodes equal to tokenizers {tok.__class__.__module__}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
