/* WZB1, WeiPipe with the zero-bubble split (paper figure 3), turn by turn as the paper describes
 * it: the backward is an input-gradient pass B and a weight-gradient pass W, and rank w runs, for
 * its micro-batches mb_j = w + jN (j = 0 .. M/N-1):
 *   F(c, mb_0)                in turn w + c                 (the first forward, alone)
 *   F(c, mb_j), j >= 1        in turn w + 2Nj - N + c       (while mb_{j-1}'s backward runs)
 *   B(N-1-i, mb_j)            in turn w + N + 2Nj + 2i      (i = 0 .. N-1)
 *   W(N-1-i, mb_j)            in turn w + N + 2Nj + 2i + 1
 * So in the first N turns of a backward a rank alternates "one F + one B" and "one F + one W",
 * then alternates the remaining B- and W-passes alone; the next micro-batch's forward starts
 * when the last W-pass is done (for N = 4, rank 0: F(0..3, 0) in turns 0-3; F(0,4)+B(3,0),
 * F(1,4)+W(3,0), F(2,4)+B(2,0), F(3,4)+W(2,0) in turns 4-7; B(1,0), W(1,0), B(0,0), W(0,0) in
 * turns 8-11; F(0,8)+B(3,4) in turn 12). F comes first in a turn, so that the gradient a W-pass
 * adds to arrives from the previous rank while it runs.
 *
 * Streams (ring_plan.offset): the forward weights as usual (chunk c at rank t - c); the backward
 * weights two positions apart, chunk c at rank t + 2c + 2, so that rank w meets chunk N-1-i in
 * turn w + N + 2i; the gradient GW[c] one position behind W[c], at rank t + 2c + 1, so that it
 * reaches each rank the turn after that rank's B(c): the paper's pairing of W_{N-1} with gW_{N-1}.
 * For even N two backward chunks (c and c + N/2) share a position and two gradients another: a
 * position holds one chunk during the first half of a 2N-turn period and the other during the
 * second half. A rank works on at most two chunks per turn and holds the state of one B-pass
 * until the next turn's W-pass; its activation states peak at about 1.5 micro-batches (the rest
 * of mb_{j-1}'s chunks and all of mb_j's), the paper's 1.5 M·b·s·h against Interleave's M·b·s·h.
 * A micro-batch takes 2N turns per rank (Interleave: N), so each weight and gradient element is
 * used for N turns of every 2N and re-created at its owner (weights) or drained (gradients) in
 * between. Owners as for Interleave: owner[c] = (N - c) mod N. */
#include <stdlib.h>

#include "ring_build.h"
#include "gen_common.h"

wp_result gen_wzb1(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)opt;
    const int N = s->nranks, k = s->nmb / N;
    for (int c = 0; c < N; c++) s->owner[c] = (N - c) % N;
    s->split = true;
    ring_plan p;
    ring_plan_init(&p, s, WP_LANE_B, false);
    for (int c = 0; c < N; c++) {
        p.offset[WP_RING_WB][c] = 2 * c + 2;
        p.offset[WP_RING_GW][c] = 2 * c + 1;
    }
    wp_result rc = WP_OK;
    for (int w = 0; w < N; w++) {
        for (int c = 0; c < N; c++) rc |= ring_add(&p, w, w + c, WP_OP_F, c, w, err, errlen);
        for (int j = 0; j < k; j++) {
            int tb = w + N + 2 * N * j, mb = w + j * N;
            for (int i = 0; i < N && j + 1 < k; i++) rc |= ring_add(&p, w, tb + i, WP_OP_F, i, mb + N, err, errlen);
            for (int i = 0; i < N; i++) { /* after the forwards: a turn runs its ops in the order added */
                rc |= ring_add(&p, w, tb + 2 * i, WP_OP_B, N - 1 - i, mb, err, errlen);
                rc |= ring_add(&p, w, tb + 2 * i + 1, WP_OP_W, N - 1 - i, mb, err, errlen);
            }
        }
    }
    if (rc) {
        free(p.ops);
        return 1;
    }
    return ring_build(&p, err, errlen);
}
