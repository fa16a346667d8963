#!/usr/bin/env python3
"""Llama 3.x RoPE scaling (rope_type llama3) through GGUF (issue 39, item 5): a Llama-3.1/3.2
style file loads with transformers' logits, and llama.cpp agrees.

    gguf_llama3.py WEIPIPE

A tiny random LlamaForCausalLM (2 layers, h 64, 4 heads / 2 KV heads, head size 16, V 256,
init std 0.2) with rope_scaling {llama3, factor 8, low 1, high 4, original 64} is saved by
transformers and written as llama.cpp's convert_hf_to_gguf.py writes it (gguf-py's GGUFWriter;
rope_freqs.weight F32 [8] by the converter's own generate_extra_tensors and Q/K by its permute,
both run from the copy llama-cpp-python installs into the venv; no tokenizer: model "none").
At head size 16 and theta
1e4 an original of 64 puts pairs in all three bands, so the scaling matters at 96 positions:
  - weipipe eval FILE.gguf == transformers' loss on the Hugging Face model (1e-4 relative, the
    suite's bound), and transformers without the scaling is far off (the check can fail);
  - llama.cpp (llama-cpp-python, nobody here wrote it) on the same file: its logits at 96 positions
    are transformers' within 1e-3 of their spread (unscaled: far off);
  - greedy ids: weipipe sample FILE.gguf == transformers' generate == llama.cpp's;
  - train --init-from FILE.gguf, then export: config.json's rope_scaling is the original's, and
    --format gguf writes rope_freqs.weight as the converter did (2e-6 relative) with every other
    tensor bit-equal to the converter's;
  - recovery on Llama 3.1's and 3.2's own parameters (head size 128, theta 5e5, original 8192,
    factor 8 and 32) returns them exactly, and odd ones (low 1.5, high 6, original 1000) as an
    equivalent set (the same frequencies, 1e-6 relative);
  - damaged rope_freqs (dims [16], F16, a NaN, a negative factor, factors no llama3 gives) and
    llama.rope.scaling.type yarn: exit 2, one line naming the file and the culprit; all-ones
    factors are plain RoPE (transformers' unscaled loss).
Exit 77 without the venv; fails without llama_cpp or the converter in it.
"""
import json
import os
import subprocess
import sys
import tempfile
import types

os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import hfenv

    hfenv.use_transformers()
    import numpy as np
    import torch
    import gguf
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from gguf_smollm2 import mean_loss, run, write_shard
except (ImportError, SystemExit) as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and gguf into its venv)")
    sys.exit(77)

V, SEQ, BATCHES, NEW = 256, 96, 2, 12
SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 64}
LOSS_REL = 1e-4  # the suite's bound on a loss (gguf_smollm2)
LOGIT_TOL = 1e-3  # llama.cpp's fp32 logits against transformers', as a fraction of their spread
FACTOR_TOL = 2e-6  # the converter's float32 factors against the exact formula (src/io/formats/gguf_rope.c)


def converter():
    """convert_hf_to_gguf.py's own LlamaModel.generate_extra_tensors (rope_freqs for llama3) and
    LlamaModel.permute (Q/K rows to llama.cpp's RoPE layout), from the copy llama-cpp-python
    installs into the venv. The module as a whole does not import here (it needs mistral_common and
    a torch with float8 types, newer than Debian's), so the two functions are taken from its source
    text and run as they are."""
    import ast
    import importlib.util
    import math
    from typing import Iterable

    spec = importlib.util.find_spec("llama_cpp")
    path = os.path.join(os.path.dirname(spec.origin), "..", "bin", "convert_hf_to_gguf.py") if spec else ""
    if not os.path.exists(path):
        sys.exit(f"FAIL: llama.cpp's convert_hf_to_gguf.py is not in the venv ({path or 'no llama_cpp'}; setup.sh installs it)")
    tree = ast.parse(open(path).read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LlamaModel")
    fns = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name in ("generate_extra_tensors", "permute")]
    if len(fns) != 2:
        sys.exit(f"FAIL: {path}: LlamaModel.generate_extra_tensors / permute not found")
    ns = {"math": math, "torch": torch, "gguf": gguf, "Tensor": torch.Tensor, "Iterable": Iterable}
    exec(compile(ast.Module(body=fns, type_ignores=[]), path, "exec", flags=__import__("__future__").annotations.compiler_flag,
                 dont_inherit=True), ns)
    return ns


def make_hf(path, hidden=64, heads=4, kv=2, layers=2, theta=1e4, scaling=SCALING, seed=0):
    cfg = LlamaConfig(vocab_size=V, hidden_size=hidden, intermediate_size=96, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=512,
                      rope_theta=theta, rope_scaling=scaling, initializer_range=0.2, tie_word_embeddings=False,
                      # the converter reads original_max_position_embeddings at the top level
                      # (default 8192), not rope_scaling's: given in both (Llama 3.1 needs neither)
                      original_max_position_embeddings=scaling["original_max_position_embeddings"])
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).float().eval()
    model.save_pretrained(path, safe_serialization=True)
    return model


GGUF_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def convert(conv, hf, out):
    """The model as convert_hf_to_gguf.py writes it at --outtype f32 with no tokenizer (its
    _set_vocab_none: llama.cpp then runs on ids): its llama.* keys, rope_freqs.weight from its own
    generate_extra_tensors first, then the weights under llama.cpp's names, Q and K by its permute."""
    c = json.load(open(os.path.join(hf, "config.json")))
    hd = c["hidden_size"] // c["num_attention_heads"]
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("llama3-test")
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(c["vocab_size"])
    w.add_rope_dimension_count(hd)
    w.add_tokenizer_model("none")
    me = types.SimpleNamespace(hparams=c, find_hparam=lambda keys, optional=False: c.get(keys[0]),
                               format_tensor_name=lambda key: gguf.TENSOR_NAMES[key] + ".weight")
    for name, t in conv["generate_extra_tensors"](me):
        w.add_tensor(name, t.numpy())
    from safetensors.torch import load_file

    for name, t in load_file(os.path.join(hf, "model.safetensors")).items():
        t = t.float()
        if name.endswith("q_proj.weight"):
            t = conv["permute"](t, c["num_attention_heads"], c["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            t = conv["permute"](t, c["num_attention_heads"], c["num_key_value_heads"])
        if name.startswith("model.layers."):
            layer, rest = name[len("model.layers."):].split(".", 1)
            g = f"blk.{layer}.{GGUF_NAMES[rest.rsplit('.', 1)[0]]}.weight"
        else:
            g = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                 "lm_head.weight": "output.weight"}[name]
        w.add_tensor(g, t.numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def tensors(path):
    return {t.name: (t.tensor_type.name, [int(x) for x in t.shape], np.array(t.data))
            for t in gguf.GGUFReader(path).tensors}


def rewrite(src, dst, freqs=None, ftype=None, shape=None, kv=None):
    """src copied by gguf-py's GGUFWriter with rope_freqs.weight replaced (values, type, shape)
    and the key/values in kv added."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, "llama")
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), field.types[0], sub)
    for name, (vtype, val) in (kv or {}).items():
        w.add_key_value(name, val, vtype)
    for t in r.tensors:
        a = np.array(t.data)
        if t.name == "rope_freqs.weight":
            a = np.asarray(freqs if freqs is not None else a, dtype=np.float32)
            if ftype == "F16":
                w.add_tensor(t.name, a.astype(np.float16))
                continue
        w.add_tensor(t.name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def eval_loss(weipipe, model, shard):
    out = run(weipipe, "eval", model, "--data", shard, "--seq-length", str(SEQ), "--batches", str(BATCHES),
              "--precision", "fp32")
    return float(out.split("loss ")[1].split()[0])


def child_logits(path, tokens):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_batch=128, n_threads=1, n_threads_batch=1, seed=0,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, logits_all=True,
                          verbose=True)
    llm.eval(tokens)
    logits = np.array(llm.scores[:len(tokens)], dtype=np.float64)
    ids = []
    for _ in range(NEW):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        ids.append(tok)
        llm.eval([tok])
    return {"logits": logits.tolist(), "ids": ids}


def llama_cpp_on(path, tokens):
    """llama.cpp in a child process (an abort inside ggml names the file instead of killing the test)."""
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path, ",".join(map(str, tokens))],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: llama.cpp on {path} exited {r.returncode}: {r.stderr.strip()[-1500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def refused(weipipe, path, shard, culprit):
    """weipipe eval on a damaged file: exit 2 and one line naming the file and the culprit."""
    r = subprocess.run([weipipe, "eval", path, "--data", shard, "--seq-length", str(SEQ), "--batches", "1",
                        "--precision", "fp32"], capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    ok = r.returncode == 2 and len(lines) == 1 and path in lines[0] and culprit in lines[0]
    print(f"{'ok' if ok else 'FAIL'}: {os.path.basename(path)}: exit {r.returncode}: {r.stderr.strip()}")
    return not ok


def llama3_inv_freq(scaling, hd, theta):
    cfg = LlamaConfig(hidden_size=hd, num_attention_heads=1, rope_theta=theta, rope_scaling=scaling,
                      max_position_embeddings=1 << 17)
    return ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")[0].double().numpy()


def recovered(weipipe, conv, tmp, shard, name, hidden, theta, scaling, exact):
    """A 1-layer one-head model with head size `hidden` through converter, train --init-from and
    the Hugging Face export: the rope_scaling weipipe recovered from rope_freqs.weight."""
    hf, gg, ck, out = (os.path.join(tmp, f"{name}-{x}") for x in ("hf", "gguf", "ck", "out"))
    make_hf(hf, hidden=hidden, heads=1, kv=1, layers=1, theta=theta, scaling=scaling)
    convert(conv, hf, gg)
    run(weipipe, "train", "--init-from", gg, "--data", shard, "--steps", "1", "--lr", "0", "--seq-length", "16",
        "--micro-batch-size", "1", "--precision", "fp32", "--save", ck, "--quiet")
    run(weipipe, "export", ck, out, "--quiet")
    got = json.load(open(os.path.join(out, "config.json")))["rope_scaling"]
    a, b = llama3_inv_freq(got, hidden, theta), llama3_inv_freq(scaling, hidden, theta)
    rel = float(np.max(np.abs(a - b) / b))
    same = all(got[k] == scaling[k] for k in scaling)
    ok = rel <= 1e-6 and (same or not exact)
    print(f"{'ok' if ok else 'FAIL'}: {name}: recovered {got} from the converter's factors; frequencies {rel:.1e} "
          f"relative from the original's{'' if same else ' (an equivalent set)'}")
    return not ok


def main():
    weipipe = os.path.abspath(sys.argv[1])
    conv = converter()
    fail = 0
    rng = np.random.default_rng(7)
    ids = [int(x) for x in rng.integers(0, V, SEQ * BATCHES + 1)]
    with tempfile.TemporaryDirectory(prefix="wp-llama3-") as tmp:
        shard = os.path.join(tmp, "val.bin")
        write_shard(shard, ids)
        hf = os.path.join(tmp, "hf")
        model = make_hf(hf)
        gg = convert(conv, hf, os.path.join(tmp, "llama3.gguf"))
        conv_t = tensors(gg)
        keys = [k for k in gguf.GGUFReader(gg).fields if k.startswith("llama.rope")]
        factors = conv_t["rope_freqs.weight"][2]
        print(f"converter: rope_freqs.weight {conv_t['rope_freqs.weight'][:2]} = {factors.tolist()}; rope keys {keys}")
        if conv_t["rope_freqs.weight"][:2] != ("F32", [8]) or any("scaling" in k for k in keys):
            print("FAIL: not the converter's llama3 layout this test was written for")
            return 1

        # loss: weipipe on the GGUF against transformers on the Hugging Face model
        ref = mean_loss(model, ids, SEQ, BATCHES)
        plain = LlamaForCausalLM(LlamaConfig(**{**model.config.to_dict(), "rope_scaling": None})).eval()
        plain.load_state_dict(model.state_dict())
        ref_plain = mean_loss(plain, ids, SEQ, BATCHES)
        got = eval_loss(weipipe, gg, shard)
        rel, rel_plain = abs(got - ref) / ref, abs(ref_plain - ref) / ref
        ok = rel <= LOSS_REL and rel_plain > 100 * LOSS_REL
        print(f"{'ok' if ok else 'FAIL'}: loss over {BATCHES}x{SEQ}: weipipe eval FILE.gguf {got:.7f}, transformers "
              f"{ref:.7f} ({rel:.1e} relative, bound {LOSS_REL}); transformers unscaled {ref_plain:.7f} ({rel_plain:.1e})")
        fail |= not ok

        # llama.cpp on the same file: logits at every position, and greedy ids
        prompt = ids[:SEQ]
        lc = llama_cpp_on(gg, prompt)
        with torch.no_grad():
            want = model(torch.tensor([prompt])).logits[0].double().numpy()
            want_plain = plain(torch.tensor([prompt])).logits[0].double().numpy()
            gen = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW)
        spread = want.std(axis=1).mean()
        diff = float(np.abs(np.array(lc["logits"]) - want).max() / spread)
        diff_plain = float(np.abs(want_plain - want).max() / spread)
        ok = diff <= LOGIT_TOL and diff_plain > 10 * LOGIT_TOL
        print(f"{'ok' if ok else 'FAIL'}: llama.cpp's logits at {SEQ} positions vs transformers': max |diff| {diff:.1e} of "
              f"the spread (bound {LOGIT_TOL}); transformers unscaled vs scaled {diff_plain:.1e}")
        fail |= not ok
        hf_ids = gen[0, len(prompt):].tolist()
        wp_ids = [int(x) for x in run(weipipe, "sample", gg, "--prompt-tokens", ",".join(map(str, prompt)),
                                      "--max-new-tokens", str(NEW), "--temperature", "0", "--format", "ids",
                                      "--precision", "fp32").strip().split(",")]
        ok = wp_ids == hf_ids == lc["ids"]
        print(f"{'ok' if ok else 'FAIL'}: greedy: weipipe sample FILE.gguf {wp_ids}\n"
              f"        transformers {hf_ids}\n        llama.cpp {lc['ids']}")
        fail |= not ok

        # train --init-from, then both exports
        ck, out_hf, out_gg = (os.path.join(tmp, x) for x in ("ck", "export-hf", "export.gguf"))
        run(weipipe, "train", "--init-from", gg, "--data", shard, "--steps", "1", "--lr", "0", "--seq-length", "16",
            "--micro-batch-size", "1", "--precision", "fp32", "--save", ck, "--quiet")
        run(weipipe, "export", ck, out_hf, "--quiet")
        got_sc = json.load(open(os.path.join(out_hf, "config.json")))["rope_scaling"]
        ok = got_sc == SCALING
        print(f"{'ok' if ok else 'FAIL'}: export (Hugging Face): rope_scaling {got_sc}")
        fail |= not ok
        run(weipipe, "export", ck, out_gg, "--format", "gguf", "--precision", "fp32", "--quiet")
        mine = tensors(out_gg)
        mf = mine.get("rope_freqs.weight", ("absent", [], np.zeros(0)))
        frel = float(np.max(np.abs(mf[2] - factors) / factors)) if mf[1] == [8] else float("inf")
        others = sorted(k for k in conv_t if k != "rope_freqs.weight" and
                        (k not in mine or mine[k][:2] != conv_t[k][:2] or not np.array_equal(mine[k][2], conv_t[k][2])))
        ok = mf[0] == "F32" and frel <= FACTOR_TOL and not others and set(mine) == set(conv_t)
        print(f"{'ok' if ok else 'FAIL'}: export --format gguf: rope_freqs.weight {mf[:2]} {frel:.1e} relative from the "
              f"converter's (bound {FACTOR_TOL}); tensors not bit-equal to the converter's: {others or 'none'}")
        fail |= not ok
        again = eval_loss(weipipe, out_gg, shard)
        lc2 = llama_cpp_on(out_gg, prompt)
        d2 = float(np.abs(np.array(lc2["logits"]) - np.array(lc["logits"])).max() / spread)
        ok = again == got and d2 <= LOGIT_TOL
        print(f"{'ok' if ok else 'FAIL'}: the exported GGUF: weipipe eval {again:.7f} (the converter's file: {got:.7f}); "
              f"llama.cpp's logits {d2:.1e} of the spread from its logits on the converter's file")
        fail |= not ok

        # recovery on the real models' parameters, and an odd set
        for name, hidden, theta, sc, exact in [
                ("llama3.1", 128, 5e5, {**SCALING, "original_max_position_embeddings": 8192}, True),
                ("llama3.2", 128, 5e5, {**SCALING, "factor": 32.0, "original_max_position_embeddings": 8192}, True),
                ("odd", 64, 1e4, {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.5, "high_freq_factor": 6.0,
                                  "original_max_position_embeddings": 1000}, False)]:
            fail |= recovered(weipipe, conv, tmp, shard, name, hidden, theta, sc, exact)

        # damaged factors and another scaling type: refused by name
        bad = os.path.join(tmp, "bad-{}.gguf")
        nan, neg = factors.copy(), factors.copy()
        nan[3], neg[7] = np.nan, -8.0
        for case, kw, culprit in [
                ("dims", {"freqs": np.ones(16)}, "rope_freqs.weight: dims [16]"),
                ("f16", {"ftype": "F16"}, "rope_freqs.weight: type F16"),
                ("nan", {"freqs": nan}, "rope_freqs.weight"),
                ("negative", {"freqs": neg}, "rope_freqs.weight: pair 7"),
                ("reversed", {"freqs": factors[::-1].copy()}, "rope_freqs.weight: its factors are not llama3's"),
                ("yarn", {"kv": {"llama.rope.scaling.type": (gguf.GGUFValueType.STRING, "yarn")}},
                 "llama.rope.scaling.type 'yarn'")]:
            fail |= refused(weipipe, rewrite(gg, bad.format(case), **kw), shard, culprit)
        ones = eval_loss(weipipe, rewrite(gg, bad.format("ones"), freqs=np.ones(8)), shard)
        rel = abs(ones - ref_plain) / ref_plain
        ok = rel <= LOSS_REL
        print(f"{'ok' if ok else 'FAIL'}: all-ones factors: weipipe eval {ones:.7f}, transformers unscaled "
              f"{ref_plain:.7f} ({rel:.1e})")
        fail |= not ok
    return int(fail)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child_logits(sys.argv[2], [int(x) for x in sys.argv[3].split(",")])))
        sys.exit(0)
    sys.exit(main())
