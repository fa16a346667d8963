/* Records of a JSON Lines file (.jsonl: one JSON value a line, blank lines skipped) or of a
 * JSON array file (.json whose first non-blank byte is '['; any other .json is read as JSON
 * Lines), read as a stream: one record in memory at a time, never the whole file, each parsed
 * by jansson's json_loadb. Every record carries the line it starts on, for messages. */
#ifndef WP_IO_JSONL_H
#define WP_IO_JSONL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "result.h"

typedef struct jsonl_reader jsonl_reader;

/* Whether prepare reads path as records (its name ends in .jsonl or .json). */
bool jsonl_is_records(const char *path);

/* 0, 2 (missing or unreadable: named), 1. */
wp_result jsonl_open(jsonl_reader **out, const char *path, char *err, size_t errlen);
/* The next record into *rec (the caller json_decref's it; NULL at the end) and its line (from
 * 1). A record that is not JSON, holds invalid UTF-8, or an array file that is cut short:
 * 2 with "PATH:LINE: why" in err; the reader goes on with the next record after a bad line of
 * JSON Lines (a caller may skip it), but not after a broken array. 1: a read failure. */
wp_result jsonl_next(jsonl_reader *r, json_t **rec, int64_t *line, char *err, size_t errlen);
/* Whether jsonl_next may be called again after it returned 2. */
bool jsonl_can_resume(const jsonl_reader *r);
/* Bytes consumed so far (for progress). */
uint64_t jsonl_offset(const jsonl_reader *r);
void jsonl_close(jsonl_reader *r);

/* s[0, n) is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). */
bool jsonl_valid_utf8(const unsigned char *s, size_t n);

#endif
