/* Normalizers of a tokenizer.json (tok_norm.h), after the `tokenizers` library's
 * normalizers/{unicode,prepend,replace}.rs. */
#include "tok_norm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "fsutil.h"

typedef enum { NORM_NONE, NORM_UNICODE, NORM_PREPEND, NORM_REPLACE } norm_kind;

typedef struct {
    norm_kind kind;
    utf8proc_option_t uni; /* NORM_UNICODE: utf8proc's options for NFC, NFD, ... */
    char *str;             /* NORM_PREPEND: the prefix; NORM_REPLACE: the content */
    size_t len;
    tok_pattern pat; /* NORM_REPLACE */
} norm_step;

struct tok_norm {
    norm_step *s;
    size_t n, cap;
    char name[256]; /* the tokenizer file, for norm_apply's refusal */
};

/* What the normalizers may make of a piece of n bytes: at most NORM_GROWTH x n + NORM_SLACK bytes.
 * The pieces the encoder is given are bounded (prepare's WP_PREPARE_PIECE_BYTES), and so must be
 * what a normalizer makes of them: a Replace that writes 1000 bytes for every character would
 * turn 1 MB into 1 GB. Real normalizers stay far below it (NFKD's longest expansion, U+FDFA, is
 * 11x; SentencePiece's Replace of " " by "\u2581" 3x; a Prepend adds its few bytes). */
enum { NORM_GROWTH = 32, NORM_SLACK = 4096 };

void norm_free(tok_norm *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n; i++) {
        free(n->s[i].str);
        pattern_free(&n->s[i].pat);
    }
    free(n->s);
    free(n);
}

static wp_result dup_str(json_t *v, char **out, size_t *len) {
    *len = json_string_length(v);
    *out = malloc(*len + 1);
    if (!*out) return 1;
    memcpy(*out, json_string_value(v), *len + 1);
    return 0;
}

static wp_result norm_add(tok_norm *n, json_t *j, const char *name, int depth, char *err, size_t errlen);

static wp_result norm_step_parse(tok_norm *n, json_t *j, const char *name, const char *type, char *err, size_t errlen) {
    norm_step st = {0};
    static const char *const uni[] = {"NFC", "NFD", "NFKC", "NFKD"};
    static const utf8proc_option_t opt[] = {UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE, UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                            UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
    wp_result rc = WP_OK;
    for (int i = 0; i < 4; i++)
        if (strcmp(type, uni[i]) == 0) st.kind = NORM_UNICODE, st.uni = opt[i] | UTF8PROC_STABLE;
    if (st.kind == NORM_UNICODE && st.uni) {
        /* utf8proc's options are set */
    } else if (strcmp(type, "Prepend") == 0) {
        json_t *p = json_object_get(j, "prepend");
        if (!json_is_string(p)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: normalizer Prepend: \"prepend\" is not a string", name);
        st.kind = NORM_PREPEND;
        rc = dup_str(p, &st.str, &st.len);
    } else if (strcmp(type, "Replace") == 0) {
        json_t *c = json_object_get(j, "content");
        if (!json_is_string(c)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: normalizer Replace: \"content\" is not a string", name);
        st.kind = NORM_REPLACE;
        char where[512];
        snprintf(where, sizeof where, "%s: normalizer Replace", name);
        rc = tok_parse_pattern(json_object_get(j, "pattern"), where, &st.pat, err, errlen);
        if (rc == 0) rc = dup_str(c, &st.str, &st.len);
    } else {
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: normalizer type \"%s\" is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence are)",
                       name, type);
    }
    if (rc == 0 && n->n == n->cap) {
        size_t cap = n->cap ? 2 * n->cap : 4;
        norm_step *g = realloc(n->s, cap * sizeof *g);
        if (!g) rc = 1;
        else n->s = g, n->cap = cap;
    }
    if (rc) {
        free(st.str);
        pattern_free(&st.pat);
        return rc == 1 ? wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name) : rc;
    }
    n->s[n->n++] = st;
    return 0;
}

static wp_result norm_add(tok_norm *n, json_t *j, const char *name, int depth, char *err, size_t errlen) {
    if (json_is_null(j)) return 0;
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: normalizer has no \"type\"", name);
    if (strcmp(type, "Sequence") != 0) return norm_step_parse(n, j, name, type, err, errlen);
    json_t *list = json_object_get(j, "normalizers");
    if (!json_is_array(list) || depth > 8)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: normalizer Sequence: \"normalizers\" is not an array (or nests too deep)", name);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        WP_TRY(norm_add(n, e, name, depth + 1, err, errlen));
    }
    return 0;
}

wp_result norm_parse(json_t *j, const char *name, tok_norm **out, char *err, size_t errlen) {
    *out = NULL;
    if (!j || json_is_null(j)) return 0;
    tok_norm *n = calloc(1, sizeof *n);
    if (!n) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
    snprintf(n->name, sizeof n->name, "%s", name);
    wp_result rc = norm_add(n, j, name, 0, err, errlen);
    if (rc || n->n == 0) {
        norm_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

static wp_result norm_unicode(const norm_step *st, const char *s, size_t len, tok_buf *out) {
    bool ascii = true;
    for (size_t i = 0; i < len && ascii; i++) ascii = (unsigned char)s[i] < 0x80;
    if (ascii) return buf_add(out, s, len); /* every normal form of ASCII is itself */
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst, st->uni);
    if (m < 0) return 1; /* the input is valid UTF-8: only memory can fail */
    wp_result rc = buf_add(out, dst, (size_t)m);
    free(dst);
    return rc;
}

static const char *step_name(const norm_step *st) {
    switch (st->kind) {
    case NORM_UNICODE: return "NFC/NFD/NFKC/NFKD";
    case NORM_PREPEND: return "Prepend";
    case NORM_REPLACE: return "Replace";
    default: return "?";
    }
}

/* Appends n bytes to out unless that passes limit: then 1 with segs->why set. */
static wp_result bounded_add(tok_buf *out, const void *s, size_t n, size_t limit, tok_segs *segs, const tok_norm *nm,
                             const norm_step *st, size_t piece) {
    if (n > limit || out->n > limit - n) {
        snprintf(segs->why, sizeof segs->why, "%s: normalizer %s makes more than %zu bytes of a %zu-byte piece (at most %dx + %d: "
                 "refused as a normalizer that expands without bound)", nm->name, step_name(st), limit, piece, NORM_GROWTH, NORM_SLACK);
        return 1;
    }
    return buf_add(out, s, n);
}

static wp_result norm_one(const tok_norm *nm, const norm_step *st, const char *s, size_t len, tok_buf *out, tok_segs *segs,
                          size_t limit, size_t piece) {
    out->n = 0;
    switch (st->kind) {
    case NORM_NONE: break;
    case NORM_UNICODE: {
        wp_result rc = norm_unicode(st, s, len, out);
        if (rc == 0 && out->n > limit) { /* utf8proc grows a character 18 code points at most: checked after */
            size_t made = out->n;
            out->n = 0;
            return bounded_add(out, NULL, made, limit, segs, nm, st, piece);
        }
        return rc;
    }
    case NORM_PREPEND:
        if (len && bounded_add(out, st->str, st->len, limit, segs, nm, st, piece)) return 1;
        return bounded_add(out, s, len, limit, segs, nm, st, piece);
    case NORM_REPLACE:
        if (len == 0) return 0;
        if (pattern_find(&st->pat, s, len, false, segs)) return 1;
        for (size_t i = 0; i < segs->n; i++) {
            const tok_seg *g = &segs->s[i];
            if (g->m ? bounded_add(out, st->str, st->len, limit, segs, nm, st, piece)
                     : bounded_add(out, s + g->a, g->b - g->a, limit, segs, nm, st, piece))
                return 1;
        }
        return 0;
    }
    return 0;
}

wp_result norm_apply(const tok_norm *n, const char *s, size_t len, tok_buf *out, tok_buf *tmp, tok_segs *segs) {
    out->n = 0;
    if (!n) return buf_add(out, s, len);
    size_t limit = len > (SIZE_MAX - NORM_SLACK) / NORM_GROWTH ? SIZE_MAX : NORM_GROWTH * len + NORM_SLACK;
    /* steps alternate between the two buffers so that the last writes into out */
    for (size_t i = 0; i < n->n; i++) {
        tok_buf *dst = (n->n - 1 - i) % 2 == 0 ? out : tmp;
        if (norm_one(n, &n->s[i], s, len, dst, segs, limit, len)) return 1;
        s = dst->b;
        len = dst->n;
    }
    return 0;
}
