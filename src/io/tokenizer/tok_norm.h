/* The normalizer of a tokenizer.json (tokjson.h): the steps the `tokenizers` library applies
 * to each stretch of text between non-normalized added tokens before it is pre-tokenized.
 * Supported: null, Sequence, NFC / NFD / NFKC / NFKD (utf8proc), Prepend and Replace (String
 * or Regex pattern), which is what the GPT-2, Llama-3 and SentencePiece-style (Llama-2,
 * Mistral) families use. Anything else is refused by name. */
#ifndef WP_IO_TOK_NORM_H
#define WP_IO_TOK_NORM_H

#include <jansson.h>
#include <stddef.h>

#include "tok_pieces.h"
#include "tok_split.h"
#include "result.h"

typedef struct tok_norm tok_norm;

/* j: the "normalizer" value (NULL or JSON null: none). *out NULL when there is nothing to do.
 * 0 ok; 2 unsupported or malformed (err names `name` and the field); 1 out of memory. */
wp_result norm_parse(json_t *j, const char *name, tok_norm **out, char *err, size_t errlen);
void norm_free(tok_norm *n);
/* s[0, len) normalized into out (cleared first); tmp and segs are scratch. 0 ok, 1 out of memory
 * or a refusal the encoder reports as bad input, with segs->why set: the output would pass 32x
 * the piece + 4 KiB (a normalizer that expands without bound), or a regex hit a PCRE2 limit. */
wp_result norm_apply(const tok_norm *n, const char *s, size_t len, tok_buf *out, tok_buf *tmp, tok_segs *segs);

#endif
