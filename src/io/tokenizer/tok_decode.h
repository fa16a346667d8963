/* The decoder of a tokenizer.json (tokjson.h): token strings -> text, as the `tokenizers`
 * library's decoders chain them. Supported: null (tokens joined by spaces, as tokenizers
 * does), ByteLevel, and the SentencePiece-style steps Replace, ByteFallback, Fuse, Strip and
 * Metaspace, alone or in a Sequence. A ByteLevel step that ends the chain hands back the bytes
 * as they are (a partial UTF-8 character stays; the library's String::from_utf8_lossy would
 * show it as U+FFFD); anywhere else its output is made valid UTF-8 first, as the library's is. */
#ifndef WP_IO_TOK_DECODE_H
#define WP_IO_TOK_DECODE_H

#include <jansson.h>

#include "tok_pieces.h"
#include "result.h"

typedef struct tok_decoder tok_decoder;

/* j: the "decoder" value. 0, 2 (unsupported: err names `name` and the field), 1. *out is
 * never NULL on success (an empty chain joins with spaces). */
wp_result decoder_parse(json_t *j, const char *name, tok_decoder **out, char *err, size_t errlen);
void decoder_free(tok_decoder *d);
/* The text pieces of *cur are the tokens; their decoded text is appended to out. *next is
 * scratch. 0 ok, 1 out of memory. */
wp_result decoder_apply(const tok_decoder *d, tok_pieces **cur, tok_pieces **next, tok_buf *out);

#endif
