/* The pre-tokenizer of a tokenizer.json (tokjson.h): how normalized text is cut into the words
 * the BPE model encodes one at a time. Supported: null, Sequence, ByteLevel (GPT-2's regex or
 * none; it must come last, since it hands the model bytes), Split (a String or a Regex,
 * compiled by PCRE2, with any behavior and invert), Digits and Metaspace, as the
 * `tokenizers` library applies them. Anything else is refused by name. */
#ifndef WP_IO_TOK_PRETOK_H
#define WP_IO_TOK_PRETOK_H

#include <jansson.h>
#include <stdbool.h>

#include "tok_pieces.h"
#include "tok_split.h"
#include "result.h"

typedef struct tok_pretok tok_pretok;

/* j: the "pre_tokenizer" value (NULL or null: none, *out NULL). 0, 2 (err names `name` and
 * the field), 1. */
wp_result pretok_parse(json_t *j, const char *name, tok_pretok **out, char *err, size_t errlen);
void pretok_free(tok_pretok *p);
/* True when the words are bytes to map through the byte-level alphabet (ByteLevel last). */
bool pretok_byte_level(const tok_pretok *p);
/* Every step over the text pieces of *cur (added tokens pass through), *next the scratch
 * list; the result is in *cur. 0 ok, 1 out of memory. */
wp_result pretok_apply(const tok_pretok *p, tok_pieces **cur, tok_pieces **next, tok_segs *segs, tok_buf *tmp);

#endif
