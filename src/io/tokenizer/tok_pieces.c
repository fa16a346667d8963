/* Piece lists of the tokenizer.json pipeline (tok_pieces.h). */
#include "tok_pieces.h"

#include <stdlib.h>
#include <string.h>

wp_result buf_reserve(tok_buf *b, size_t more) {
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more) cap *= 2;
    char *g = realloc(b->b, cap);
    if (!g) return 1;
    b->b = g;
    b->cap = cap;
    return 0;
}

wp_result buf_add(tok_buf *b, const void *s, size_t n) {
    if (buf_reserve(b, n)) return 1;
    if (n) memcpy(b->b + b->n, s, n);
    b->n += n;
    return 0;
}

void buf_free(tok_buf *b) {
    free(b->b);
    memset(b, 0, sizeof *b);
}

static wp_result pieces_grow(tok_pieces *P) {
    if (P->n < P->cap) return 0;
    size_t cap = P->cap ? 2 * P->cap : 64;
    tok_piece *g = realloc(P->p, cap * sizeof *g);
    if (!g) return 1;
    P->p = g;
    P->cap = cap;
    return 0;
}

wp_result pieces_text(tok_pieces *P, const char *s, size_t n, bool origin) {
    if (n == 0) return 0;
    if (pieces_grow(P)) return 1;
    size_t off = P->text.n;
    if (buf_add(&P->text, s, n)) return 1;
    P->p[P->n++] = (tok_piece){off, n, -1, origin};
    return 0;
}

wp_result pieces_added(tok_pieces *P, int32_t id) {
    if (pieces_grow(P)) return 1;
    P->p[P->n++] = (tok_piece){P->text.n, 0, id, false};
    return 0;
}

void pieces_clear(tok_pieces *P) {
    P->n = 0;
    P->text.n = 0;
}

void pieces_free(tok_pieces *P) {
    buf_free(&P->text);
    free(P->p);
    memset(P, 0, sizeof *P);
}
