/* Pattern splits of the tokenizer.json pipeline (tok_split.h), after the `tokenizers`
 * library's pattern.rs and normalizer.rs (split). */
#include "tok_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "tok_utf8.h"

wp_result pattern_regex(tok_pattern *p, const char *re, const char *where, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->kind = PAT_REGEX;
    int code;
    PCRE2_SIZE at;
    p->re = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: the regex does not compile at offset %zu: %s", where, (size_t)at, (char *)msg);
    }
    /* JIT is a speed-up only: a platform without it interprets the same pattern */
    (void)pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE);
    size_t wl = strlen(where) + 100;
    if (!(p->where = malloc(wl))) return 1;
    snprintf(p->where, wl, "%s regex \"%.60s%s\"", where, re, strlen(re) > 60 ? "..." : "");
    return 0;
}

wp_result pattern_string(tok_pattern *p, const char *s, size_t n) {
    memset(p, 0, sizeof *p);
    p->kind = PAT_STRING;
    p->lit = malloc(n + 1);
    if (!p->lit) return 1;
    memcpy(p->lit, s, n);
    p->lit[n] = '\0';
    p->litlen = n;
    return 0;
}

void pattern_free(tok_pattern *p) {
    if (p->re) pcre2_code_free(p->re);
    free(p->lit);
    free(p->where);
    memset(p, 0, sizeof *p);
}

bool split_behavior_parse(const char *name, split_behavior *out) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; name && i < 5; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (split_behavior)i;
            return true;
        }
    return false;
}

static wp_result seg_add(tok_segs *g, size_t a, size_t b, bool m) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 256;
        tok_seg *s = realloc(g->s, cap * sizeof *s);
        if (!s) return 1;
        g->s = s;
        g->cap = cap;
    }
    g->s[g->n++] = (tok_seg){a, b, m};
    return 0;
}

/* A match [a, b) after the text since prev: the gap (when any) and the match. */
static wp_result seg_match(tok_segs *g, size_t *prev, size_t a, size_t b, bool invert) {
    if (*prev != a && seg_add(g, *prev, a, invert)) return 1;
    if (seg_add(g, a, b, !invert)) return 1;
    *prev = b;
    return 0;
}

static wp_result find_regex(const tok_pattern *p, const char *s, size_t n, bool invert, tok_segs *g) {
    if (!g->md && !(g->md = pcre2_match_data_create(1, NULL))) return 1;
    size_t prev = 0, at = 0;
    while (at <= n) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, g->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            /* a pattern that backtracks without end on this text is the file's doing, not memory's */
            PCRE2_UCHAR msg[160];
            if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) snprintf((char *)msg, sizeof msg, "PCRE2 error %d", rc);
            const char *limit = rc == PCRE2_ERROR_MATCHLIMIT ? "match limit" : rc == PCRE2_ERROR_DEPTHLIMIT ? "depth limit"
                                : rc == PCRE2_ERROR_HEAPLIMIT ? "heap limit" : NULL;
            if (rc != PCRE2_ERROR_NOMEMORY)
                snprintf(g->why, sizeof g->why, "%.500s: the regex stopped at byte %zu of a %zu-byte piece: %s%s (%s)", p->where, at,
                         n, limit ? "PCRE2's " : "", limit ? limit : "matching failed", (char *)msg);
            return 1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(g->md);
        if (seg_match(g, &prev, ov[0], ov[1], invert)) return 1;
        /* an empty match moves on by one character, as Oniguruma's iterator does */
        at = ov[1] > ov[0] ? ov[1] : ov[1] + (ov[1] < n ? utf8_len((unsigned char)s[ov[1]]) : 1);
    }
    return prev != n ? seg_add(g, prev, n, invert) : 0;
}

wp_result pattern_find(const tok_pattern *p, const char *s, size_t n, bool invert, tok_segs *g) {
    g->n = 0;
    if (p->kind == PAT_REGEX) return find_regex(p, s, n, invert, g);
    size_t prev = 0;
    if (p->kind == PAT_STRING && p->litlen > 0) {
        for (const char *at = s; (at = memmem(at, n - (size_t)(at - s), p->lit, p->litlen)) != NULL; at += p->litlen)
            if (seg_match(g, &prev, (size_t)(at - s), (size_t)(at - s) + p->litlen, invert)) return 1;
    } else if (p->kind == PAT_NUMERIC) {
        for (size_t i = 0; i < n;) {
            size_t a = i;
            uint32_t c = utf8_next((const unsigned char *)s, n, &i);
            if (uni_is_numeric(c) && seg_match(g, &prev, a, i, invert)) return 1;
        }
    }
    return prev != n ? seg_add(g, prev, n, invert) : 0;
}

/* The behaviors as normalizer.rs folds them: merged segments are marked non-matches. */
static void split_fold(tok_segs *g, split_behavior b) {
    size_t k = 0;
    bool prev = false;
    if (b == SPLIT_MERGED_NEXT) {
        /* right to left: a match joins the segment after it unless that one is a match too */
        size_t w = g->n;
        for (size_t i = g->n; i-- > 0;) {
            tok_seg s = g->s[i];
            if (s.m && !prev && w < g->n) g->s[w].a = s.a;
            else g->s[--w] = (tok_seg){s.a, s.b, false};
            prev = s.m;
        }
        memmove(g->s, g->s + w, (g->n - w) * sizeof *g->s);
        g->n -= w;
        return;
    }
    for (size_t i = 0; i < g->n; i++) {
        tok_seg s = g->s[i];
        bool join = b == SPLIT_CONTIGUOUS ? s.m == prev : b == SPLIT_MERGED_PREV ? s.m && !prev : false;
        if (b == SPLIT_REMOVED || b == SPLIT_ISOLATED) {
            g->s[k++] = (tok_seg){s.a, s.b, b == SPLIT_REMOVED && s.m};
        } else if (join && k > 0) {
            g->s[k - 1].b = s.b;
        } else {
            g->s[k++] = (tok_seg){s.a, s.b, false};
        }
        prev = s.m;
    }
    g->n = k;
}

wp_result split_push(tok_segs *g, split_behavior b, const char *s, bool origin, tok_pieces *out) {
    split_fold(g, b);
    for (size_t i = 0; i < g->n; i++)
        if (!g->s[i].m && pieces_text(out, s + g->s[i].a, g->s[i].b - g->s[i].a, origin && g->s[i].a == 0)) return 1;
    return 0;
}

void segs_free(tok_segs *g) {
    free(g->s);
    if (g->md) pcre2_match_data_free(g->md);
    memset(g, 0, sizeof *g);
}

/* {"String": s} or {"Regex": r}: the pattern of Replace and Split. */
wp_result tok_parse_pattern(json_t *j, const char *where, tok_pattern *p, char *err, size_t errlen) {
    json_t *s = json_object_get(j, "String"), *r = json_object_get(j, "Regex");
    if (json_is_string(s)) return pattern_string(p, json_string_value(s), json_string_length(s));
    if (json_is_string(r)) return pattern_regex(p, json_string_value(r), where, err, errlen);
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s: pattern is neither {\"String\": ...} nor {\"Regex\": ...}", where);
}
