/* A Hugging Face tokenizer.json, encoded and decoded here as the `tokenizers` library (0.19)
 * does it: added tokens split out first (non-normalized ones on the raw text, normalized ones
 * after the normalizer, honouring lstrip / rstrip / single_word), the normalizer
 * (tok_norm.h), the pre-tokenizer (tok_pretok.h), the BPE model (bpe.h); decode through the
 * file's decoder (tok_decode.h). Encoding is Tokenizer.encode(text, add_special_tokens=False):
 * the post-processor adds nothing; its TemplateProcessing's leading special token is reported
 * as the BOS the file asks for (tokjson_template_bos).
 *
 * Invalid UTF-8 in the text is replaced first as Python's bytes.decode('utf-8',
 * errors='replace') does (tok_utf8.h), since the library only takes valid text.
 *
 * Ids: model.vocab must hold ids 0 .. entries-1 once each; an added token is either in the
 * vocabulary with the same id or new, and the k-th new one must have id entries + k, the id
 * the library gives it (it ignores the file's). So every id is below the entry count and
 * nothing is sized by an id. A wp_tokjson is read-only after tokjson_open (thread-safe). */
#ifndef WP_IO_TOKJSON_H
#define WP_IO_TOKJSON_H

#include <stddef.h>
#include <stdint.h>
#include "result.h"

typedef struct wp_tokjson wp_tokjson;

/* json[0, len): the file's text; name: used in errors. 0; 2 not a tokenizer.json we encode (err
 * names the file and the field); 1 out of memory. */
wp_result tokjson_open(const char *json, size_t len, const char *name, wp_tokjson **out, char *err, size_t errlen);
void tokjson_free(wp_tokjson *t);
int64_t tokjson_vocab(const wp_tokjson *t); /* entries + new added tokens */
int32_t tokjson_token_id(const wp_tokjson *t, const char *s); /* added tokens first; -1 none */
int32_t tokjson_template_bos(const wp_tokjson *t);            /* -1 none */
/* 0, 1 (out of memory); ids malloc'd (NULL when *n is 0). */
wp_result tokjson_encode(const wp_tokjson *t, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen);
/* ids already checked to be below tokjson_vocab. text: malloc'd, NUL-terminated, NUL bytes dropped. */
wp_result tokjson_decode(const wp_tokjson *t, const int32_t *ids, size_t n, char **text, char *err, size_t errlen);

#endif
