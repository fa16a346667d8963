/* WZB1, WeiPipe with the zero-bubble split (paper figure 3): the backward is an input-gradient
 * pass B and a weight-gradient pass W. Rank w: forward of micro-batch w in turns w .. w+N-1;
 * then for each of its micro-batches a B lap (turn w+2Nj+N+i: F(i) of the next micro-batch,
 * then B(N-1-i)) followed by a W lap (turn w+2Nj+2N+i: W(N-1-i) alone). W(c) comes exactly N
 * turns after B(c), so the gradient GW[c] sits where the backward weights W[c] sat one lap
 * earlier: the backward weights travel paired with the gradients, and a rank works on at most
 * two chunks per turn (the forward's and the B's or W's) while three streams move. A W-pass
 * needs no weights, so the W lap moves no backward weights for that rank.
 * (The paper's figure alternates B and W every turn; with one stream position per turn that
 * order would need two backward chunks in one position, so this schedule groups them by lap.) */
#include <stdlib.h>

#include "ring_build.h"
#include "schedule.h"

int gen_wzb1(wp_schedule *s, char *err, size_t errlen) {
    const int N = s->nranks, k = s->nmb / N;
    for (int c = 0; c < N; c++) s->owner[c] = (N - c) % N;
    s->split = true;
    ring_plan p;
    ring_plan_init(&p, s, WP_LANE_B, false);
    int rc = 0;
    for (int w = 0; w < N; w++) {
        for (int c = 0; c < N; c++) rc |= ring_add(&p, w, w + c, WP_OP_F, c, w, err, errlen);
        for (int j = 0; j < k; j++)
            for (int i = 0; i < N; i++) {
                int tb = w + 2 * N * j + N + i, mb = j * N + w;
                if (j + 1 < k) rc |= ring_add(&p, w, tb, WP_OP_F, i, mb + N, err, errlen);
                rc |= ring_add(&p, w, tb, WP_OP_B, N - 1 - i, mb, err, errlen);
                rc |= ring_add(&p, w, tb + N, WP_OP_W, N - 1 - i, mb, err, errlen);
            }
    }
    if (rc) {
        free(p.ops);
        return 1;
    }
    return ring_build(&p, err, errlen);
}
