/* Tokenizers (tokenizer.h): the byte tokenizer, SentencePiece through spm_wrap.cc, and the
 * decode side of a Hugging Face byte-level BPE tokenizer.json. */
#include "tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "spm_wrap.h"

/* Llama-3's tokenizer.json is ~9 MB; a file far above any real tokenizer is refused before
 * it is read into memory. */
#define TOK_MAX_FILE_BYTES ((size_t)256 << 20)

enum tok_type { TOK_BYTES, TOK_SPM, TOK_HF };

struct wp_tokenizer {
    enum tok_type type;
    char *path;
    int64_t vocab;
    int32_t bos, eos;
    spm_wrap *spm;
    /* tokenizer.json: the bytes each id decodes to, id i at arena[off[i] .. off[i+1]); has[i]
     * is false for an id the file does not define (a hole in the vocabulary). */
    unsigned char *arena;
    size_t *off;
    bool *has;
};

int64_t tok_vocab_size(const wp_tokenizer *t) { return t->vocab; }
int32_t tok_bos(const wp_tokenizer *t) { return t->bos; }
int32_t tok_eos(const wp_tokenizer *t) { return t->eos; }
const char *tok_path(const wp_tokenizer *t) { return t->path; }

const char *tok_kind(const wp_tokenizer *t) {
    switch (t->type) {
    case TOK_SPM: return "sentencepiece";
    case TOK_HF: return "hf-tokenizer.json";
    default: return "bytes";
    }
}

const char *tok_file_name(const wp_tokenizer *t) {
    switch (t->type) {
    case TOK_SPM: return TOK_FILE_SPM;
    case TOK_HF: return TOK_FILE_HF;
    default: return NULL;
    }
}

void tok_close(wp_tokenizer *t) {
    if (!t) return;
    if (t->spm) spm_wrap_free(t->spm);
    free(t->path);
    free(t->arena);
    free(t->off);
    free(t->has);
    free(t);
}

/* ---- Hugging Face tokenizer.json (byte-level BPE), decode only ---- */

/* GPT-2's bytes_to_unicode, inverted: byte-level BPE writes byte b as the character
 * b itself for the 188 printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) and as
 * U+0100 + k for the k-th of the other 68, in byte order. inv[c] is the byte of character c,
 * -1 for characters that stand for no byte. */
enum { BL_CHARS = 256 + 68 };
static void byte_level_inverse(int inv[BL_CHARS]) {
    for (int c = 0; c < BL_CHARS; c++) inv[c] = -1;
    int k = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        inv[printable ? b : 256 + k++] = b;
    }
}

/* One UTF-8 code point from s[*i..n) (jansson hands out valid UTF-8 only). */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *i) {
    uint32_t c = s[(*i)++];
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    c &= more == 3 ? 0x07 : more == 2 ? 0x0F : more == 1 ? 0x1F : 0x7F;
    for (; more > 0 && *i < n; more--) c = (c << 6) | (s[(*i)++] & 0x3F);
    return c;
}

/* The bytes a token's string stands for, as the `tokenizers` ByteLevel decoder gives them:
 * each character mapped back to its byte when every character of the token is one of the 256;
 * otherwise (an added token such as "<|endoftext|>" written plainly) the string's own bytes.
 * Writes at most strlen(s) bytes to out. */
static size_t byte_level_bytes(const int inv[BL_CHARS], const char *str, size_t n, unsigned char *out) {
    const unsigned char *s = (const unsigned char *)str;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c = utf8_next(s, n, &i);
        if (c >= BL_CHARS || inv[c] < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[m++] = (unsigned char)inv[c];
    }
    return m;
}

/* bos_token / eos_token of a tokenizer_config.json next to the file: a string or an object
 * with "content" (both forms occur). NULL when absent. */
static const char *config_token(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The id of the token whose string is name, -1 when none: the added tokens first, as the
 * `tokenizers` library looks them up. */
static int32_t token_id(json_t *added, json_t *vocab, const char *name) {
    if (!name) return -1;
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *c = json_object_get(a, "content"), *id = json_object_get(a, "id");
        if (json_is_string(c) && json_is_integer(id) && strcmp(json_string_value(c), name) == 0)
            return (int32_t)json_integer_value(id);
    }
    json_t *id = json_object_get(vocab, name);
    return json_is_integer(id) ? (int32_t)json_integer_value(id) : -1;
}

/* BOS/EOS: tokenizer.json itself does not say (transformers keeps them in
 * tokenizer_config.json), so that file is read when it sits beside; otherwise the names of the
 * families we take: Llama-3 <|begin_of_text|> / <|end_of_text|>, GPT-2 <|endoftext|> (its
 * only special token, EOS; no BOS), and <s> / </s>. */
static void hf_bos_eos(wp_tokenizer *t, const char *path, json_t *added, json_t *vocab) {
    t->bos = t->eos = -1;
    char cfg_path[WP_PATH_MAX], dir[WP_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = '\0';
    else dir[0] = '\0';
    if (snprintf(cfg_path, sizeof cfg_path, "%stokenizer_config.json", dir) < (int)sizeof cfg_path &&
        fs_exists(cfg_path)) {
        json_t *cfg = json_load_file(cfg_path, 0, NULL);
        if (cfg) {
            t->bos = token_id(added, vocab, config_token(cfg, "bos_token"));
            t->eos = token_id(added, vocab, config_token(cfg, "eos_token"));
            json_decref(cfg);
        }
    }
    static const char *const bos_names[] = {"<|begin_of_text|>", "<s>"};
    static const char *const eos_names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>"};
    for (size_t i = 0; t->bos < 0 && i < sizeof bos_names / sizeof *bos_names; i++) t->bos = token_id(added, vocab, bos_names[i]);
    for (size_t i = 0; t->eos < 0 && i < sizeof eos_names / sizeof *eos_names; i++) t->eos = token_id(added, vocab, eos_names[i]);
}

/* Sets id -> string for one (string, id) pair; 2 when the id is out of range. */
static int hf_put(const char *path, const char **str, size_t *len, int64_t vocab, const char *s, size_t n, json_t *id,
                  char *err, size_t errlen) {
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= vocab)
        return io_fail(err, errlen, 2, "%s: token \"%.40s\": id is not an integer in [0, %lld)", path, s, (long long)vocab);
    str[json_integer_value(id)] = s;
    len[json_integer_value(id)] = n;
    return 0;
}

static int hf_open(wp_tokenizer *t, const char *path, const char *data, size_t size, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_loadb(data, size, 0, &je);
    if (!root) return io_fail(err, errlen, 2, "%s: not a tokenizer: JSON error at line %d: %s", path, je.line, je.text);
    int rc = 0;
    json_t *model = json_object_get(root, "model"), *decoder = json_object_get(root, "decoder");
    json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    const char *dtype = json_string_value(json_object_get(decoder, "type"));
    if (!json_is_object(model) || !json_is_object(vocab))
        rc = io_fail(err, errlen, 2, "%s: not a tokenizer.json: no \"model\" with a \"vocab\" object", path);
    else if (!mtype || strcmp(mtype, "BPE") != 0)
        rc = io_fail(err, errlen, 2, "%s: model.type is \"%s\": only byte-level BPE (GPT-2, Llama-3) is read; for a SentencePiece family give its tokenizer.model",
                     path, mtype ? mtype : "(none)");
    else if (!dtype || strcmp(dtype, "ByteLevel") != 0)
        rc = io_fail(err, errlen, 2, "%s: decoder.type is \"%s\": only byte-level BPE (GPT-2, Llama-3, decoder ByteLevel) is read; for a SentencePiece family give its tokenizer.model",
                     path, dtype ? dtype : "(none)");
    else if (added && !json_is_array(added))
        rc = io_fail(err, errlen, 2, "%s: added_tokens is not an array", path);
    /* the vocabulary: one past the largest id of the BPE vocabulary and the added tokens */
    int64_t v = 0;
    const char *key;
    json_t *val;
    size_t i;
    json_t *a;
    if (rc == 0) {
        json_object_foreach(vocab, key, val) {
            if (json_is_integer(val) && json_integer_value(val) >= v) v = json_integer_value(val) + 1;
        }
        json_array_foreach(added, i, a) {
            json_t *id = json_object_get(a, "id");
            if (json_is_integer(id) && json_integer_value(id) >= v) v = json_integer_value(id) + 1;
        }
        if (v < 1 || v > INT32_MAX) rc = io_fail(err, errlen, 2, "%s: vocabulary size %lld out of range [1, 2^31-1]", path, (long long)v);
    }
    const char **str = NULL;
    size_t *len = NULL;
    if (rc == 0) {
        str = calloc((size_t)v, sizeof *str);
        len = calloc((size_t)v, sizeof *len);
        t->off = calloc((size_t)v + 1, sizeof *t->off);
        t->has = calloc((size_t)v, sizeof *t->has);
        if (!str || !len || !t->off || !t->has) rc = io_fail(err, errlen, 1, "%s: out of memory", path);
    }
    if (rc == 0) {
        json_object_foreach(vocab, key, val) {
            if (rc == 0) rc = hf_put(path, str, len, v, key, strlen(key), val, err, errlen);
        }
    }
    /* added tokens after the vocabulary: the library looks them up first, so they win */
    if (rc == 0) {
        json_array_foreach(added, i, a) {
            json_t *c = json_object_get(a, "content");
            if (rc == 0 && !json_is_string(c)) rc = io_fail(err, errlen, 2, "%s: added_tokens[%zu].content is not a string", path, i);
            if (rc == 0) rc = hf_put(path, str, len, v, json_string_value(c), json_string_length(c), json_object_get(a, "id"), err, errlen);
        }
    }
    size_t total = 0;
    for (int64_t k = 0; rc == 0 && k < v; k++) total += len[k];
    if (rc == 0 && !(t->arena = malloc(total ? total : 1))) rc = io_fail(err, errlen, 1, "%s: out of memory", path);
    if (rc == 0) {
        int inv[BL_CHARS];
        byte_level_inverse(inv);
        size_t at = 0;
        for (int64_t k = 0; k < v; k++) {
            t->off[k] = at;
            t->has[k] = str[k] != NULL;
            if (str[k]) at += byte_level_bytes(inv, str[k], len[k], t->arena + at);
        }
        t->off[v] = at;
        t->vocab = v;
        t->type = TOK_HF;
        hf_bos_eos(t, path, added, vocab);
    }
    free(str);
    free(len);
    json_decref(root);
    return rc;
}

static int hf_decode(const wp_tokenizer *t, const int32_t *ids, size_t n, char **text, char *err, size_t errlen) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!t->has[ids[i]]) return io_fail(err, errlen, 2, "token %d (position %zu): %s defines no token with this id", ids[i], i, t->path);
        total += t->off[ids[i] + 1] - t->off[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s) return io_fail(err, errlen, 1, "out of memory decoding %zu tokens", n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = t->off[ids[i]]; k < t->off[ids[i] + 1]; k++)
            if (t->arena[k]) s[m++] = (char)t->arena[k]; /* a C string cannot hold a NUL byte */
    s[m] = '\0';
    *text = s;
    return 0;
}

/* ---- opening ---- */

int tok_open(const char *path, wp_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    wp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return io_fail(err, errlen, 1, "tokenizer: out of memory");
    t->bos = t->eos = -1;
    if (!path || strcmp(path, "bytes") == 0) {
        t->type = TOK_BYTES;
        t->vocab = 256;
        *out = t;
        return 0;
    }
    int rc = 0;
    if (!(t->path = strdup(path))) rc = io_fail(err, errlen, 1, "tokenizer: out of memory");
    char *data = NULL;
    size_t size = 0;
    if (rc == 0) rc = fs_read_small(path, TOK_MAX_FILE_BYTES, &data, &size, err, errlen);
    size_t lead = 0;
    while (rc == 0 && lead < size && strchr(" \t\r\n", data[lead]) && data[lead]) lead++;
    if (rc == 0 && size == 0) {
        rc = io_fail(err, errlen, 2, "%s: not a tokenizer: the file is empty", path);
    } else if (rc == 0 && data[lead] == '{') {
        /* JSON: a tokenizer.json; a SentencePiece model is a protobuf and never starts so */
        rc = hf_open(t, path, data, size, err, errlen);
    } else if (rc == 0) {
        char why[512];
        rc = spm_wrap_load(data, size, &t->spm, why, sizeof why);
        if (rc == 2) rc = io_fail(err, errlen, 2, "%s: not a tokenizer: not a tokenizer.json (no JSON object) and %s", path, why);
        else if (rc) rc = io_fail(err, errlen, rc, "%s: %s", path, why);
        if (rc == 0) {
            t->type = TOK_SPM;
            t->vocab = spm_wrap_vocab(t->spm);
            t->bos = spm_wrap_bos(t->spm);
            t->eos = spm_wrap_eos(t->spm);
        }
    }
    free(data);
    if (rc) {
        tok_close(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- encode / decode ---- */

int tok_encode(const wp_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    switch (t->type) {
    case TOK_SPM: return spm_wrap_encode(t->spm, text, len, ids, n, err, errlen);
    case TOK_HF:
        return io_fail(err, errlen, 2,
                       "%s: a tokenizer.json is not encoded here (its BPE belongs to the `tokenizers` library): "
                       "tokenize text with scripts/tokenize_hf.py, or give token ids (--prompt-tokens)",
                       t->path);
    default: break;
    }
    if (len == 0) return 0;
    int32_t *a = malloc(len * sizeof *a);
    if (!a) return io_fail(err, errlen, 1, "out of memory encoding %zu bytes", len);
    for (size_t i = 0; i < len; i++) a[i] = (unsigned char)text[i];
    *ids = a;
    *n = len;
    return 0;
}

int tok_decode(const wp_tokenizer *t, const int32_t *ids, size_t n, char **text, char *err, size_t errlen) {
    *text = NULL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab)
            return io_fail(err, errlen, 2, "token %d (position %zu) is not in the %s vocabulary of %lld", ids[i], i,
                           tok_kind(t), (long long)t->vocab);
    if (t->type == TOK_SPM) return spm_wrap_decode(t->spm, ids, n, text, err, errlen);
    if (t->type == TOK_HF) return hf_decode(t, ids, n, text, err, errlen);
    char *s = malloc(n + 1);
    if (!s) return io_fail(err, errlen, 1, "out of memory decoding %zu tokens", n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i]) s[m++] = (char)ids[i]; /* token 0 is the byte shards' document boundary, not text */
    s[m] = '\0';
    *text = s;
    return 0;
}

int tok_find_in_dir(const char *dir, char *path, size_t pathlen, char *err, size_t errlen) {
    char spm[WP_PATH_MAX], hf[WP_PATH_MAX];
    if (pathlen) path[0] = '\0';
    int rc = fs_join(spm, sizeof spm, dir, TOK_FILE_SPM, err, errlen);
    if (rc == 0) rc = fs_join(hf, sizeof hf, dir, TOK_FILE_HF, err, errlen);
    if (rc) return rc;
    bool has_spm = fs_exists(spm), has_hf = fs_exists(hf);
    if (has_spm && has_hf)
        return io_fail(err, errlen, 2, "%s and %s: two tokenizers in one directory; name one with --tokenizer", spm, hf);
    const char *found = has_spm ? spm : has_hf ? hf : "";
    if (strlen(found) >= pathlen) return io_fail(err, errlen, 1, "%s: path too long", found);
    memcpy(path, found, strlen(found) + 1);
    return 0;
}
