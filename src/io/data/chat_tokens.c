/* Conversation ids and their targets (chat_tokens.h). */
#include "chat_tokens.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "gguf.h"

wp_result chat_tokens(const wp_tokenizer *t, const chat_text *c, int32_t **ids, uint8_t **mask, size_t *n, char *err,
                      size_t errlen) {
    *ids = NULL;
    *mask = NULL;
    *n = 0;
    WP_TRY(tok_encode(t, c->text, c->len, ids, n, err, errlen));
    if (*n == 0) return 0;
    *mask = calloc(*n, 1);
    if (!*mask) return wp_fail(WP_FAILED, err, errlen, "chat: out of memory");
    size_t at = 0;
    int s = 0; /* the first range that may still overlap */
    wp_result rc = 0;
    for (size_t i = 0; rc == 0 && i < *n; i++) {
        char *piece = NULL;
        rc = tok_decode(t, *ids + i, 1, &piece, err, errlen);
        if (rc) break;
        size_t len = strlen(piece);
        if (at + len > c->len || memcmp(c->text + at, piece, len) != 0) {
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: token %zu (id %d) does not spell the rendered text back at byte %zu: "
                         "--chat needs a tokenizer whose tokens decode to their own bytes (a byte-level tokenizer.json or GGUF)",
                         tok_path(t) ? tok_path(t) : tok_kind(t), i, (*ids)[i], at);
        } else {
            while (s + 1 < c->n_span && c->span[s + 1] <= at) s += 2;
            for (int r = s; r + 1 < c->n_span && c->span[r] < at + len; r += 2)
                if (c->span[r + 1] > at && (len > 0 || c->span[r] == at)) (*mask)[i] = 1;
            at += len;
        }
        free(piece);
    }
    if (rc == 0 && at != c->len)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: the tokens spell %zu of the rendered text's %zu bytes", tok_path(t) ? tok_path(t) : tok_kind(t),
                     at, c->len);
    if (rc) {
        free(*ids);
        free(*mask);
        *ids = NULL;
        *mask = NULL;
        *n = 0;
    }
    return rc;
}

/* A token's text ("" for none). */
static wp_result token_text(const wp_tokenizer *t, int64_t id, char **text, char *err, size_t errlen) {
    if (id < 0 || id >= tok_vocab_size(t)) {
        *text = strdup("");
        return *text ? 0 : wp_fail(WP_FAILED, err, errlen, "chat: out of memory");
    }
    int32_t i = (int32_t)id;
    return tok_decode(t, &i, 1, text, err, errlen);
}

/* tokenizer_config.json's chat_template beside path (*text NULL when there is none). */
static wp_result config_template(const char *path, char **text, char *where, size_t wherelen, char *err, size_t errlen) {
    *text = NULL;
    const char *slash = strrchr(path, '/');
    int dir = slash ? (int)(slash - path) + 1 : 0;
    if (snprintf(where, wherelen, "%.*stokenizer_config.json", dir, path) >= (int)wherelen)
        return wp_fail(WP_FAILED, err, errlen, "%s: path too long", path);
    if (!fs_exists(where)) return 0;
    json_t *cfg;
    WP_TRY(fs_load_json(where, (size_t)64 << 20, 0, &cfg, err, errlen));
    json_t *v = json_object_get(cfg, "chat_template");
    if (json_is_array(v)) { /* [{"name": ..., "template": ...}, ...] */
        json_t *pick = NULL, *e;
        size_t i;
        json_array_foreach(v, i, e) {
            if (json_is_string(json_object_get(e, "name")) && strcmp(json_string_value(json_object_get(e, "name")), "default") == 0)
                pick = json_object_get(e, "template");
        }
        v = pick;
    }
    wp_result rc = 0;
    if (v && !json_is_string(v)) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: chat_template is not a string (nor a list with a \"default\" one)", where);
    else if (v && !(*text = strdup(json_string_value(v)))) rc = wp_fail(WP_FAILED, err, errlen, "%s: out of memory", where);
    json_decref(cfg);
    return rc;
}

wp_result chat_template_for(const wp_tokenizer *t, const gguf_file *gguf, const char *name, chat_template *out, char *err,
                            size_t errlen) {
    const char *path = gguf ? gguf_path(gguf) : tok_path(t);
    if (!path || strcmp(tok_kind(t), "hf-tokenizer.json") != 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--chat: the tokenizer %s is not a tokenizer.json or GGUF: its tokens cannot be placed in the "
                       "rendered text", path ? path : tok_kind(t));
    char *text = NULL, *bos = NULL, *eos = NULL, where[WP_PATH_MAX + 64];
    int64_t bos_id = tok_bos(t), eos_id = tok_eos(t);
    wp_result rc;
    if (gguf) {
        snprintf(where, sizeof where, "%s: tokenizer.chat_template", path);
        rc = gguf_chat_info(gguf, &text, &bos_id, &eos_id, err, errlen);
    } else {
        rc = config_template(path, &text, where, sizeof where - 16, err, errlen);
        if (rc == 0) strcat(where, " chat_template");
    }
    if (rc == 0) rc = token_text(t, bos_id, &bos, err, errlen);
    if (rc == 0) rc = token_text(t, eos_id, &eos, err, errlen);
    if (rc == 0) rc = chat_template_init(out, name, text, where, bos, eos, err, errlen);
    if (rc == 0) out->from_gguf = gguf != NULL;
    free(text);
    free(bos);
    free(eos);
    return rc;
}
