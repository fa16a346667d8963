/* The text of one encode call as it goes through the tokenizer.json pipeline (tokjson.h): a
 * list of pieces, each either text still to be split and encoded or an added token already
 * found (id >= 0). Pieces hold offsets into one growing byte buffer, so a pipeline stage reads
 * one list and writes the next without an allocation per piece. Empty text pieces are never
 * stored (the tokenizers library drops them at every split). */
#ifndef WP_IO_TOK_PIECES_H
#define WP_IO_TOK_PIECES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "result.h"

typedef struct {
    char *b;
    size_t n, cap;
} tok_buf;

typedef struct {
    size_t off, len;
    int32_t id;  /* >= 0: an added token's id (no text); -1: text */
    bool origin; /* the text starts at the input's first byte (Metaspace's prepend_scheme "first") */
} tok_piece;

typedef struct {
    tok_buf text;
    tok_piece *p;
    size_t n, cap;
} tok_pieces;

/* 0 ok, 1 out of memory */
wp_result buf_reserve(tok_buf *b, size_t more);
wp_result buf_add(tok_buf *b, const void *s, size_t n);
void buf_free(tok_buf *b);

/* Appends text (copied; nothing when n is 0) or an added token. 0 ok, 1 out of memory. */
wp_result pieces_text(tok_pieces *P, const char *s, size_t n, bool origin);
wp_result pieces_added(tok_pieces *P, int32_t id);
/* Text piece i's bytes. */
static inline const char *piece_str(const tok_pieces *P, size_t i) { return P->text.b + P->p[i].off; }
void pieces_clear(tok_pieces *P);
void pieces_free(tok_pieces *P);

#endif
