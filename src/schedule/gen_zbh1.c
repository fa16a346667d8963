/* ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 2.1 and figure 3 top): the
 * backward split into B (input gradient, on the critical path) and W (weight gradient, which
 * nobody waits for). Rank r of N, M micro-batches, chunk r on rank r:
 *   warm-up   min(N-r-1 + e, M) forwards (1F1B's; e: extra before a slow hop, schedule.h)
 *   then      F B pairs, r of them (W deferred: the downstream ranks are still warming up)
 *   steady    F B W while forwards remain
 *   cool-down B W while input gradients remain, then the deferred W passes.
 * At most N forwards run before the first W on any rank, so the activation states held never
 * exceed 1F1B's peak (N on rank 0); the deferred W passes fill the cool-down bubble, which
 * shrinks from (N-1)(F+B+W) to (N-1)(F+B-W) (the paper's figure 3; exact with F = B = W and free
 * links). This is the order of the authors' exact-semantics ZB-H1 schedule. */
#include "act_build.h"
#include "gen_common.h"

static void rank_order(act_plan *p, int r, int N, int M, int extra) {
    int nf = 0, nb = 0, nw = 0;
    int warm = N - r - 1 + extra < M ? N - r - 1 + extra : M;
    for (; nf < warm; nf++) act_add(p, r, WP_OP_F, r, nf);
    for (int k = 0; k < r && nf < M; k++) {
        act_add(p, r, WP_OP_F, r, nf++);
        act_add(p, r, WP_OP_B, r, nb++);
    }
    while (nf < M) {
        act_add(p, r, WP_OP_F, r, nf++);
        act_add(p, r, WP_OP_B, r, nb++);
        act_add(p, r, WP_OP_W, r, nw++);
    }
    while (nb < M) {
        act_add(p, r, WP_OP_B, r, nb++);
        act_add(p, r, WP_OP_W, r, nw++);
    }
    while (nw < M) act_add(p, r, WP_OP_W, r, nw++);
}

wp_result gen_zbh1(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    act_plan p;
    act_plan_init(&p, s);
    s->split = true;
    for (int r = 0; r < s->nranks; r++)
        rank_order(&p, r, s->nranks, s->nmb, gen_warmup_extra(opt, s->strategy, s->nranks, r));
    return act_build(&p, err, errlen);
}
