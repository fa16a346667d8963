/* Attention's work under document masks, as the FLOP counts charge it (layout_chunk_flops):
 * the query-key pairs it scores. Causal attention over s tokens scores s(s+1)/2 pairs; with
 * document masks each document of len tokens scores len(len+1)/2 and nothing across documents.
 * These are the pairs the model computes, the count MFU is measured by; the kernels compute
 * whole tiles, and a tile a document boundary cuts is computed in full and masked per element
 * (docs/model.md, "Document masks"). */
#include "layout.h"

double attn_pairs_causal(int s) { return (double)s * ((double)s + 1.0) / 2.0; }

double attn_pairs_docs(const int32_t *tok, int s, int32_t boundary) {
    double pairs = 0;
    int start = 0; /* a document starts at the sequence's start and at every boundary token */
    for (int t = 1; t <= s; t++)
        if (t == s || tok[t] == boundary) {
            pairs += attn_pairs_causal(t - start);
            start = t;
        }
    return pairs;
}

double attn_pairs_equal_docs(int s, int len) {
    if (len <= 0 || len >= s) return attn_pairs_causal(s);
    int whole = s / len, rest = s % len;
    return whole * attn_pairs_causal(len) + attn_pairs_causal(rest);
}
