#!/usr/bin/python3
"""GGUF files that lie: `weipipe train --init-from BAD.gguf` must exit 2 with one line naming the
file and the field, and write nothing (no --save directory).

    gguf_bad.py WEIPIPE DATA_SHARD

A tiny valid llama GGUF (F32, 1 layer, h 8, 2 heads, 1 KV head, V 256, tied) is written by hand
(struct, not the gguf package: the lies are easier to tell byte by byte) and first trained from
(exit 0: the control that lets each lie fail), then broken one field at a time.
"""
import os
import struct
import subprocess
import sys
import tempfile

H, HEADS, KV, FFN, V = 8, 2, 1, 16, 256
HD = H // HEADS
U32, F32, STR, ARR = 4, 6, 8, 9


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, val):
    if typ == U32:
        body = struct.pack("<I", val)
    elif typ == F32:
        body = struct.pack("<f", val)
    else:
        body = s(val)
    return s(key) + struct.pack("<I", typ) + body


def tensors():
    out = [("token_embd.weight", [H, V]), ("output_norm.weight", [H])]
    for name, dims in [("attn_norm", [H]), ("attn_q", [H, H]), ("attn_k", [H, KV * HD]), ("attn_v", [H, KV * HD]),
                       ("attn_output", [H, H]), ("ffn_norm", [H]), ("ffn_gate", [H, FFN]), ("ffn_up", [H, FFN]),
                       ("ffn_down", [FFN, H])]:
        out.append((f"blk.0.{name}.weight", dims))
    return out


def build(arch="llama", n_tensors=None, n_kv=None, offset_of=None, dims_of=None, type_of=None, name_len=None,
          align=None, overlap=False):
    kvs = [kv("general.architecture", STR, arch), kv("llama.block_count", U32, 1),
           kv("llama.embedding_length", U32, H), kv("llama.feed_forward_length", U32, FFN),
           kv("llama.attention.head_count", U32, HEADS), kv("llama.attention.head_count_kv", U32, KV),
           kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-5), kv("llama.context_length", U32, 64),
           kv("llama.vocab_size", U32, V)]
    if align:
        kvs.append(kv("general.alignment", U32, align))
    infos, data, off = b"", b"", 0
    for i, (name, dims) in enumerate(tensors()):
        n = 1
        for d in dims:
            n *= d
        payload = struct.pack(f"<{n}f", *[((i * 31 + k) % 17 - 8) / 16 for k in range(n)])
        d = dims_of(name, dims) if dims_of else dims
        t = type_of(name) if type_of else 0
        o = offset_of(name, off) if offset_of else off
        if overlap and i == 1:
            o = 0
        nm = s(name) if not (name_len and i == 0) else struct.pack("<Q", name_len) + name.encode()
        infos += nm + struct.pack("<I", len(d)) + b"".join(struct.pack("<Q", x) for x in d) + struct.pack("<IQ", t, o)
        data += payload + b"\0" * ((-len(payload)) % 32)
        off = len(data)
    nt = len(tensors()) if n_tensors is None else n_tensors
    nk = len(kvs) if n_kv is None else n_kv
    head = b"GGUF" + struct.pack("<IQQ", 3, nt, nk) + b"".join(kvs) + infos
    return head + b"\0" * ((-len(head)) % 32) + data


def main():
    weipipe, shard = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    good = build()
    cases = [
        ("cut short in the header", good[:60], "cut short"),
        ("cut short in the key/value section", good[:300], "key: string length 38"),
        ("cut short in the tensor infos", good[:420], "cut short"),
        ("cut short in the tensor data", good[:-40], "past the end"),
        ("tensor_count 2^40", build(n_tensors=1 << 40), "tensor_count"),
        ("kv_count 2^40", build(n_kv=1 << 40), "kv_count"),
        ("a tensor offset past the end", build(offset_of=lambda n, o: o + (1 << 20) if n == "output_norm.weight" else o),
         "offset"),
        ("dims that overflow", build(dims_of=lambda n, d: [1 << 32, 1 << 32, 1 << 32] if n == "output_norm.weight" else d),
         "dims"),
        ("a name length past the end", build(name_len=1 << 50), "string length"),
        ("overlapping tensors", build(overlap=True), "overlaps"),
        ("alignment 3", build(align=3), "general.alignment"),
        ("another architecture", build(arch="falcon"), "general.architecture"),
        ("an unknown tensor type", build(type_of=lambda n: 99 if n == "blk.0.ffn_up.weight" else 0), "type 99"),
        ("a type weipipe does not dequantize", build(type_of=lambda n: 24 if n == "blk.0.ffn_up.weight" else 0), "I8"),
    ]
    fail = 0
    with tempfile.TemporaryDirectory(prefix="wp-gguf-bad-") as tmp:
        def train(name, blob):
            path, save = os.path.join(tmp, name + ".gguf"), os.path.join(tmp, name + "-save")
            with open(path, "wb") as f:
                f.write(blob)
            r = subprocess.run([weipipe, "train", "--init-from", path, "--data", shard, "--steps", "1", "--quiet",
                                "--seq-length", "16", "--save", save], capture_output=True, text=True)
            return path, save, r

        path, save, r = train("good", good)
        if r.returncode != 0 or not os.path.isdir(save):
            print(f"FAIL: the valid GGUF: exit {r.returncode}: {r.stderr.strip()}")
            return 1
        print("valid GGUF: trained one step, saved")
        for i, (what, blob, field) in enumerate(cases):
            path, save, r = train(f"bad{i}", blob)
            lines = r.stderr.strip().splitlines()
            ok = r.returncode == 2 and len(lines) == 1 and path in lines[0] and field in lines[0] and not os.path.exists(save)
            print(f"{'ok' if ok else 'FAIL'}: {what}: exit {r.returncode}: {r.stderr.strip()}"
                  + ("" if not os.path.exists(save) else " (and it saved)"))
            fail |= not ok
    return int(fail)


if __name__ == "__main__":
    sys.exit(main())
