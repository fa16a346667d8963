/* Decoders of a tokenizer.json (tok_decode.h), after the `tokenizers` library's
 * decoders/{byte_level,byte_fallback,fuse,strip,sequence}.rs and normalizers/replace.rs. */
#include "tok_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "fsutil.h"
#include "tok_split.h"
#include "tok_utf8.h"

typedef enum { DEC_BYTE_LEVEL, DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE } dec_kind;

typedef struct {
    dec_kind kind;
    tok_pattern pat; /* Replace */
    char *str;       /* Replace: content; Strip, Metaspace: the character */
    size_t len;
    long start, stop; /* Strip; Metaspace: start = 1 when the first token's replacements go */
} dec_step;

struct tok_decoder {
    dec_step *s;
    size_t n, cap;
    uint16_t inv[0x144]; /* ByteLevel: character -> byte + 1 (0: none) */
};

void decoder_free(tok_decoder *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) {
        pattern_free(&d->s[i].pat);
        free(d->s[i].str);
    }
    free(d->s);
    free(d);
}

static wp_result dup_json_str(json_t *v, dec_step *st) {
    st->len = json_string_length(v);
    st->str = malloc(st->len + 1);
    if (!st->str) return 1;
    memcpy(st->str, json_string_value(v), st->len + 1);
    return 0;
}

static wp_result dec_step_parse(json_t *j, const char *name, const char *type, dec_step *st, char *err, size_t errlen) {
    char where[512];
    snprintf(where, sizeof where, "%s: decoder %s", name, type);
    if (strcmp(type, "ByteLevel") == 0) st->kind = DEC_BYTE_LEVEL;
    else if (strcmp(type, "ByteFallback") == 0) st->kind = DEC_BYTE_FALLBACK;
    else if (strcmp(type, "Fuse") == 0) st->kind = DEC_FUSE;
    else if (strcmp(type, "Replace") == 0) {
        json_t *c = json_object_get(j, "content");
        st->kind = DEC_REPLACE;
        if (!json_is_string(c)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: \"content\" is not a string", where);
        wp_result rc = tok_parse_pattern(json_object_get(j, "pattern"), where, &st->pat, err, errlen);
        return rc ? rc : dup_json_str(c, st) ? wp_fail(WP_FAILED, err, errlen, "%s: out of memory", where) : 0;
    } else if (strcmp(type, "Strip") == 0 || strcmp(type, "Metaspace") == 0) {
        bool strip = type[0] == 'S';
        json_t *c = json_object_get(j, strip ? "content" : "replacement");
        if (!json_is_string(c) || json_string_length(c) == 0 || json_string_length(c) != utf8_len((unsigned char)json_string_value(c)[0]))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: \"%s\" is not one character", where, strip ? "content" : "replacement");
        st->kind = strip ? DEC_STRIP : DEC_METASPACE;
        const char *scheme = json_string_value(json_object_get(j, "prepend_scheme"));
        json_t *aps = json_object_get(j, "add_prefix_space");
        st->start = strip ? (long)json_integer_value(json_object_get(j, "start"))
                          : scheme ? strcmp(scheme, "never") != 0 : !json_is_false(aps);
        st->stop = strip ? (long)json_integer_value(json_object_get(j, "stop")) : 0;
        return dup_json_str(c, st) ? wp_fail(WP_FAILED, err, errlen, "%s: out of memory", where) : 0;
    } else {
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: decoder type \"%s\" is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence are)",
                       name, type);
    }
    return 0;
}

static wp_result dec_add(tok_decoder *d, json_t *j, const char *name, int depth, char *err, size_t errlen) {
    if (json_is_null(j)) return 0;
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: decoder has no \"type\"", name);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(j, "decoders"), *e;
        size_t i;
        if (!json_is_array(list) || depth > 8)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: decoder Sequence: \"decoders\" is not an array (or nests too deep)", name);
        json_array_foreach(list, i, e) {
            WP_TRY(dec_add(d, e, name, depth + 1, err, errlen));
        }
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        dec_step *g = realloc(d->s, cap * sizeof *g);
        if (!g) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
        d->s = g;
        d->cap = cap;
    }
    dec_step *st = &d->s[d->n];
    memset(st, 0, sizeof *st);
    wp_result rc = dec_step_parse(j, name, type, st, err, errlen);
    if (rc) {
        pattern_free(&st->pat);
        free(st->str);
    } else {
        d->n++;
    }
    return rc;
}

wp_result decoder_parse(json_t *j, const char *name, tok_decoder **out, char *err, size_t errlen) {
    *out = NULL;
    tok_decoder *d = calloc(1, sizeof *d);
    if (!d) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
    for (int b = 0; b < 256; b++) d->inv[byte_level_char((unsigned char)b)] = (uint16_t)(b + 1);
    int rc = j ? dec_add(d, j, name, 0, err, errlen) : 0;
    if (rc) {
        decoder_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* ByteLevel: every token whose characters all stand for bytes becomes those bytes, any other
 * (an added token written plainly) its own bytes; all joined into one token. */
static wp_result dec_byte_level(const tok_decoder *d, const tok_pieces *in, bool last, tok_buf *tmp, tok_pieces *out) {
    tmp->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const unsigned char *s = (const unsigned char *)piece_str(in, i);
        size_t n = in->p[i].len, at = tmp->n;
        if (buf_reserve(tmp, n)) return 1;
        for (size_t k = 0; k < n;) {
            uint32_t c = utf8_next(s, n, &k);
            if (c >= 0x144 || !d->inv[c]) {
                tmp->n = at;
                if (buf_add(tmp, s, n)) return 1;
                break;
            }
            tmp->b[tmp->n++] = (char)(d->inv[c] - 1);
        }
    }
    char *fixed = NULL;
    size_t m = last ? tmp->n : utf8_repair(tmp->b, tmp->n, &fixed);
    if (m == (size_t)-1) return 1;
    wp_result rc = pieces_text(out, fixed ? fixed : tmp->b, m, false);
    free(fixed);
    return rc;
}

static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

/* ByteFallback: a run of <0xNN> tokens is its bytes when they are valid UTF-8, else one U+FFFD
 * per byte. */
static wp_result dec_flush_bytes(tok_buf *tmp, size_t *run, tok_pieces *out) {
    if (*run == 0) return 0;
    char *fixed = NULL;
    size_t m = utf8_repair(tmp->b, tmp->n, &fixed);
    wp_result rc = WP_OK;
    if (m == (size_t)-1) rc = 1;
    else if (!fixed) rc = pieces_text(out, tmp->b, tmp->n, false);
    else
        for (size_t i = 0; rc == 0 && i < *run; i++) rc = pieces_text(out, "\xEF\xBF\xBD", 3, false);
    free(fixed);
    tmp->n = 0;
    *run = 0;
    return rc;
}

static wp_result dec_byte_fallback(const tok_pieces *in, tok_buf *tmp, tok_pieces *out) {
    size_t run = 0;
    tmp->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const char *s = piece_str(in, i);
        int hi = -1, lo = -1;
        if (in->p[i].len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>') hi = hexval(s[3]), lo = hexval(s[4]);
        if (hi >= 0 && lo >= 0) {
            char byte = (char)(hi * 16 + lo);
            if (buf_add(tmp, &byte, 1)) return 1;
            run++;
            continue;
        }
        if (dec_flush_bytes(tmp, &run, out) || pieces_text(out, s, in->p[i].len, false)) return 1;
    }
    return dec_flush_bytes(tmp, &run, out);
}

/* Replace, Strip, Metaspace: token by token. */
static wp_result dec_token(const dec_step *st, size_t idx, const char *s, size_t n, tok_segs *segs, tok_buf *tmp) {
    tmp->n = 0;
    if (st->kind == DEC_REPLACE) {
        if (n == 0) return 0;
        if (pattern_find(&st->pat, s, n, false, segs)) return 1;
        for (size_t i = 0; i < segs->n; i++)
            if (segs->s[i].m ? buf_add(tmp, st->str, st->len) : buf_add(tmp, s + segs->s[i].a, segs->s[i].b - segs->s[i].a)) return 1;
        return 0;
    }
    if (st->kind == DEC_METASPACE) {
        for (size_t i = 0; i < n;) {
            bool rep = n - i >= st->len && memcmp(s + i, st->str, st->len) == 0;
            if (rep && !(idx == 0 && st->start) && buf_add(tmp, " ", 1)) return 1;
            if (!rep && buf_add(tmp, s + i, 1)) return 1;
            i += rep ? st->len : 1;
        }
        return 0;
    }
    size_t a = 0, b = n; /* Strip: up to start leading and stop trailing copies of the character */
    for (long k = 0; k < st->start && b - a >= st->len && memcmp(s + a, st->str, st->len) == 0; k++) a += st->len;
    for (long k = 0; k < st->stop && b - a >= st->len && memcmp(s + b - st->len, st->str, st->len) == 0; k++) b -= st->len;
    return buf_add(tmp, s + a, b - a);
}

wp_result decoder_apply(const tok_decoder *d, tok_pieces **cur, tok_pieces **next, tok_buf *out) {
    tok_buf tmp = {0};
    tok_segs segs = {0};
    wp_result rc = WP_OK;
    for (size_t k = 0; rc == 0 && k < d->n; k++) {
        const dec_step *st = &d->s[k];
        tok_pieces *in = *cur, *o = *next;
        pieces_clear(o);
        if (st->kind == DEC_BYTE_LEVEL) rc = dec_byte_level(d, in, k + 1 == d->n, &tmp, o);
        else if (st->kind == DEC_BYTE_FALLBACK) rc = dec_byte_fallback(in, &tmp, o);
        else if (st->kind == DEC_FUSE) {
            tmp.n = 0;
            for (size_t i = 0; rc == 0 && i < in->n; i++) rc = buf_add(&tmp, piece_str(in, i), in->p[i].len);
            if (rc == 0) rc = pieces_text(o, tmp.b, tmp.n, false);
        } else {
            for (size_t i = 0; rc == 0 && i < in->n; i++) {
                rc = dec_token(st, i, piece_str(in, i), in->p[i].len, &segs, &tmp);
                if (rc == 0) rc = pieces_text(o, tmp.b, tmp.n, false);
            }
        }
        *cur = o;
        *next = in;
    }
    /* no decoder: tokenizers joins the tokens with spaces */
    for (size_t i = 0; rc == 0 && i < (*cur)->n; i++) {
        if (d->n == 0 && i > 0) rc = buf_add(out, " ", 1);
        if (rc == 0) rc = buf_add(out, piece_str(*cur, i), (*cur)->p[i].len);
    }
    buf_free(&tmp);
    segs_free(&segs);
    return rc;
}
