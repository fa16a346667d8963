/* WeiPipe-Interleave (paper figure 2): after the first forward, rank w runs in every turn one
 * forward of a new micro-batch with the forward stream's chunk and one fused backward of its
 * previous micro-batch with the backward stream's chunk (which carries that chunk's gradient).
 * Rank w: forward of micro-batch w in turns w .. w+N-1; then for j = 1 .. M/N-1, in turn
 * w+jN+i, F(i, w+jN) followed by BW(N-1-i, w+(j-1)N); then the last backward alone. Once every
 * rank interleaves there is no bubble whatever the F/B ratio, activations are balanced, and per
 * turn a rank receives two weight chunks and one gradient chunk (36h^2 values for a Llama layer)
 * for one F and one BW: the same traffic as Naive for twice the work. F comes first in a turn so
 * that the gradient from the previous rank arrives while it runs. */
#include <stdlib.h>

#include "ring_build.h"
#include "gen_common.h"

wp_result interleave_place(ring_plan *p, char *err, size_t errlen) {
    const int N = p->s->nranks, k = p->s->nmb / N;
    wp_result rc = WP_OK;
    for (int w = 0; w < N; w++)
        for (int j = 0; j <= k; j++)
            for (int i = 0; i < N; i++) {
                int t = w + j * N + i;
                if (j < k) rc |= ring_add(p, w, t, WP_OP_F, i, j * N + w, err, errlen);
                if (j > 0) rc |= ring_add(p, w, t, WP_OP_BW, N - 1 - i, (j - 1) * N + w, err, errlen);
            }
    return rc;
}

wp_result gen_interleave(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)opt;
    const int N = s->nranks;
    for (int c = 0; c < N; c++) s->owner[c] = (N - c) % N;
    s->split = false;
    ring_plan p;
    ring_plan_init(&p, s, WP_LANE_B, false);
    if (interleave_place(&p, err, errlen)) {
        free(p.ops);
        return 1;
    }
    return ring_build(&p, err, errlen);
}
