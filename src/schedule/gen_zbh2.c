/* ZB-H2 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 2.2 and figure 3 bottom):
 * more warm-up forwards and deferred W passes turn the pipeline into a parallelogram with no
 * bubble inside it, at the cost of about twice 1F1B's activation memory. Rank r of N, chunk r:
 *   warm-up   min(2(N-r)-1 + e, M) forwards (e: extra before a slow hop, schedule.h)
 *   then      B F pairs until 2N-1 forwards have run (the W passes wait)
 *   steady    B W F while forwards remain
 *   cool-down B W while input gradients remain, then the deferred W passes.
 * Every rank runs 2N-1 forwards before its first W: peak min(2N-1, M) activation states on every
 * rank. With F = B = W each rank's work is one contiguous block of M(F+B+W) that starts when the
 * first activation reaches it, (N-1)F after rank 0. The paper then overlaps the next step's
 * warm-up with this step's tail by validating the optimizer step afterwards (its section 4); in
 * this IR a step ends with the global REDUCE (clipping and the inf/NaN skip need every gradient
 * first), so the fill of (N-1)F stays: bubble (N-1)F / (M(F+B+W) + (N-1)F), the least any
 * schedule with a step barrier can reach. */
#include "act_build.h"
#include "gen_common.h"

static void rank_order(act_plan *p, int r, int N, int M, int extra) {
    int nf = 0, nb = 0, nw = 0;
    int warm = 2 * (N - r) - 1 + extra < M ? 2 * (N - r) - 1 + extra : M;
    int before_w = 2 * N - 1 < M ? 2 * N - 1 : M;
    for (; nf < warm; nf++) act_add(p, r, WP_OP_F, r, nf);
    while (nf < before_w) {
        act_add(p, r, WP_OP_B, r, nb++);
        act_add(p, r, WP_OP_F, r, nf++);
    }
    while (nf < M) {
        act_add(p, r, WP_OP_B, r, nb++);
        act_add(p, r, WP_OP_W, r, nw++);
        act_add(p, r, WP_OP_F, r, nf++);
    }
    while (nb < M) {
        act_add(p, r, WP_OP_B, r, nb++);
        act_add(p, r, WP_OP_W, r, nw++);
    }
    while (nw < M) act_add(p, r, WP_OP_W, r, nw++);
}

wp_result gen_zbh2(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    act_plan p;
    act_plan_init(&p, s);
    s->split = true;
    for (int r = 0; r < s->nranks; r++)
        rank_order(&p, r, s->nranks, s->nmb, gen_warmup_extra(opt, s->strategy, s->nranks, r));
    return act_build(&p, err, errlen);
}
