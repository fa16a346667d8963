#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz corpus (fuzz/corpus/<target>/seed-*): valid inputs
that reach deep into each parser, from which libFuzzer mutates. Usage: make_seeds.py WEIPIPE
(the binary makes the checkpoint seeds). Layouts: ring/wire.c, src/io/data/shard.h, fuzz/fuzz_*.c."""
import os, struct, subprocess, sys, tempfile, zlib

root = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(root, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def handshake(kind, rank, world, stream, nstreams, frame_bytes, job, secret, addr=b""):
    h = bytearray(232)
    h[0:8] = b"WEIPIPE\n"
    struct.pack_into("<HHIIHHI", h, 8, 1, kind, rank, world, stream, nstreams, frame_bytes)
    for off, s in ((32, job), (96, secret), (160, addr)):
        h[off:off + len(s)] = s
    struct.pack_into("<I", h, 224, zlib.crc32(bytes(h[:224])))
    return bytes(h)


def frame(ftype, channel, payload, seq=0, a=0, b=0):
    h = bytearray(48)
    struct.pack_into("<IBBxxIxxxxQQQ", h, 0, 0x52465057, ftype, channel, len(payload), seq, a, b)
    struct.pack_into("<I", h, 40, zlib.crc32(payload, zlib.crc32(bytes(h[:40]))))
    return bytes(h) + payload


def frames():
    ok = handshake(1, 0, 4, 1, 2, 1 << 20, b"job", b"secret")
    put("frame", "data", ok + frame(1, 0, bytes(range(64)), 1, 0, 64))
    put("frame", "cts-abort", ok + frame(2, 1, b"W[3]@1", 7, 0, 4096) + frame(3, 0, b"rank 2 failed: test"))
    ctl = handshake(3, 2, 4, 0, 1, 0, b"job", b"secret", b"127.0.0.1:4000")
    put("frame", "control", ctl + frame(16, 0, struct.pack("<IIII", 2, 0, 1, 0) + struct.pack("<d", 1.5), 3))
    put("frame", "wrong-secret", handshake(1, 0, 4, 0, 2, 1 << 20, b"job", b"guess"))
    put("frame", "wrong-version", ok[:8] + b"\x07" + ok[9:])


def configs():
    cfgdir = os.path.join(root, "..", "configs")
    for n in sorted(os.listdir(cfgdir)):
        if n.endswith(".ini"):
            put("config", n, b"\x00" + open(os.path.join(cfgdir, n), "rb").read())
    put("config", "sections", b"\x01[pipeline]\nstrategy = wzb2\nnranks = 4\n[links]\nlink-bandwidth = 10Gbit\nlink-latency = 5us\ndevice-memory = 8G\n")


def clis():
    put("cli", "train", b"\x00".join([b"train", b"--nranks", b"4", b"--strategy=wzb1", b"--link-bandwidth", b"25GByte",
                                       b"--timeout", b"90s", b"--chunk-layers", b"3,2,3", b"--recompute", b"--lr", b"1e-3"]))
    put("cli", "simulate", b"\x00".join([b"simulate", b"--strategy", b"all", b"--device-memory", b"80G", b"--format=json"]))
    put("cli", "prepare", b"\x00".join([b"prepare", b"in.txt", b"--out", b"d", b"--val-fraction", b"0.1"]))


def shards():
    toks = list(range(200)) * 3
    put("shard", "valid", struct.pack("<H", 255) + struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)) + struct.pack("<%dH" % len(toks), *toks))
    put("shard", "short", struct.pack("<H", 1000) + struct.pack("<256i", 20240520, 1, 50, *([0] * 253)) + b"\x01\x00" * 10)
    # version 7 (llm.c's Llama-3 shards): uint32 tokens
    put("shard", "valid-v7", struct.pack("<H", 255) + struct.pack("<256i", 20240801, 7, len(toks), *([0] * 253)) + struct.pack("<%dI" % len(toks), *toks))
    put("shard", "v7-wide-token", struct.pack("<H", 65535) + struct.pack("<256i", 20240801, 7, 3, *([0] * 253)) + struct.pack("<3I", 1, 128000, 2))


def checkpoints(weipipe):
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "tok.bin")
        toks = [i % 256 for i in range(4096)]
        with open(data, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)) + struct.pack("<%dH" % len(toks), *toks))
        subprocess.run([weipipe, "train", "--data", data, "--num-layers", "1", "--hidden-size", "8", "--num-attention-heads", "1",
                        "--ffn-hidden-size", "32", "--seq-length", "8", "--steps", "1", "--nranks", "1", "--quiet",
                        "--save", os.path.join(d, "ck")], check=True)
        step = os.path.join(d, "ck", "step-1")
        put("checkpoint", "manifest", b"\x00" + open(os.path.join(step, "manifest.json"), "rb").read())
        put("checkpoint", "shard", b"\x01" + open(os.path.join(step, "rank-00000.safetensors"), "rb").read())


def ggufs():
    """The tiny llama GGUF of tests/faults/gguf_bad.py, with a gpt2 tokenizer, and its lies."""
    sys.path.insert(0, os.path.join(root, "..", "tests", "faults"))
    import gguf_bad as g

    good = g.build()

    def arr_str(key, items):
        return g.s(key) + struct.pack("<IIQ", 9, 8, len(items)) + b"".join(g.s(x) for x in items)

    tok = (g.kv("tokenizer.ggml.model", 8, "gpt2") + g.kv("tokenizer.ggml.pre", 8, "smollm")
           + arr_str("tokenizer.ggml.tokens", ["a", "b", "ab"]) + g.s("tokenizer.ggml.token_type")
           + struct.pack("<IIQ3i", 9, 5, 3, 3, 1, 1) + arr_str("tokenizer.ggml.merges", ["a b"]))
    nkv = struct.unpack("<Q", good[16:24])[0]
    put("gguf", "valid", good)
    put("gguf", "tokenizer", good[:16] + struct.pack("<Q", nkv + 5) + tok + good[24:])
    for name, blob in {"cut-header": good[:60], "cut-kv": good[:300], "cut-infos": good[:420], "cut-data": good[:-40],
                       "tensor-count": g.build(n_tensors=1 << 40), "kv-count": g.build(n_kv=1 << 40),
                       "offset": g.build(offset_of=lambda n, o: o + (1 << 20) if n == "output_norm.weight" else o),
                       "dims": g.build(dims_of=lambda n, d: [1 << 32] * 3 if n == "output_norm.weight" else d),
                       "name": g.build(name_len=1 << 50), "overlap": g.build(overlap=True), "align": g.build(align=3),
                       "arch": g.build(arch="falcon"), "type99": g.build(type_of=lambda n: 99 if n == "blk.0.ffn_up.weight" else 0),
                       "q4_1": g.build(type_of=lambda n: 3 if n == "blk.0.ffn_up.weight" else 0)}.items():
        put("gguf", name, blob)


def tokenizers():
    """Small tokenizer.json files of each part the encoder has (byte-level BPE, added tokens,
    normalizers, Split, Metaspace, byte fallback) and GGUF files holding only tokenizer.ggml.*
    keys, with the two inputs that crashed before issue 42 (int32 tokens; an empty vocabulary
    with an unk_token)."""
    import json
    sys.path.insert(0, os.path.join(root, "..", "tests", "faults"))
    import gguf_bad as g

    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    vocab = {chr(0x100 + i) if i < 33 else chr(i): i for i in range(127)}
    vocab.update({"ab": 127, "<unk>": 128})
    model = {"type": "BPE", "vocab": vocab, "merges": ["a b"], "unk_token": "<unk>"}
    base = {"version": "1.0", "added_tokens": [{"id": 129, "content": "<s>", "special": True}], "normalizer": None,
            "pre_tokenizer": bl, "decoder": {"type": "ByteLevel"}, "model": model}
    variants = {
        "bytelevel": {},
        "normalizers": {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Prepend", "prepend": "_"},
                                                                            {"type": "Replace", "pattern": {"String": " "}, "content": "_"}]}},
        "split": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False}, bl]}},
        "metaspace": {"pre_tokenizer": {"type": "Metaspace", "replacement": "_", "prepend_scheme": "first", "split": True},
                      "decoder": {"type": "Metaspace", "replacement": "_", "prepend_scheme": "first", "split": True}},
        "empty-vocab-unk": {"model": {"type": "BPE", "vocab": {}, "merges": [], "unk_token": "<unk>"}, "added_tokens": []},
        "replace-bomb": {"normalizer": {"type": "Replace", "pattern": {"String": "a"}, "content": "a" * 1000}},
        "redos": {"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated"}},
    }
    for name, change in variants.items():
        put("tokenizer", name, json.dumps(dict(base, **change)).encode())

    def arr(key, atype, items):
        body = b"".join(g.s(x) for x in items) if atype == 8 else struct.pack("<%di" % len(items), *items)
        return g.s(key) + struct.pack("<IIQ", 9, atype, len(items)) + body

    def gguf_tok(tokens):
        kvs = [g.kv("tokenizer.ggml.model", 8, "gpt2"), g.kv("tokenizer.ggml.pre", 8, "smollm"), tokens,
               arr("tokenizer.ggml.token_type", 5, [1, 1, 1]), arr("tokenizer.ggml.merges", 8, ["a b"])]
        return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)

    put("tokenizer", "gguf", gguf_tok(arr("tokenizer.ggml.tokens", 8, ["a", "b", "ab"])))
    put("tokenizer", "gguf-int32-tokens", gguf_tok(arr("tokenizer.ggml.tokens", 5, [1, 2, 3])))


frames()
configs()
clis()
shards()
ggufs()
tokenizers()
checkpoints(sys.argv[1])
