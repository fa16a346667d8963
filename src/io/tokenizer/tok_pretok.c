/* Pre-tokenizers of a tokenizer.json (tok_pretok.h), after the `tokenizers` library's
 * pre_tokenizers/{byte_level,split,digits,metaspace,sequence}.rs. */
#include "tok_pretok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"

/* ByteLevel's own regex (byte_level.rs), GPT-2's */
#define GPT2_SPLIT "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef enum { PT_BYTE_LEVEL, PT_SPLIT, PT_DIGITS, PT_METASPACE } pt_kind;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend_scheme;

typedef struct {
    pt_kind kind;
    bool flag;     /* ByteLevel add_prefix_space, Split invert, Digits individual_digits, Metaspace split */
    bool use_pat;  /* ByteLevel use_regex */
    tok_pattern pat; /* ByteLevel (GPT-2's), Split; Metaspace: the replacement as a string */
    split_behavior behavior;
    prepend_scheme scheme; /* Metaspace */
} pt_step;

struct tok_pretok {
    pt_step *s;
    size_t n, cap;
};

void pretok_free(tok_pretok *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) pattern_free(&p->s[i].pat);
    free(p->s);
    free(p);
}

bool pretok_byte_level(const tok_pretok *p) { return p && p->n > 0 && p->s[p->n - 1].kind == PT_BYTE_LEVEL; }

static bool get_bool(json_t *j, const char *key, bool def) {
    json_t *v = json_object_get(j, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static wp_result pt_metaspace(json_t *j, const char *name, pt_step *st, char *err, size_t errlen) {
    json_t *r = json_object_get(j, "replacement");
    const char *scheme = json_string_value(json_object_get(j, "prepend_scheme"));
    if (!json_is_string(r) || json_string_length(r) == 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: pre_tokenizer Metaspace: \"replacement\" is not a character", name);
    st->kind = PT_METASPACE;
    st->flag = get_bool(j, "split", true);
    /* files older than prepend_scheme say add_prefix_space (true: always) */
    st->scheme = get_bool(j, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
    if (scheme && strcmp(scheme, "always") == 0) st->scheme = PREPEND_ALWAYS;
    else if (scheme && strcmp(scheme, "first") == 0) st->scheme = PREPEND_FIRST;
    else if (scheme && strcmp(scheme, "never") == 0) st->scheme = PREPEND_NEVER;
    else if (scheme) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: pre_tokenizer Metaspace: prepend_scheme \"%s\" is not always, first or never", name, scheme);
    return pattern_string(&st->pat, json_string_value(r), json_string_length(r)) ? wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name) : 0;
}

static wp_result pt_step_parse(json_t *j, const char *name, const char *type, pt_step *st, char *err, size_t errlen) {
    char where[512];
    snprintf(where, sizeof where, "%s: pre_tokenizer %s", name, type);
    if (strcmp(type, "ByteLevel") == 0) {
        st->kind = PT_BYTE_LEVEL;
        st->flag = get_bool(j, "add_prefix_space", true);
        st->use_pat = get_bool(j, "use_regex", true);
        return st->use_pat ? pattern_regex(&st->pat, GPT2_SPLIT, where, err, errlen) : 0;
    }
    if (strcmp(type, "Split") == 0) {
        st->kind = PT_SPLIT;
        st->flag = get_bool(j, "invert", false);
        if (!split_behavior_parse(json_string_value(json_object_get(j, "behavior")), &st->behavior))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: \"behavior\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", where);
        return tok_parse_pattern(json_object_get(j, "pattern"), where, &st->pat, err, errlen);
    }
    if (strcmp(type, "Digits") == 0) {
        st->kind = PT_DIGITS;
        st->flag = get_bool(j, "individual_digits", false);
        st->pat.kind = PAT_NUMERIC;
        st->behavior = st->flag ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
        return 0;
    }
    if (strcmp(type, "Metaspace") == 0) return pt_metaspace(j, name, st, err, errlen);
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s: pre_tokenizer type \"%s\" is not supported (ByteLevel, Split, Digits, Metaspace, Sequence are)",
                   name, type);
}

static wp_result pt_add(tok_pretok *p, json_t *j, const char *name, int depth, char *err, size_t errlen) {
    if (json_is_null(j)) return 0;
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: pre_tokenizer has no \"type\"", name);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(j, "pretokenizers"), *e;
        size_t i;
        if (!json_is_array(list) || depth > 8)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: pre_tokenizer Sequence: \"pretokenizers\" is not an array (or nests too deep)", name);
        json_array_foreach(list, i, e) {
            WP_TRY(pt_add(p, e, name, depth + 1, err, errlen));
        }
        return 0;
    }
    if (p->n > 0 && p->s[p->n - 1].kind == PT_BYTE_LEVEL)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: pre_tokenizer: %s after ByteLevel is not supported (ByteLevel must come last)", name, type);
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 4;
        pt_step *g = realloc(p->s, cap * sizeof *g);
        if (!g) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
        p->s = g;
        p->cap = cap;
    }
    pt_step *st = &p->s[p->n];
    memset(st, 0, sizeof *st);
    st->behavior = SPLIT_ISOLATED;
    wp_result rc = pt_step_parse(j, name, type, st, err, errlen);
    if (rc) pattern_free(&st->pat);
    else p->n++;
    return rc;
}

wp_result pretok_parse(json_t *j, const char *name, tok_pretok **out, char *err, size_t errlen) {
    *out = NULL;
    if (!j || json_is_null(j)) return 0;
    tok_pretok *p = calloc(1, sizeof *p);
    if (!p) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
    wp_result rc = pt_add(p, j, name, 0, err, errlen);
    if (rc || p->n == 0) {
        pretok_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* Metaspace: spaces become the replacement, which is prepended as the scheme says; then a
 * split before each replacement (MergedWithNext). */
static wp_result pt_metaspace_apply(const pt_step *st, const char *s, size_t n, bool origin, tok_pieces *out, tok_segs *segs,
                              tok_buf *tmp) {
    const char *r = st->pat.lit;
    size_t rl = st->pat.litlen;
    tmp->n = 0;
    bool starts = n > 0 && (s[0] == ' ' || (n >= rl && memcmp(s, r, rl) == 0)); /* after the replacement */
    bool prepend = !starts && (st->scheme == PREPEND_ALWAYS || (st->scheme == PREPEND_FIRST && origin));
    if (prepend && buf_add(tmp, r, rl)) return 1;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ' ' ? buf_add(tmp, r, rl) : buf_add(tmp, s + i, 1)) return 1;
    if (!st->flag) return pieces_text(out, tmp->b, tmp->n, origin);
    if (pattern_find(&st->pat, tmp->b, tmp->n, false, segs)) return 1;
    return split_push(segs, SPLIT_MERGED_NEXT, tmp->b, origin, out);
}

static wp_result pt_apply_one(const pt_step *st, const char *s, size_t n, bool origin, tok_pieces *out, tok_segs *segs,
                        tok_buf *tmp) {
    switch (st->kind) {
    case PT_METASPACE: return pt_metaspace_apply(st, s, n, origin, out, segs, tmp);
    case PT_BYTE_LEVEL:
        if (st->flag && s[0] != ' ') {
            tmp->n = 0;
            if (buf_add(tmp, " ", 1) || buf_add(tmp, s, n)) return 1;
            s = tmp->b;
            n = tmp->n;
        }
        if (!st->use_pat) return pieces_text(out, s, n, origin);
        if (pattern_find(&st->pat, s, n, false, segs)) return 1;
        return split_push(segs, SPLIT_ISOLATED, s, origin, out);
    default:
        if (pattern_find(&st->pat, s, n, st->flag && st->kind == PT_SPLIT, segs)) return 1;
        return split_push(segs, st->behavior, s, origin, out);
    }
}

wp_result pretok_apply(const tok_pretok *p, tok_pieces **cur, tok_pieces **next, tok_segs *segs, tok_buf *tmp) {
    for (size_t k = 0; p && k < p->n; k++) {
        tok_pieces *in = *cur, *out = *next;
        pieces_clear(out);
        for (size_t i = 0; i < in->n; i++) {
            const tok_piece *pc = &in->p[i];
            int rc = pc->id >= 0 ? pieces_added(out, pc->id)
                                 : pt_apply_one(&p->s[k], piece_str(in, i), pc->len, pc->origin, out, segs, tmp);
            if (rc) return 1;
        }
        *cur = out;
        *next = in;
    }
    return 0;
}
