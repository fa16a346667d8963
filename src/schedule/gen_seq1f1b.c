/* Seq1F1B (Sun et al., "Seq1F1B: Efficient Sequence-Level Pipeline Parallelism for Large
 * Language Model Training"): 1F1B over sequence segments. Every micro-batch is cut along the
 * sequence into k segments (--seq-segments, default 2) by the computation-wise split
 * (seq_split.h), and the pipeline runs units u = sample*k + j (ir.h: nseg) as 1F1B runs
 * micro-batches, with the paper's partially ordered queue:
 *   forwards  first in, first out: sample 0 segments 0..k-1, then sample 1, ...;
 *   backwards first in, first out across samples, last in, first out across the segments of one
 *             sample (segment k-1 first), because a segment's backward produces the dK/dV of the
 *             earlier segments' keys and values, which their own backward then includes.
 * Rank r holds and owns chunk r (weights never move); it runs N-r-1 + k-1 warm-up forwards (+ e
 * before a slow hop, schedule.h), one
 * more than the next rank, so that the last rank starts the backward of a sample as soon as all
 * k of its segments went through (k forwards), then one forward and one fused backward in turn,
 * then the remaining backwards. A unit is 1/k of a micro-batch, so the warm-up and cool-down
 * ramps last about (N-1) segment times instead of (N-1) micro-batch times: with uniform stages
 * and equal segment costs the bubble is (N-1)/(N-1 + k*M) of the step instead of 1F1B's
 * (N-1)/(N-1 + M), and every rank keeps at most N-r-1 + k segment states, i.e. about
 * (N-r-1)/k + 1 micro-batches' activations against 1F1B's N-r. Transfers, loads and frees come
 * from the activation-passing builder (act_build.h). */
#include <stdio.h>
#include <stdlib.h>

#include "act_build.h"
#include "gen_common.h"
#include "seq_split.h"

/* The backward order: samples in order, the segments of each from last to first. */
static int backward_unit(int i, int k) { return i / k * k + (k - 1 - i % k); }

static void plan_rank(act_plan *p, int r, int k, int extra) {
    const wp_schedule *s = p->s;
    const int U = s->nmb, want = s->nranks - r - 1 + k - 1 + extra;
    const int warm = want < U ? want : U;
    int nf = 0, nb = 0;
    for (int i = 0; i < 2 * U; i++) {
        bool forward = i < warm || (i < 2 * U - warm && (i - warm) % 2 == 0);
        if (forward) act_add(p, r, WP_OP_F, r, nf++);
        else act_add(p, r, WP_OP_BW, r, backward_unit(nb++, k));
    }
}

wp_result gen_seq1f1b(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    const int k = opt->seq_segments ? opt->seq_segments : WP_SEQ1F1B_DEFAULT_SEGMENTS;
    if (k < 1 || k > WP_MAX_SEGMENTS) { return wp_fail(WP_BAD_INPUT, err, errlen, "--seq-segments: %d is not between 1 and %d", k, WP_MAX_SEGMENTS); }
    s->nseg = k;
    s->nmb *= k; /* the lists name units (ir.h) */
    s->split = false;
    act_plan p;
    act_plan_init(&p, s);
    for (int r = 0; r < s->nranks; r++) plan_rank(&p, r, k, gen_warmup_extra(opt, s->strategy, s->nranks, r));
    return act_build(&p, err, errlen);
}
