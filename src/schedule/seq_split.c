/* Sequence segments: the computation-wise split and what a segment costs (seq_split.h). */
#include "seq_split.h"

#include <stdio.h>

/* Query-key pairs of a causal sequence's first t tokens: query i scores i+1 keys. */
static double pairs(double t) { return t * (t + 1) / 2; }

/* Chunk c's cost of op for a whole sequence, split into the part linear in the tokens (matrix
 * products) and attention's part (linear in the query-key pairs); layout_chunk_flops' counts,
 * with B redoing the forward under --recompute as the simulator charges it. */
static void op_parts(const wp_layout *L, int c, int op, double *lin, double *att) {
    wp_flops f = layout_chunk_flops(L, c);
    double lin_f = f.bwd_weight, att_f = f.fwd - f.bwd_weight; /* the forward's products equal the W-pass's */
    double lin_b = f.bwd_weight, att_b = f.bwd_input - f.bwd_weight;
    if (L->cfg.recompute) {
        lin_b += lin_f;
        att_b += att_f;
    }
    *lin = 0;
    *att = 0;
    if (op == WP_OP_F) {
        *lin = lin_f;
        *att = att_f;
    }
    if (op == WP_OP_B || op == WP_OP_BW) {
        *lin += lin_b;
        *att += att_b;
    }
    if (op == WP_OP_W || op == WP_OP_BW) *lin += f.bwd_weight;
}

double seqsplit_cost_share(const wp_layout *L, int chunk, int op, int t0, int t1, int seq) {
    if (seq <= 0) return 0;
    if (!L) return (double)(t1 - t0) / seq;
    double lin, att;
    op_parts(L, chunk, op, &lin, &att);
    if (lin + att <= 0) return (double)(t1 - t0) / seq;
    return (lin * (t1 - t0) / seq + att * (pairs(t1) - pairs(t0)) / pairs(seq)) / (lin + att);
}

/* F + B + W of every chunk for the first t tokens of each sequence. */
static double prefix_cost(const wp_layout *L, double lin, double att, int t) {
    double s = L->cfg.seq;
    return lin * t / s + att * pairs(t) / pairs(s);
}

wp_result seqsplit_bounds(const wp_layout *L, int k, int *bounds, char *err, size_t errlen) {
    if (k < 1 || k > WP_MAX_SEGMENTS) { return wp_fail(WP_BAD_INPUT, err, errlen, "--seq-segments: %d is not between 1 and %d", k, WP_MAX_SEGMENTS); }
    bounds[0] = 0;
    if (!L) {
        for (int j = 1; j <= k; j++) bounds[j] = j;
        return 0;
    }
    const int s = L->cfg.seq;
    if (s < k) { return wp_fail(WP_BAD_INPUT, err, errlen, "--seq-segments: %d segments need at least as many tokens per sequence, not %d", k, s); }
    double lin = 0, att = 0;
    for (int c = 0; c < L->cfg.n_chunks; c++)
        for (int op = WP_OP_F; op <= WP_OP_W; op++) {
            double l, a;
            op_parts(L, c, op, &l, &a);
            lin += l;
            att += a;
        }
    const double total = prefix_cost(L, lin, att, s);
    int t = 0;
    for (int j = 1; j < k; j++) {
        double target = total * j / k;
        int lo = bounds[j - 1] + 1, hi = s - (k - j); /* at least one token per segment */
        t = lo;
        while (t < hi && prefix_cost(L, lin, att, t) < target) t++;
        /* the nearer of t-1 and t to the target, if t-1 still leaves a token for this segment */
        if (t > lo && target - prefix_cost(L, lin, att, t - 1) < prefix_cost(L, lin, att, t) - target) t--;
        bounds[j] = t;
    }
    bounds[k] = s;
    return 0;
}

size_t sched_buf_bytes(const wp_schedule *s, const int *bounds, const wp_layout *L, wp_buf b) {
    size_t whole = buf_bytes_n(L, s->nslices, b); /* a T piece's size depends on the slicing */
    if (s->nseg <= 1 || (b.kind != WP_BUF_A && b.kind != WP_BUF_GA) || b.idx < 0) return whole;
    int j = b.idx % s->nseg, seq = L->cfg.seq;
    return whole / (size_t)seq * (size_t)(bounds[j + 1] - bounds[j]);
}
