/* WZB2 (paper figure 4): each rank runs, one op per turn, the forwards of chunks 0..N-1, then the
 * B passes of N-1..0, then the W passes of 0..N-1 (forward order), micro-batch after micro-batch:
 * rank w, micro-batch w+jN, turns w+3Nj + (0..N-1 | N..2N-1 | 2N..3N-1). The gradients share the
 * forward stream's positions, so GW[c] collects the W-passes of ranks 0..N-1 in consecutive turns
 * and is complete at rank N-1 right after its last W-pass; weights of this step are dropped after
 * the B lap. The updated forward weights are staged at their owner after UPDATE and carried into
 * the next step, which starts by sending them (the paper's hand-off from the last rank).
 * Owners: spread as for Interleave ((N-c) mod N: the gradients detour at most two hops), or every
 * chunk on rank N-1 (wzb2_owner_last: no detour, but that rank keeps 16 bytes of optimizer state
 * for every parameter of the model). Either way the global REDUCE must see every chunk's gradient
 * before the first UPDATE, which holds the next step's first forward back by about N-1 turns. */
#include <stdlib.h>

#include "ring_build.h"
#include "gen_common.h"

wp_result gen_wzb2(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    const int N = s->nranks, k = s->nmb / N;
    for (int c = 0; c < N; c++) s->owner[c] = opt->wzb2_owner_last ? N - 1 : (N - c) % N;
    s->split = true;
    ring_plan p;
    ring_plan_init(&p, s, WP_LANE_F, true);
    wp_result rc = WP_OK;
    for (int w = 0; w < N; w++)
        for (int j = 0; j < k; j++) {
            int t0 = w + 3 * N * j, mb = j * N + w;
            for (int i = 0; i < N; i++) {
                rc |= ring_add(&p, w, t0 + i, WP_OP_F, i, mb, err, errlen);
                rc |= ring_add(&p, w, t0 + N + i, WP_OP_B, N - 1 - i, mb, err, errlen);
                rc |= ring_add(&p, w, t0 + 2 * N + i, WP_OP_W, i, mb, err, errlen);
            }
        }
    if (rc) {
        free(p.ops);
        return 1;
    }
    return ring_build(&p, err, errlen);
}
