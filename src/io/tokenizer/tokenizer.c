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
#include "tokjson.h"

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
    wp_tokjson *hf; /* tokenizer.json */
    char *bytes;    /* what it was opened from (tokenizer.json text or the SentencePiece model): */
    size_t nbytes;  /* what checkpoints and prepared data keep, whatever the source (tok_bytes) */
};

int64_t tok_vocab_size(const wp_tokenizer *t) { return t->vocab; }
int32_t tok_bos(const wp_tokenizer *t) { return t->bos; }
int32_t tok_eos(const wp_tokenizer *t) { return t->eos; }
const char *tok_path(const wp_tokenizer *t) { return t->path; }

const char *tok_bytes(const wp_tokenizer *t, size_t *size) {
    *size = t->nbytes;
    return t->bytes;
}

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
    free(t->bytes);
    tokjson_free(t->hf);
    free(t);
}

/* ---- Hugging Face tokenizer.json (tokjson.h) ---- */

/* bos_token / eos_token of a tokenizer_config.json next to the file: a string or an object
 * with "content" (both forms occur). NULL when absent. */
static const char *config_token(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* BOS/EOS: transformers keeps them in tokenizer_config.json, which is read when it sits
 * beside the file; else BOS is the special token the file's TemplateProcessing puts first
 * (Llama-3: <|begin_of_text|>); else the names of the families we take: Llama-3
 * <|begin_of_text|> / <|end_of_text|>, GPT-2 <|endoftext|> (its only special token, EOS; no
 * BOS), and <s> / </s>. */
static wp_result hf_bos_eos(wp_tokenizer *t, const char *path, char *err, size_t errlen) {
    t->bos = t->eos = -1;
    char cfg_path[WP_PATH_MAX], dir[WP_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path ? path : "");
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = '\0';
    else dir[0] = '\0';
    if (path && snprintf(cfg_path, sizeof cfg_path, "%stokenizer_config.json", dir) < (int)sizeof cfg_path &&
        fs_exists(cfg_path)) {
        /* through fs_load_json: a FIFO or a device in its place is refused, never read forever;
         * a damaged one is named rather than ignored (its BOS/EOS would silently change) */
        json_t *cfg = NULL;
        WP_TRY(fs_load_json(cfg_path, TOK_MAX_FILE_BYTES, 0, &cfg, err, errlen));
        t->bos = tokjson_token_id(t->hf, config_token(cfg, "bos_token"));
        t->eos = tokjson_token_id(t->hf, config_token(cfg, "eos_token"));
        json_decref(cfg);
    }
    if (t->bos < 0) t->bos = tokjson_template_bos(t->hf);
    static const char *const bos_names[] = {"<|begin_of_text|>", "<s>"};
    static const char *const eos_names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>"};
    for (size_t i = 0; t->bos < 0 && i < sizeof bos_names / sizeof *bos_names; i++) t->bos = tokjson_token_id(t->hf, bos_names[i]);
    for (size_t i = 0; t->eos < 0 && i < sizeof eos_names / sizeof *eos_names; i++) t->eos = tokjson_token_id(t->hf, eos_names[i]);
    return 0;
}

static wp_result hf_open(wp_tokenizer *t, const char *path, const char *name, const char *data, size_t size, char *err, size_t errlen) {
    WP_TRY(tokjson_open(data, size, name, &t->hf, err, errlen));
    t->type = TOK_HF;
    t->vocab = tokjson_vocab(t->hf);
    return hf_bos_eos(t, path, err, errlen);
}

/* ---- opening ---- */

wp_result tok_open(const char *path, wp_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    wp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return wp_fail(WP_FAILED, err, errlen, "tokenizer: out of memory");
    t->bos = t->eos = -1;
    if (!path || strcmp(path, "bytes") == 0) {
        t->type = TOK_BYTES;
        t->vocab = 256;
        *out = t;
        return 0;
    }
    wp_result rc = WP_OK;
    if (!(t->path = strdup(path))) rc = wp_fail(WP_FAILED, err, errlen, "tokenizer: out of memory");
    char *data = NULL;
    size_t size = 0;
    if (rc == 0) rc = fs_read_small(path, TOK_MAX_FILE_BYTES, &data, &size, err, errlen);
    size_t lead = 0;
    while (rc == 0 && lead < size && strchr(" \t\r\n", data[lead]) && data[lead]) lead++;
    if (rc == 0 && size == 0) {
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a tokenizer: the file is empty", path);
    } else if (rc == 0 && data[lead] == '{') {
        /* JSON: a tokenizer.json; a SentencePiece model is a protobuf and never starts so */
        rc = hf_open(t, path, path, data, size, err, errlen);
    } else if (rc == 0) {
        char why[512];
        rc = spm_wrap_load(data, size, &t->spm, why, sizeof why);
        if (rc == 2) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a tokenizer: not a tokenizer.json (no JSON object) and %s", path, why);
        else if (rc) rc = wp_fail(rc, err, errlen, "%s: %s", path, why);
        if (rc == 0) {
            t->type = TOK_SPM;
            t->vocab = spm_wrap_vocab(t->spm);
            t->bos = spm_wrap_bos(t->spm);
            t->eos = spm_wrap_eos(t->spm);
        }
    }
    t->bytes = data;
    t->nbytes = size;
    if (rc) {
        tok_close(t);
        return rc;
    }
    *out = t;
    return 0;
}

wp_result tok_open_mem(const char *json, size_t len, const char *name, wp_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    wp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return wp_fail(WP_FAILED, err, errlen, "tokenizer: out of memory");
    wp_result rc = hf_open(t, NULL, name ? name : "tokenizer.json", json, len, err, errlen);
    if (rc == 0 && name && !(t->path = strdup(name))) rc = wp_fail(WP_FAILED, err, errlen, "tokenizer: out of memory");
    if (rc == 0 && !(t->bytes = malloc(len + 1))) rc = wp_fail(WP_FAILED, err, errlen, "tokenizer: out of memory");
    if (rc == 0) {
        memcpy(t->bytes, json, len);
        t->bytes[len] = '\0';
        t->nbytes = len;
    }
    if (rc) {
        tok_close(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- encode / decode ---- */

wp_result tok_encode(const wp_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    switch (t->type) {
    case TOK_SPM: return spm_wrap_encode(t->spm, text, len, ids, n, err, errlen);
    case TOK_HF: return tokjson_encode(t->hf, text, len, ids, n, err, errlen);
    default: break;
    }
    if (len == 0) return 0;
    int32_t *a = malloc(len * sizeof *a);
    if (!a) return wp_fail(WP_FAILED, err, errlen, "out of memory encoding %zu bytes", len);
    for (size_t i = 0; i < len; i++) a[i] = (unsigned char)text[i];
    *ids = a;
    *n = len;
    return 0;
}

wp_result tok_decode(const wp_tokenizer *t, const int32_t *ids, size_t n, char **text, char *err, size_t errlen) {
    *text = NULL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab)
            return wp_fail(WP_BAD_INPUT, err, errlen, "token %d (position %zu) is not in the %s vocabulary of %lld", ids[i], i,
                           tok_kind(t), (long long)t->vocab);
    if (t->type == TOK_SPM) return spm_wrap_decode(t->spm, ids, n, text, err, errlen);
    if (t->type == TOK_HF) return tokjson_decode(t->hf, ids, n, text, err, errlen);
    char *s = malloc(n + 1);
    if (!s) return wp_fail(WP_FAILED, err, errlen, "out of memory decoding %zu tokens", n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i]) s[m++] = (char)ids[i]; /* token 0 is the byte shards' document boundary, not text */
    s[m] = '\0';
    *text = s;
    return 0;
}

wp_result tok_find_in_dir(const char *dir, char *path, size_t pathlen, char *err, size_t errlen) {
    char spm[WP_PATH_MAX], hf[WP_PATH_MAX];
    if (pathlen) path[0] = '\0';
    wp_result rc = fs_join(spm, sizeof spm, dir, TOK_FILE_SPM, err, errlen);
    if (rc == 0) rc = fs_join(hf, sizeof hf, dir, TOK_FILE_HF, err, errlen);
    if (rc) return rc;
    bool has_spm = fs_exists(spm), has_hf = fs_exists(hf);
    if (has_spm && has_hf)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s and %s: two tokenizers in one directory; name one with --tokenizer", spm, hf);
    const char *found = has_spm ? spm : has_hf ? hf : "";
    if (strlen(found) >= pathlen) return wp_fail(WP_FAILED, err, errlen, "%s: path too long", found);
    memcpy(path, found, strlen(found) + 1);
    return 0;
}
