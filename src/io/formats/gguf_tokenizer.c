/* A GGUF file's tokenizer.ggml.* as Hugging Face tokenizer.json (gguf.h): the "gpt2" byte-level
 * BPE that llama.cpp's converter writes (tokens, merges, token_type, special ids), with the
 * pre-tokenizer that llama.cpp picks for tokenizer.ggml.pre, written the way the model's own
 * tokenizer.json spells it. transformers' GGUF converter builds the same vocabulary, merges and
 * added tokens (tests/reference/gguf_smollm2.py). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "fsutil.h"
#include "gguf_file.h"

#define TOKEN_CONTROL 3      /* llama.cpp's LLAMA_TOKEN_TYPE_CONTROL: special added tokens */
#define TOKEN_USER_DEFINED 4 /* added, not special */
#define TOKEN_UNUSED 5       /* an id no token has: [PADn] */

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

static wp_result pre_tokenizer(const gguf_file *f, json_t **out, char *err, size_t errlen) {
    const char *pre;
    size_t len;
    WP_TRY(gguf_get_str(f, "tokenizer.ggml.pre", false, &pre, &len, err, errlen));
    char name[64] = "default";
    if (pre) snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), pre);
    if (!strcmp(name, "default") || !strcmp(name, "gpt2") || !strcmp(name, "gpt-2"))
        *out = byte_level(true);
    else if (!strcmp(name, "smollm")) /* digits one by one, then GPT-2's regex */
        *out = json_pack("{s:s, s:[o, o]}", "type", "Sequence", "pretokenizers", split("\\p{N}"), byte_level(true));
    else if (!strcmp(name, "llama3") || !strcmp(name, "llama-v3") || !strcmp(name, "llama-bpe"))
        *out = json_pack("{s:s, s:[o, o]}", "type", "Sequence", "pretokenizers", split(LLAMA3_RE), byte_level(false));
    else
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tokenizer.ggml.pre '%s' is not one weipipe maps (default, gpt2, smollm, llama3, "
                       "llama-bpe): give --tokenizer", f->path, name);
    return *out ? 0 : wp_fail(WP_FAILED, err, errlen, "%s: out of memory", f->path);
}

/* The array key, with the element type it must have and at least `least` elements. */
static wp_result array_of(const gguf_file *f, const char *key, uint32_t atype, const gguf_kv **kv, char *err, size_t errlen) {
    wp_result rc = gguf_find_kv(f, key, kv, err, errlen);
    if (rc == 0 && *kv && ((*kv)->type != GGUF_ARRAY || (*kv)->atype != atype))
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: key %s is not an array of %s", f->path, key, atype == GGUF_STRING ? "strings" : "int32");
    return rc;
}

static wp_result vocab_and_added(const gguf_file *f, json_t *vocab, json_t *added, char *err, size_t errlen) {
    const gguf_kv *tokens = NULL, *types = NULL; /* NULL when array_of refuses or is never asked */
    wp_result rc = array_of(f, "tokenizer.ggml.tokens", GGUF_STRING, &tokens, err, errlen);
    if (rc == 0) rc = array_of(f, "tokenizer.ggml.token_type", GGUF_I32, &types, err, errlen);
    if (rc == 0 && !tokens) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: key tokenizer.ggml.tokens is missing", f->path);
    if (rc == 0 && types && types->n != tokens->n)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: tokenizer.ggml.token_type has %llu entries for %llu tokens", f->path,
                     (unsigned long long)types->n, (unsigned long long)tokens->n);
    size_t pos = tokens ? tokens->off : 0, tpos = types ? types->off : 0;
    for (uint64_t i = 0; rc == 0 && i < tokens->n; i++) {
        const char *s;
        size_t len;
        gguf_next_str(f, &pos, &s, &len);
        int64_t type = types ? gguf_next_int(f, &tpos, GGUF_I32) : 1;
        json_t *str = json_stringn(s, len);
        if (!str) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tokenizer.ggml.tokens[%llu] is not UTF-8 text", f->path, (unsigned long long)i);
        if (json_object_getn(vocab, s, len)) {
            json_decref(str);
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tokenizer.ggml.tokens[%llu] repeats an earlier token", f->path, (unsigned long long)i);
        }
        if (json_object_setn_new(vocab, s, len, json_integer((json_int_t)i))) rc = wp_fail(WP_FAILED, err, errlen, "out of memory");
        if (rc == 0 && (type == TOKEN_CONTROL || type == TOKEN_USER_DEFINED))
            json_array_append_new(added, json_pack("{s:I, s:O, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i, "content", str,
                                                   "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special",
                                                   type == TOKEN_CONTROL));
        json_decref(str);
    }
    return rc;
}

static wp_result merges_of(const gguf_file *f, json_t *merges, char *err, size_t errlen) {
    const gguf_kv *kv = NULL;
    wp_result rc = array_of(f, "tokenizer.ggml.merges", GGUF_STRING, &kv, err, errlen);
    if (rc == 0 && !kv) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: key tokenizer.ggml.merges is missing (not a BPE tokenizer)", f->path);
    size_t pos = kv ? kv->off : 0;
    for (uint64_t i = 0; rc == 0 && i < kv->n; i++) {
        const char *s;
        size_t len;
        gguf_next_str(f, &pos, &s, &len);
        json_t *m = json_stringn(s, len);
        if (!m) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tokenizer.ggml.merges[%llu] is not UTF-8 text", f->path, (unsigned long long)i);
        json_array_append_new(merges, m);
    }
    return rc;
}

static wp_result build(const gguf_file *f, json_t **out, char *err, size_t errlen) {
    const char *model;
    size_t len;
    wp_result rc = gguf_get_str(f, "tokenizer.ggml.model", false, &model, &len, err, errlen);
    if (rc || !model) return rc; /* no tokenizer: none, as a Hugging Face directory may have */
    if ((len == 4 && memcmp(model, "none", 4) == 0) || (len == 8 && memcmp(model, "no_vocab", 8) == 0))
        return 0; /* llama.cpp's names for ids without a tokenizer (weipipe's export of one writes "none") */
    if (!(len == 4 && memcmp(model, "gpt2", 4) == 0))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tokenizer.ggml.model '%.*s' is not gpt2 (a byte-level BPE)", f->path,
                       (int)(len < 64 ? len : 64), model);
    json_t *pre = NULL, *vocab = json_object(), *merges = json_array(), *added = json_array();
    if (rc == 0) rc = pre_tokenizer(f, &pre, err, errlen);
    if (rc == 0 && !(vocab && merges && added)) rc = wp_fail(WP_FAILED, err, errlen, "%s: out of memory", f->path);
    if (rc == 0) rc = vocab_and_added(f, vocab, added, err, errlen);
    if (rc == 0) rc = merges_of(f, merges, err, errlen);
    if (rc == 0) {
        *out = json_pack("{s:s, s:n, s:n, s:O, s:n, s:O, s:n, s:o, s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:O, s:O}}",
                         "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer", "pre_tokenizer", pre,
                         "post_processor", "decoder", byte_level(true), "model", "type", "BPE", "dropout", "unk_token",
                         "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                         "ignore_merges", 0, "vocab", vocab, "merges", merges);
        if (!*out) rc = wp_fail(WP_FAILED, err, errlen, "%s: out of memory building tokenizer.json", f->path);
    }
    json_decref(pre);
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    return rc;
}

wp_result gguf_tokenizer_json(const gguf_file *f, char **json, size_t *len, char *err, size_t errlen) {
    *json = NULL;
    *len = 0;
    json_t *j = NULL;
    wp_result rc = build(f, &j, err, errlen);
    if (rc == 0 && j) {
        *json = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!*json) rc = wp_fail(WP_FAILED, err, errlen, "%s: out of memory writing tokenizer.json", f->path);
        else *len = strlen(*json);
    }
    json_decref(j);
    return rc;
}

wp_result gguf_tokenizer(const gguf_file *f, wp_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    char *json;
    size_t len;
    WP_TRY(gguf_tokenizer_json(f, &json, &len, err, errlen));
    if (!json) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a tokenizer: the GGUF file has no tokenizer.ggml.model", f->path);
    wp_result rc = tok_open_mem(json, len, f->path, out, err, errlen);
    free(json);
    return rc;
}

wp_result gguf_tok_open(const char *path, wp_tokenizer **out, gguf_file **gguf, char *err, size_t errlen) {
    *out = NULL;
    if (gguf) *gguf = NULL;
    gguf_file *f;
    WP_TRY(gguf_open_if(path, &f, err, errlen));
    if (!f) return tok_open(path, out, err, errlen);
    wp_result rc = gguf_tokenizer(f, out, err, errlen);
    if (rc == 0 && gguf) *gguf = f;
    else gguf_close(f);
    return rc;
}

/* ---- the other way: tokenizer.json -> tokenizer.ggml.* (export) ---- */

static bool has_type(json_t *node, const char *type) {
    if (!json_is_object(node)) return false;
    const char *t = json_string_value(json_object_get(node, "type"));
    if (t && strcmp(t, type) == 0) return true;
    json_t *list = json_object_get(node, "pretokenizers");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) if (has_type(e, type)) return true;
    return false;
}

/* llama.cpp's name for the pre-tokenizer (the inverse of pre_tokenizer above; "default" else). */
static const char *pre_name(json_t *pre) {
    json_t *list = json_object_get(pre, "pretokenizers"), *first = json_array_get(list, 0);
    const char *re = json_string_value(json_object_get(json_object_get(first, "pattern"), "Regex"));
    if (has_type(first, "Digits") || (re && strcmp(re, "\\p{N}") == 0)) return "smollm";
    if (re && strcmp(re, LLAMA3_RE) == 0) return "llama-bpe";
    if (json_is_object(pre) && has_type(pre, "ByteLevel") && !json_is_array(list)) return "gpt-2"; /* llama.cpp knows GPT-2 by this name only */
    return "default";
}

static void kv_head(gguf_buf *b, const char *key, uint32_t type) {
    gguf_put_str(b, key, strlen(key));
    gguf_put_u32(b, type);
}

/* Tokens by id, model_vocab of them: the vocabulary and the added tokens, and ids that neither
 * has (a gap, or past both in a padded model vocabulary) as [PADn] of type unused, as
 * convert_hf_to_gguf.py writes them: llama.cpp takes the vocabulary size from the list. */
static wp_result tokens_of(const char *path, json_t *j, size_t model_vocab, const char ***tok, int32_t **type, size_t *n,
                           char *err, size_t errlen) {
    json_t *vocab = json_object_get(json_object_get(j, "model"), "vocab"), *added = json_object_get(j, "added_tokens"), *v;
    const char *key;
    size_t i;
    json_int_t most = -1;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.vocab[%s] is not an id in [0, 2^24)", path, key);
        if (json_integer_value(v) > most) most = json_integer_value(v);
    }
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24) ||
            !json_is_string(json_object_get(v, "content")))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: added_tokens[%zu]: id or content missing or out of range", path, i);
        if (json_integer_value(id) > most) most = json_integer_value(id);
    }
    if ((size_t)(most + 1) > model_vocab)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: token id %lld is past the model's vocabulary of %zu", path, (long long)most,
                       model_vocab);
    *n = model_vocab;
    *tok = calloc(*n ? *n : 1, sizeof **tok);
    *type = malloc((*n ? *n : 1) * sizeof **type);
    if (!*tok || !*type) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", path);
    for (size_t k = 0; k < *n; k++) (*type)[k] = TOKEN_UNUSED;
    json_object_foreach(vocab, key, v) {
        (*tok)[json_integer_value(v)] = key;
        (*type)[json_integer_value(v)] = 1; /* normal */
    }
    json_array_foreach(added, i, v) {
        size_t id = (size_t)json_integer_value(json_object_get(v, "id"));
        (*tok)[id] = json_string_value(json_object_get(v, "content"));
        (*type)[id] = json_is_true(json_object_get(v, "special")) ? TOKEN_CONTROL : TOKEN_USER_DEFINED;
    }
    return 0;
}

static void put_tokens(gguf_buf *b, const char **tok, const int32_t *type, size_t n) {
    kv_head(b, "tokenizer.ggml.tokens", GGUF_ARRAY);
    gguf_put_u32(b, GGUF_STRING);
    gguf_put_u64(b, n);
    char pad[32];
    for (size_t i = 0; i < n; i++) {
        if (!tok[i]) snprintf(pad, sizeof pad, "[PAD%zu]", i);
        gguf_put_str(b, tok[i] ? tok[i] : pad, strlen(tok[i] ? tok[i] : pad));
    }
    kv_head(b, "tokenizer.ggml.token_type", GGUF_ARRAY);
    gguf_put_u32(b, GGUF_I32);
    gguf_put_u64(b, n);
    gguf_put(b, type, n * sizeof *type);
}

/* Merges as "a b" strings (tokenizers >= 0.20 writes [a, b] pairs). */
static wp_result put_merges(const char *path, gguf_buf *b, json_t *merges, char *err, size_t errlen) {
    kv_head(b, "tokenizer.ggml.merges", GGUF_ARRAY);
    gguf_put_u32(b, GGUF_STRING);
    gguf_put_u64(b, json_array_size(merges));
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        if (json_is_string(m)) {
            gguf_put_str(b, json_string_value(m), json_string_length(m));
            continue;
        }
        json_t *l = json_array_get(m, 0), *r = json_array_get(m, 1);
        if (!json_is_string(l) || !json_is_string(r))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.merges[%zu] is neither \"a b\" nor [a, b]", path, i);
        gguf_put_u64(b, json_string_length(l) + 1 + json_string_length(r));
        gguf_put(b, json_string_value(l), json_string_length(l));
        gguf_put(b, " ", 1);
        gguf_put(b, json_string_value(r), json_string_length(r));
    }
    return 0;
}

wp_result gguf_tokenizer_kvs(const char *json_path, size_t model_vocab, gguf_buf *b, int *nkv, char *err, size_t errlen) {
    json_t *j;
    WP_TRY(fs_load_json(json_path, (size_t)1 << 30, 0, &j, err, errlen));
    json_t *model = json_object_get(j, "model"), *pre = json_object_get(j, "pre_tokenizer");
    const char *type = json_string_value(json_object_get(model, "type"));
    bool byte_bpe = type && strcmp(type, "BPE") == 0 && json_is_object(json_object_get(model, "vocab")) &&
                    json_is_array(json_object_get(model, "merges")) &&
                    (has_type(pre, "ByteLevel") || has_type(json_object_get(j, "decoder"), "ByteLevel"));
    const char **tok = NULL;
    int32_t *types = NULL;
    size_t n = 0;
    int rc = byte_bpe ? tokens_of(json_path, j, model_vocab, &tok, &types, &n, err, errlen) : 0;
    if (rc == 0 && byte_bpe) {
        kv_head(b, "tokenizer.ggml.model", GGUF_STRING);
        gguf_put_str(b, "gpt2", 4);
        kv_head(b, "tokenizer.ggml.pre", GGUF_STRING);
        gguf_put_str(b, pre_name(pre), strlen(pre_name(pre)));
        put_tokens(b, tok, types, n);
        rc = put_merges(json_path, b, json_object_get(model, "merges"), err, errlen);
        *nkv += 5;
    }
    free(tok);
    free(types);
    json_decref(j);
    return rc;
}
