/* Splitting text by a pattern, as the `tokenizers` library's NormalizedString::split does it:
 * a pattern (a PCRE2 regex, a literal string, or "every numeric character") cuts the text into
 * segments that match and segments that do not; a behavior (Removed, Isolated,
 * MergedWithPrevious, MergedWithNext, Contiguous) says which become pieces. Regexes are
 * compiled with PCRE2_UTF | PCRE2_UCP (Unicode classes for \s, \p{L}, ...) and JIT, and are
 * shared read-only by every thread; the per-call state is a tok_segs. */
#ifndef WP_IO_TOK_SPLIT_H
#define WP_IO_TOK_SPLIT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>

#include "tok_pieces.h"
#include "result.h"

typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } split_behavior;
typedef enum { PAT_REGEX, PAT_STRING, PAT_NUMERIC } pat_kind;

typedef struct {
    pat_kind kind;
    pcre2_code *re;
    char *lit; /* PAT_STRING */
    size_t litlen;
    char *where; /* PAT_REGEX: what pattern_regex was told (the file and the field), for match errors */
} tok_pattern;

typedef struct {
    size_t a, b;
    bool m; /* a match (after invert) */
} tok_seg;

typedef struct {
    tok_seg *s;
    size_t n, cap;
    pcre2_match_data *md;
    /* Set when a step failed for a reason of the tokenizer file, not of memory: a regex that
     * hit PCRE2's match, depth or heap limit (naming the pattern), a normalizer past its bound
     * (tok_norm.h). The encoder reports it as bad input (2) instead of "out of memory". */
    char why[768];
} tok_segs;

/* 0 ok; 2 the regex does not compile (err names `where`); 1 out of memory. */
wp_result pattern_regex(tok_pattern *p, const char *re, const char *where, char *err, size_t errlen);
wp_result pattern_string(tok_pattern *p, const char *s, size_t n);
void pattern_free(tok_pattern *p);
/* {"String": s} or {"Regex": r}, the pattern of a Replace or a Split: 0, 2 (named by where), 1. */
wp_result tok_parse_pattern(json_t *j, const char *where, tok_pattern *p, char *err, size_t errlen);
/* The name of a behavior in tokenizer.json -> *out; false when unknown. */
bool split_behavior_parse(const char *name, split_behavior *out);

/* The segments of s[0, n) (n > 0) into segs. 0 ok, 1 out of memory or a regex failure (then
 * segs->why says which regex and which PCRE2 limit). */
wp_result pattern_find(const tok_pattern *p, const char *s, size_t n, bool invert, tok_segs *segs);
/* The pieces the behavior keeps, appended to out; a piece is at the origin when origin is set
 * and it starts at s's first byte. 0 ok, 1 out of memory. */
wp_result split_push(tok_segs *segs, split_behavior b, const char *s, bool origin, tok_pieces *out);
void segs_free(tok_segs *segs);

#endif
