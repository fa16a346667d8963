#!/usr/bin/env python3
"""`weipipe export --format gguf` read back by llama.cpp's gguf package (GGUFReader) and by
transformers' GGUF loader: the same logits as the Hugging Face export of the same checkpoint.

    gguf_export.py WEIPIPE DATA_SHARD

A small GQA model (2 layers, h 64, 4 heads, 2 KV heads, V 320) trains 2 steps with a byte-level
BPE tokenizer.json made by `tokenizers` (its tokens, types and merges must come out as
tokenizer.ggml.*, padded to the model's 320 with [PADn] of type unused, and transformers'
tokenizer from the GGUF must encode a text as it does); it is exported as fp32 safetensors and
as GGUF at f32, f16 and bf16. GGUFReader must find general.architecture llama, the llama.*
hyperparameters, general.file_type, every matrix in the dtype asked and every 1-D tensor (the
norms) in F32, as llama.cpp's converter writes them (tests/reference/gguf_llamacpp.py runs the
files in llama.cpp). transformers' LlamaForCausalLM from the GGUF (Q/K un-permuted by
transformers' own reverse_permute) must give exactly the logits of the safetensors export with
its matrices rounded by torch to the GGUF's dtype (fp32 norms). Exit 77 without the venv.
"""
import os
import sys
import tempfile

os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import hfenv

    hfenv.use_transformers()
    import numpy as np
    import torch
    import gguf
    import gguf.quants
    import gguf_smollm2 as g  # patch_dequant, run
    from transformers import AutoModelForCausalLM, LlamaForCausalLM
except (ImportError, SystemExit) as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and gguf into its venv)")
    sys.exit(77)

VOCAB = 320
MODEL = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--num-query-groups", "2",
         "--ffn-hidden-size", "96", "--vocab-size", str(VOCAB), "--seq-length", "32"]
TEXT = "the keeper climbed the stairs to light the lamp; ships saw the beam sweep the water near the rocks"


def make_tokenizer(tmp):
    """A byte-level BPE of 300 tokens (GPT-2's pre-tokenizer, two special tokens), by `tokenizers`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT] * 20, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = os.path.join(tmp, "tokenizer.json")
    tok.save(path)
    return path


def check_tokenizer(path, tokjson):
    """tokenizer.ggml.* against the checkpoint's tokenizer.json: tokens, types, merges, and
    transformers' tokenizer built from the GGUF encodes as `tokenizers` does from the json."""
    import json
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    j, r = json.load(open(tokjson)), gguf.GGUFReader(path)
    want = sorted(j["model"]["vocab"], key=j["model"]["vocab"].get)
    want += [f"[PAD{i}]" for i in range(len(want), VOCAB)]  # the model's padded vocabulary, type 5 (unused)
    got = r.fields["tokenizer.ggml.tokens"].contents()
    merges = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    types = r.fields["tokenizer.ggml.token_type"].contents()
    ntok = len(j["model"]["vocab"])
    ok = got == want and r.fields["tokenizer.ggml.merges"].contents() == merges and types[:2] == [3, 3]
    ok &= types[2:ntok] == [1] * (ntok - 2) and types[ntok:] == [5] * (VOCAB - ntok)
    ok &= r.fields["tokenizer.ggml.model"].contents() == "gpt2" and r.fields["tokenizer.ggml.pre"].contents() == "gpt-2"
    d, name = os.path.split(path)
    enc = AutoTokenizer.from_pretrained(d, gguf_file=name, add_bos_token=False)(TEXT, add_special_tokens=False)["input_ids"]
    ref = Tokenizer.from_file(tokjson).encode(TEXT).ids
    print(f"tokenizer.ggml: {len(got)} tokens, {len(merges)} merges, {'equal' if ok else 'DIFFERENT'}; "
          f"transformers encodes from the GGUF as from the json: {enc == ref}")
    return int(not ok or enc != ref)


def main():
    weipipe, shard = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    g.patch_dequant(gguf.GGMLQuantizationType.BF16)
    fail = 0
    ids = torch.tensor([[(i * 37 + 11) % 256 for i in range(24)]])
    with tempfile.TemporaryDirectory(prefix="wp-gguf-out-") as tmp:
        ck, tokjson = os.path.join(tmp, "ck"), make_tokenizer(tmp)
        g.run(weipipe, "train", "--data", shard, "--steps", "2", "--save", ck, "--precision", "fp32", "--quiet",
            "--tokenizer", tokjson, *MODEL)
        hf = os.path.join(tmp, "hf")
        g.run(weipipe, "export", ck, hf, "--precision", "fp32", "--quiet")
        for prec, gtype, tdtype in [("fp32", "F32", None), ("mixed", "F16", torch.float16), ("bf16", "BF16", torch.bfloat16)]:
            gg = os.path.join(tmp, prec + ".gguf")
            g.run(weipipe, "export", ck, gg, "--format", "gguf", "--precision", prec, "--quiet")
            if os.path.exists(gg + ".tmp"):
                print(f"FAIL: {gg}.tmp left behind")
                fail = 1
            r = gguf.GGUFReader(gg)
            arch = r.fields["general.architecture"].contents()
            layers = r.fields["llama.block_count"].contents()
            kvh = r.fields["llama.attention.head_count_kv"].contents()
            types = {t.tensor_type.name for t in r.tensors}
            # llama.cpp's layout (convert_hf_to_gguf.py): matrices in the file's type, 1-D tensors (norms) in F32
            ok = all(t.tensor_type.name == ("F32" if len(t.shape) == 1 else gtype) for t in r.tensors)
            ok &= r.fields["general.file_type"].contents() == {"F32": 0, "F16": 1, "BF16": 32}[gtype]
            ok &= arch == "llama" and layers == 2 and kvh == 2 and len(r.tensors) == 2 + 9 * 2 + 1
            print(f"{prec}: GGUFReader: {arch}, {layers} layers, {kvh} KV heads, {len(r.tensors)} tensors of {sorted(types)}")
            fail |= not ok
            ref = LlamaForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
            if tdtype is not None:  # torch's own rounding of the matrices, the norms kept in fp32
                with torch.no_grad():
                    for p in ref.parameters():
                        if p.dim() == 2:
                            p.copy_(p.to(tdtype).float())
            mine = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=os.path.basename(gg), torch_dtype=torch.float32).eval()
            with torch.no_grad():
                a, b = ref(ids).logits, mine(ids).logits
            diff = float((a - b).abs().max())
            print(f"{prec}: logits GGUF vs safetensors export: max |diff| {diff:g}")
            fail |= not diff == 0.0
            if prec == "fp32":
                fail |= check_tokenizer(gg, tokjson)
    return int(fail)


if __name__ == "__main__":
    sys.exit(main())
