/* The BPE model of a tokenizer.json (tokjson.h), as the `tokenizers` library's models/bpe
 * applies it: the vocabulary (string <-> id), the merges by rank (either format: "a b"
 * strings or [a, b] pairs), a word's characters (or, after a ByteLevel pre-tokenizer, its
 * bytes through GPT-2's byte-to-character alphabet) merged lowest rank first, leftmost first
 * among equals, with byte_fallback (<0xNN>), unk_token / fuse_unk and ignore_merges
 * (Llama-3: a word that is in the vocabulary is its own token).
 *
 * Bounds: the vocabulary's ids must be exactly 0 .. entries-1, each once, as tokenizers builds
 * its reverse table from them; nothing is allocated by an id, only by entry counts, which the
 * file's size bounds. A wp_bpe is read-only after bpe_parse; the per-call state is a
 * bpe_scratch. */
#ifndef WP_IO_BPE_H
#define WP_IO_BPE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "result.h"

typedef struct wp_bpe wp_bpe;
typedef struct bpe_scratch bpe_scratch;

typedef struct {
    int32_t *v;
    size_t n, cap;
} tok_ids;
wp_result ids_push(tok_ids *ids, int32_t id); /* 0 ok, 1 out of memory */

/* model: the "model" object. 0; 2 not a BPE we encode, or ids out of bounds (err names `name`
 * and the field); 1 out of memory. */
wp_result bpe_parse(json_t *model, const char *name, wp_bpe **out, char *err, size_t errlen);
void bpe_free(wp_bpe *b);
size_t bpe_count(const wp_bpe *b); /* vocabulary entries (ids 0 .. count-1) */
int32_t bpe_id(const wp_bpe *b, const char *s, size_t n); /* -1: not in the vocabulary */
const char *bpe_token(const wp_bpe *b, int32_t id, size_t *len); /* id < count */

bpe_scratch *bpe_scratch_new(void);
void bpe_scratch_free(bpe_scratch *sc);
/* One word's ids appended to out; byte_level: w is raw bytes, each read as its byte-level
 * character. 0 ok, 1 out of memory. */
wp_result bpe_word(const wp_bpe *b, const char *w, size_t n, bool byte_level, bpe_scratch *sc, tok_ids *out);

/* GPT-2's bytes_to_unicode: the character (code point) byte b stands for. */
uint32_t byte_level_char(unsigned char b);

#endif
