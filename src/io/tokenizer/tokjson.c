/* tokenizer.json: opening, added tokens, and the encode / decode pipelines (tokjson.h). After
 * the `tokenizers` library's tokenizer/{mod,added_vocabulary,serialization}.rs. */
#include "tokjson.h"
#include "json_in.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "fsutil.h"
#include "tok_decode.h"
#include "tok_norm.h"
#include "tok_pieces.h"
#include "tok_pretok.h"
#include "tok_utf8.h"

typedef struct {
    char *content; /* as written */
    size_t len;
    char *pattern; /* what is matched: the content, normalized when `normalized` */
    size_t plen;
    int32_t id;
    bool single_word, lstrip, rstrip, normalized;
} added_tok;

/* Added tokens matched leftmost-longest (aho-corasick's MatchKind::LeftmostLongest): indexes
 * of the tokens sorted by first byte, then longest first. */
typedef struct {
    size_t *order, n;
    size_t first[257]; /* order[first[c] .. first[c+1]) start with byte c */
} added_set;

struct wp_tokjson {
    wp_bpe *bpe;
    tok_norm *norm;
    tok_pretok *pretok;
    tok_decoder *dec;
    added_tok *added;
    size_t n_added, n_new;
    added_set raw, normed;
    int32_t bos;
    bool byte_level;
};

int64_t tokjson_vocab(const wp_tokjson *t) { return (int64_t)(bpe_count(t->bpe) + t->n_new); }
int32_t tokjson_template_bos(const wp_tokjson *t) { return t->bos; }

void tokjson_free(wp_tokjson *t) {
    if (!t) return;
    bpe_free(t->bpe);
    norm_free(t->norm);
    pretok_free(t->pretok);
    decoder_free(t->dec);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].pattern);
    }
    free(t->added);
    free(t->raw.order);
    free(t->normed.order);
    free(t);
}

int32_t tokjson_token_id(const wp_tokjson *t, const char *s) {
    for (size_t i = 0; s && i < t->n_added; i++)
        if (strcmp(t->added[i].content, s) == 0 && strlen(s) == t->added[i].len) return t->added[i].id;
    return s ? bpe_id(t->bpe, s, strlen(s)) : -1;
}

static int by_first_then_longest(const void *a, const void *b, void *ctx) {
    const added_tok *tokens = ctx, *x = &tokens[*(const size_t *)a], *y = &tokens[*(const size_t *)b];
    unsigned char cx = (unsigned char)x->pattern[0], cy = (unsigned char)y->pattern[0];
    if (cx != cy) return cx < cy ? -1 : 1;
    if (x->plen != y->plen) return x->plen > y->plen ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* The set of added tokens with normalized == want (empty patterns never match). */
static wp_result set_build(const wp_tokjson *t, bool want, added_set *s) {
    s->order = malloc((t->n_added + 1) * sizeof *s->order);
    if (!s->order) return 1;
    s->n = 0;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == want && t->added[i].plen > 0) s->order[s->n++] = i;
    qsort_r(s->order, s->n, sizeof *s->order, by_first_then_longest, t->added);
    for (int c = 0, k = 0; c <= 256; c++) {
        while ((size_t)k < s->n && (unsigned char)t->added[s->order[k]].pattern[0] < c) k++;
        s->first[c] = (size_t)k;
    }
    return 0;
}

/* The longest added token of the set at s[i, n), -1 when none. */
static inline long set_match(const wp_tokjson *t, const added_set *set, const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    for (size_t k = set->first[c]; k < set->first[c + 1]; k++) {
        const added_tok *a = &t->added[set->order[k]];
        if (a->plen <= n - i && memcmp(s + i, a->pattern, a->plen) == 0) return (long)set->order[k];
    }
    return -1;
}

/* The regexes added_vocabulary.rs uses for single_word, lstrip and rstrip: \w at an end, the
 * run of \s at the end of s[0, at), the run of \s at the start of s[0, n). */
static uint32_t char_before(const char *s, size_t at) {
    size_t i = at;
    while (i > 0 && ((unsigned char)s[--i] & 0xC0) == 0x80) {}
    return utf8_next((const unsigned char *)s, at, &i);
}

static size_t ws_run_before(const char *s, size_t at) {
    while (at > 0) {
        size_t i = at;
        while (i > 0 && ((unsigned char)s[--i] & 0xC0) == 0x80) {}
        size_t k = i;
        if (!uni_is_whitespace(utf8_next((const unsigned char *)s, at, &k))) break;
        at = i;
    }
    return at;
}

static size_t ws_run_after(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = i;
        if (!uni_is_whitespace(utf8_next((const unsigned char *)s, n, &k))) break;
        i = k;
    }
    return i;
}

/* find_matches: s cut around the set's tokens; the pieces appended to out. */
static wp_result split_added(const wp_tokjson *t, const added_set *set, const char *s, size_t n, bool origin, tok_pieces *out) {
    if (set->n == 0) return pieces_text(out, s, n, origin);
    size_t from = 0; /* start_offset */
    for (size_t i = 0; i < n;) {
        long k = set_match(t, set, s, n, i);
        if (k < 0) {
            i++;
            continue;
        }
        const added_tok *a = &t->added[k];
        size_t start = i, stop = i + a->plen;
        i = stop; /* the matches are found first, non-overlapping, whatever is kept */
        if (a->single_word) {
            bool start_space = start == 0 || !uni_is_word(char_before(s, start));
            size_t z = stop;
            bool stop_space = stop == n || !uni_is_word(utf8_next((const unsigned char *)s, n, &z));
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = ws_run_before(s, start);
            start = ns > from ? ns : from;
        }
        if (a->rstrip) stop += ws_run_after(s + stop, n - stop);
        if (from < start && pieces_text(out, s + from, start - from, origin && from == 0)) return 1;
        if (pieces_added(out, a->id)) return 1;
        from = stop;
    }
    return from < n ? pieces_text(out, s + from, n - from, origin && from == 0) : 0;
}

/* Normalizer, then the normalized added tokens, piece by piece. */
static wp_result normalize_pieces(const wp_tokjson *t, tok_pieces **cur, tok_pieces **next, tok_buf *nb, tok_buf *tmp,
                            tok_segs *segs) {
    if (!t->norm && t->normed.n == 0) return 0;
    tok_pieces *in = *cur, *out = *next;
    pieces_clear(out);
    for (size_t i = 0; i < in->n; i++) {
        const tok_piece *p = &in->p[i];
        if (p->id >= 0) {
            if (pieces_added(out, p->id)) return 1;
            continue;
        }
        if (norm_apply(t->norm, piece_str(in, i), p->len, nb, tmp, segs)) return 1;
        if (split_added(t, &t->normed, nb->b, nb->n, p->origin, out)) return 1;
    }
    *cur = out;
    *next = in;
    return 0;
}

wp_result tokjson_encode(const wp_tokjson *t, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    char *fixed = NULL;
    size_t m = utf8_repair(text, len, &fixed);
    if (m == (size_t)-1) return wp_fail(WP_FAILED, err, errlen, "out of memory encoding %zu bytes", len);
    const char *s = fixed ? fixed : text;
    tok_pieces A = {0}, B = {0}, *cur = &A, *next = &B;
    tok_buf nb = {0}, tmp = {0};
    tok_segs segs = {0};
    tok_ids out = {0};
    bpe_scratch *sc = bpe_scratch_new();
    int rc = sc ? split_added(t, &t->raw, s, m, true, cur) : 1;
    if (rc == 0) rc = normalize_pieces(t, &cur, &next, &nb, &tmp, &segs);
    if (rc == 0) rc = pretok_apply(t->pretok, &cur, &next, &segs, &tmp);
    for (size_t i = 0; rc == 0 && i < cur->n; i++)
        rc = cur->p[i].id >= 0 ? ids_push(&out, cur->p[i].id)
                               : bpe_word(t->bpe, piece_str(cur, i), cur->p[i].len, t->byte_level, sc, &out);
    bpe_scratch_free(sc);
    pieces_free(&A);
    pieces_free(&B);
    buf_free(&nb);
    buf_free(&tmp);
    free(fixed);
    if (rc) {
        free(out.v);
        /* a regex limit or a normalizer's bound is the tokenizer file's fault (segs.why names it) */
        wp_result why = segs.why[0] ? wp_fail(WP_BAD_INPUT, err, errlen, "%s", segs.why)
                                    : wp_fail(WP_FAILED, err, errlen, "out of memory encoding %zu bytes", len);
        segs_free(&segs);
        return why;
    }
    segs_free(&segs);
    if (out.n == 0) free(out.v);
    *ids = out.n ? out.v : NULL;
    *n = out.n;
    return 0;
}

wp_result tokjson_decode(const wp_tokjson *t, const int32_t *ids, size_t n, char **text, char *err, size_t errlen) {
    *text = NULL;
    tok_pieces A = {0}, B = {0}, *cur = &A, *next = &B;
    tok_buf out = {0};
    size_t count = bpe_count(t->bpe);
    wp_result rc = WP_OK;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        size_t len;
        const char *s;
        if ((size_t)ids[i] < count) {
            s = bpe_token(t->bpe, ids[i], &len);
        } else { /* a new added token: they follow the vocabulary in order */
            const added_tok *a = NULL;
            for (size_t k = 0; k < t->n_added && !a; k++)
                if (t->added[k].id == ids[i]) a = &t->added[k];
            s = a->content;
            len = a->len;
        }
        rc = pieces_text(cur, s, len, false);
    }
    if (rc == 0) rc = decoder_apply(t->dec, &cur, &next, &out);
    if (rc == 0) rc = buf_reserve(&out, 1);
    if (rc == 0) {
        size_t m = 0;
        for (size_t i = 0; i < out.n; i++)
            if (out.b[i]) out.b[m++] = out.b[i]; /* a C string cannot hold a NUL byte */
        out.b[m] = '\0';
        *text = out.b;
    } else {
        buf_free(&out);
    }
    pieces_free(&A);
    pieces_free(&B);
    return rc ? wp_fail(WP_FAILED, err, errlen, "out of memory decoding %zu tokens", n) : 0;
}

static bool flag_of(json_t *a, const char *key, bool def) {
    json_t *v = json_object_get(a, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

/* One entry of added_tokens: its id must be the one tokenizers gives it (see tokjson.h). */
static wp_result added_one(wp_tokjson *t, json_t *a, size_t i, const char *name, char *err, size_t errlen) {
    json_t *c = json_object_get(a, "content"), *id = json_object_get(a, "id");
    if (!json_is_string(c) || !json_is_integer(id))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: added_tokens[%zu]: no string \"content\" and integer \"id\"", name, i);
    const char *s = json_string_value(c);
    size_t len = json_string_length(c);
    if (len == 0) return 0; /* tokenizers ignores an empty added token */
    for (size_t k = 0; k < t->n_added; k++)
        if (t->added[k].len == len && memcmp(t->added[k].content, s, len) == 0)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: added_tokens[%zu]: \"%.40s\" is added twice", name, i, s);
    int32_t in_vocab = bpe_id(t->bpe, s, len);
    long long want = in_vocab >= 0 ? in_vocab : (long long)(bpe_count(t->bpe) + t->n_new), got = json_integer_value(id);
    if (got != want)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: added_tokens[%zu] \"%.40s\": id %lld, but tokenizers gives it %lld (%s)", name, i, s, got,
                       want, in_vocab >= 0 ? "its model.vocab id" : "the next id after the vocabulary and the added tokens before it");
    added_tok *e = &t->added[t->n_added];
    memset(e, 0, sizeof *e);
    e->content = malloc(len + 1);
    if (!e->content) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
    memcpy(e->content, s, len + 1);
    e->len = len;
    e->id = (int32_t)want;
    e->single_word = flag_of(a, "single_word", false);
    e->lstrip = flag_of(a, "lstrip", false);
    e->rstrip = flag_of(a, "rstrip", false);
    e->normalized = flag_of(a, "normalized", !flag_of(a, "special", false));
    t->n_added++;
    if (in_vocab < 0) t->n_new++;
    return 0;
}

/* Each token's pattern: a normalized token is matched in its normalized form. */
static wp_result added_patterns(wp_tokjson *t, const char *name, char *err, size_t errlen) {
    tok_buf nb = {0}, tmp = {0};
    tok_segs segs = {0};
    wp_result rc = WP_OK;
    for (size_t i = 0; rc == 0 && i < t->n_added; i++) {
        added_tok *e = &t->added[i];
        const char *p = e->content;
        size_t n = e->len;
        if (e->normalized && t->norm) {
            rc = norm_apply(t->norm, e->content, e->len, &nb, &tmp, &segs);
            p = nb.b, n = nb.n;
        }
        if (rc == 0 && !(e->pattern = malloc(n + 1))) rc = 1;
        if (rc == 0) {
            memcpy(e->pattern, p, n);
            e->pattern[n] = '\0';
            e->plen = n;
        }
    }
    if (rc == 0 && (set_build(t, false, &t->raw) || set_build(t, true, &t->normed))) rc = 1;
    buf_free(&nb);
    buf_free(&tmp);
    segs_free(&segs);
    return rc ? wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name) : 0;
}

static wp_result parse_added(wp_tokjson *t, json_t *added, const char *name, char *err, size_t errlen) {
    if (added && !json_is_array(added) && !json_is_null(added)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: added_tokens is not an array", name);
    t->added = calloc(json_array_size(added) + 1, sizeof *t->added);
    if (!t->added) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        WP_TRY(added_one(t, a, i, name, err, errlen));
    }
    if (bpe_count(t->bpe) + t->n_new > INT32_MAX) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: more than 2^31-1 tokens", name);
    return added_patterns(t, name, err, errlen);
}

/* BOS: the special token that opens post_processor's TemplateProcessing "single" template
 * (alone or in a Sequence), e.g. Llama-3's <|begin_of_text|> $A. */
static int32_t template_bos(const wp_tokjson *t, json_t *pp, int depth) {
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!type || depth > 8) return -1;
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(pp, "processors"), i, e) {
            int32_t b = template_bos(t, e, depth + 1);
            if (b >= 0) return b;
        }
        return -1;
    }
    if (strcmp(type, "TemplateProcessing") != 0) return -1;
    json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    const char *sp = json_string_value(json_object_get(json_object_get(first, "SpecialToken"), "id"));
    json_t *ids = json_object_get(json_object_get(json_object_get(pp, "special_tokens"), sp ? sp : ""), "ids");
    json_t *id = json_array_get(ids, 0);
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= tokjson_vocab(t)) return -1;
    return (int32_t)json_integer_value(id);
}

static wp_result open_root(wp_tokjson *t, json_t *root, const char *name, char *err, size_t errlen) {
    json_t *version = json_object_get(root, "version");
    if (version && (!json_is_string(version) || strcmp(json_string_value(version), "1.0") != 0))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: version is not \"1.0\"", name);
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a tokenizer.json: no \"model\" object", name);
    wp_result rc = bpe_parse(model, name, &t->bpe, err, errlen);
    if (rc == 0) rc = norm_parse(json_object_get(root, "normalizer"), name, &t->norm, err, errlen);
    if (rc == 0) rc = pretok_parse(json_object_get(root, "pre_tokenizer"), name, &t->pretok, err, errlen);
    if (rc == 0) rc = decoder_parse(json_object_get(root, "decoder"), name, &t->dec, err, errlen);
    if (rc == 0) rc = parse_added(t, json_object_get(root, "added_tokens"), name, err, errlen);
    if (rc == 0) {
        t->byte_level = pretok_byte_level(t->pretok);
        t->bos = template_bos(t, json_object_get(root, "post_processor"), 0);
    }
    return rc;
}

wp_result tokjson_open(const char *json, size_t len, const char *name, wp_tokjson **out, char *err, size_t errlen) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_in_loadb(json, len, 0, &je);
    if (!root) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a tokenizer: JSON error at line %d: %s", name, je.line, je.text);
    wp_tokjson *t = calloc(1, sizeof *t);
    int rc = t ? open_root(t, root, name, err, errlen) : wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
    json_decref(root);
    if (rc) {
        tokjson_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
