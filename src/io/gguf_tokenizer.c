/* A GGUF file's tokenizer.ggml.* as Hugging Face tokenizer.json (gguf.h): the "gpt2" byte-level
 * BPE that llama.cpp's converter writes (tokens, merges, token_type, special ids), with the
 * pre-tokenizer that llama.cpp picks for tokenizer.ggml.pre, written the way the model's own
 * tokenizer.json spells it. transformers' GGUF converter builds the same vocabulary, merges and
 * added tokens (tests/reference/gguf_smollm2.py). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_file.h"

#define TOKEN_CONTROL 3      /* llama.cpp's LLAMA_TOKEN_TYPE_CONTROL: special added tokens */
#define TOKEN_USER_DEFINED 4 /* added, not special */

/* llama.cpp's regexes per tokenizer.ggml.pre (llama-vocab.cpp), as the models' tokenizer.json
 * write them: GPT-2's regex is the ByteLevel pre-tokenizer's own (use_regex). */
static const char LLAMA3_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static json_t *byte_level(bool use_regex) {
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex",
                     use_regex);
}

static json_t *split(const char *re) {
    return json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", re, "behavior", "Isolated", "invert", 0);
}

static int pre_tokenizer(const gguf_file *f, json_t **out, char *err, size_t errlen) {
    const char *pre;
    size_t len;
    int rc = gguf_get_str(f, "tokenizer.ggml.pre", false, &pre, &len, err, errlen);
    if (rc) return rc;
    char name[64] = "default";
    if (pre) snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), pre);
    if (!strcmp(name, "default") || !strcmp(name, "gpt2") || !strcmp(name, "gpt-2"))
        *out = byte_level(true);
    else if (!strcmp(name, "smollm")) /* digits one by one, then GPT-2's regex */
        *out = json_pack("{s:s, s:[o, o]}", "type", "Sequence", "pretokenizers", split("\\p{N}"), byte_level(true));
    else if (!strcmp(name, "llama3") || !strcmp(name, "llama-v3") || !strcmp(name, "llama-bpe"))
        *out = json_pack("{s:s, s:[o, o]}", "type", "Sequence", "pretokenizers", split(LLAMA3_RE), byte_level(false));
    else
        return io_fail(err, errlen, 2, "%s: tokenizer.ggml.pre '%s' is not one weipipe maps (default, gpt2, smollm, llama3, "
                       "llama-bpe): give --tokenizer", f->path, name);
    return *out ? 0 : io_fail(err, errlen, 1, "%s: out of memory", f->path);
}

/* The array key, with the element type it must have and at least `least` elements. */
static int array_of(const gguf_file *f, const char *key, uint32_t atype, const gguf_kv **kv, char *err, size_t errlen) {
    int rc = gguf_find_kv(f, key, kv, err, errlen);
    if (rc == 0 && *kv && ((*kv)->type != GGUF_ARRAY || (*kv)->atype != atype))
        rc = io_fail(err, errlen, 2, "%s: key %s is not an array of %s", f->path, key, atype == GGUF_STRING ? "strings" : "int32");
    return rc;
}

static int vocab_and_added(const gguf_file *f, json_t *vocab, json_t *added, char *err, size_t errlen) {
    const gguf_kv *tokens, *types;
    int rc = array_of(f, "tokenizer.ggml.tokens", GGUF_STRING, &tokens, err, errlen);
    if (rc == 0) rc = array_of(f, "tokenizer.ggml.token_type", GGUF_I32, &types, err, errlen);
    if (rc == 0 && !tokens) rc = io_fail(err, errlen, 2, "%s: key tokenizer.ggml.tokens is missing", f->path);
    if (rc == 0 && types && types->n != tokens->n)
        rc = io_fail(err, errlen, 2, "%s: tokenizer.ggml.token_type has %llu entries for %llu tokens", f->path,
                     (unsigned long long)types->n, (unsigned long long)tokens->n);
    size_t pos = tokens ? tokens->off : 0, tpos = types ? types->off : 0;
    for (uint64_t i = 0; rc == 0 && i < tokens->n; i++) {
        const char *s;
        size_t len;
        gguf_next_str(f, &pos, &s, &len);
        int64_t type = types ? gguf_next_int(f, &tpos, GGUF_I32) : 1;
        json_t *str = json_stringn(s, len);
        if (!str) return io_fail(err, errlen, 2, "%s: tokenizer.ggml.tokens[%llu] is not UTF-8 text", f->path, (unsigned long long)i);
        if (json_object_getn(vocab, s, len)) {
            json_decref(str);
            return io_fail(err, errlen, 2, "%s: tokenizer.ggml.tokens[%llu] repeats an earlier token", f->path, (unsigned long long)i);
        }
        if (json_object_setn_new(vocab, s, len, json_integer((json_int_t)i))) rc = io_fail(err, errlen, 1, "out of memory");
        if (rc == 0 && (type == TOKEN_CONTROL || type == TOKEN_USER_DEFINED))
            json_array_append_new(added, json_pack("{s:I, s:O, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i, "content", str,
                                                   "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special",
                                                   type == TOKEN_CONTROL));
        json_decref(str);
    }
    return rc;
}

static int merges_of(const gguf_file *f, json_t *merges, char *err, size_t errlen) {
    const gguf_kv *kv;
    int rc = array_of(f, "tokenizer.ggml.merges", GGUF_STRING, &kv, err, errlen);
    if (rc == 0 && !kv) rc = io_fail(err, errlen, 2, "%s: key tokenizer.ggml.merges is missing (not a BPE tokenizer)", f->path);
    size_t pos = kv ? kv->off : 0;
    for (uint64_t i = 0; rc == 0 && i < kv->n; i++) {
        const char *s;
        size_t len;
        gguf_next_str(f, &pos, &s, &len);
        json_t *m = json_stringn(s, len);
        if (!m) return io_fail(err, errlen, 2, "%s: tokenizer.ggml.merges[%llu] is not UTF-8 text", f->path, (unsigned long long)i);
        json_array_append_new(merges, m);
    }
    return rc;
}

static int build(const gguf_file *f, json_t **out, char *err, size_t errlen) {
    const char *model;
    size_t len;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", false, &model, &len, err, errlen);
    if (rc || !model) return rc; /* no tokenizer: none, as a Hugging Face directory may have */
    if (!(len == 4 && memcmp(model, "gpt2", 4) == 0))
        return io_fail(err, errlen, 2, "%s: tokenizer.ggml.model '%.*s' is not gpt2 (a byte-level BPE)", f->path,
                       (int)(len < 64 ? len : 64), model);
    json_t *pre = NULL, *vocab = json_object(), *merges = json_array(), *added = json_array();
    if (rc == 0) rc = pre_tokenizer(f, &pre, err, errlen);
    if (rc == 0 && !(vocab && merges && added)) rc = io_fail(err, errlen, 1, "%s: out of memory", f->path);
    if (rc == 0) rc = vocab_and_added(f, vocab, added, err, errlen);
    if (rc == 0) rc = merges_of(f, merges, err, errlen);
    if (rc == 0) {
        *out = json_pack("{s:s, s:n, s:n, s:O, s:n, s:O, s:n, s:o, s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:O, s:O}}",
                         "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer", "pre_tokenizer", pre,
                         "post_processor", "decoder", byte_level(true), "model", "type", "BPE", "dropout", "unk_token",
                         "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                         "ignore_merges", 0, "vocab", vocab, "merges", merges);
        if (!*out) rc = io_fail(err, errlen, 1, "%s: out of memory building tokenizer.json", f->path);
    }
    json_decref(pre);
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    return rc;
}

int gguf_tokenizer_json(const char *path, char **json, size_t *len, char *err, size_t errlen) {
    *json = NULL;
    *len = 0;
    gguf_file *f;
    int rc = gguf_open(&f, path, err, errlen);
    if (rc) return rc;
    json_t *j = NULL;
    rc = build(f, &j, err, errlen);
    if (rc == 0 && j) {
        *json = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!*json) rc = io_fail(err, errlen, 1, "%s: out of memory writing tokenizer.json", path);
        else *len = strlen(*json);
    }
    json_decref(j);
    gguf_close(f);
    return rc;
}
