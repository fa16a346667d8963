/* WeiPipe-Naive (paper figure 1): every rank keeps its own micro-batch's activations for all
 * layers. Rank w runs micro-batches w, w+N, ... (M/N of them) one after the other: the forward
 * of chunks 0..N-1 in turns w+2Nj .. w+2Nj+N-1, then the fused backward of chunks N-1..0 in the
 * next N turns. The forward weights circulate on one stream, the backward weights on the other,
 * and the gradients travel with the backward weights; a rank uses one of the two weight streams
 * per turn (the redundancy the paper names) and does one F or one BW, so ranks still in their
 * forward wait for ranks in their (twice as long) backward. */
#include <stdlib.h>

#include "ring_build.h"
#include "gen_common.h"

wp_result gen_naive(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)opt;
    const int N = s->nranks, k = s->nmb / N;
    for (int c = 0; c < N; c++) s->owner[c] = (N - c) % N;
    s->split = false;
    ring_plan p;
    ring_plan_init(&p, s, WP_LANE_B, false);
    wp_result rc = WP_OK;
    for (int w = 0; w < N; w++)
        for (int j = 0; j < k; j++) {
            int mb = j * N + w, t0 = w + 2 * N * j;
            for (int c = 0; c < N; c++) rc |= ring_add(&p, w, t0 + c, WP_OP_F, c, mb, err, errlen);
            for (int i = 0; i < N; i++) rc |= ring_add(&p, w, t0 + N + i, WP_OP_BW, N - 1 - i, mb, err, errlen);
        }
    if (rc) {
        free(p.ops);
        return 1;
    }
    return ring_build(&p, err, errlen);
}
