/* GPipe (Huang et al. 2019): all forwards, then all backwards. Rank r holds and owns chunk r;
 * it runs F(r, 0..M-1), then BW(r, 0..M-1) in the same micro-batch order, so the activation
 * gradients come back in the order the activations left (one FIFO per direction). Every rank
 * keeps the activation state of all M micro-batches until their backward: peak M states per
 * rank, against at most N in 1F1B. With uniform stages the step lasts (M+N-1)(F+B) for any F/B
 * ratio, a bubble of (N-1)/(M+N-1) as in 1F1B. Transfers, loads and frees: act_build.h. */
#include "act_build.h"
#include "gen_common.h"

wp_result gen_gpipe(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)opt;
    act_plan p;
    act_plan_init(&p, s);
    s->split = false;
    for (int r = 0; r < s->nranks; r++) {
        for (int mb = 0; mb < s->nmb; mb++) act_add(&p, r, WP_OP_F, r, mb);
        for (int mb = 0; mb < s->nmb; mb++) act_add(&p, r, WP_OP_BW, r, mb);
    }
    return act_build(&p, err, errlen);
}
