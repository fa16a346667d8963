/* Sequence segments in the executor (units.h). */
#include "units.h"

#include "seq_split.h"

static int nseg(const wp_rt *rt) { return sched_nseg(rt->c.s); }
static int seg_of(const wp_rt *rt, int mb) { return mb % nseg(rt); }

wp_result rt_seg_init(wp_rt *rt, char *err, size_t errlen) {
    char why[256];
    const wp_layout *L = rt->c.L;
    if (seqsplit_bounds(L, nseg(rt), rt->seg_t, why, sizeof why) != 0) return rt_fail(rt, err, errlen, "%s", why);
    rt->pool.sched = rt->c.s;
    rt->pool.seg_t = rt->seg_t;
    return 0;
}

bool rt_seg_same_shape(const wp_rt *rt, int a, int b) { return seg_of(rt, a) == seg_of(rt, b); }

wp_acts *rt_seg_acts_create(wp_rt *rt, int chunk, int mb) {
    if (nseg(rt) == 1) return model_acts_create(rt->c.m, chunk);
    int j = seg_of(rt, mb);
    /* created unlinked: rt_seg_link sets the predecessor each time the state is taken */
    return model_acts_create_segment(rt->c.m, chunk, rt->seg_t[j], rt->seg_t[j + 1], NULL);
}

wp_result rt_seg_link(wp_rt *rt, wp_acts *a, int mb, wp_acts *prev, char *err, size_t errlen) {
    if (rt_seg_has_prev(rt, mb) && !prev)
        return rt_fail(rt, err, errlen, "F of unit %d: the state of the segment before it (unit %d) is not held here", mb,
                       mb - 1);
    if (model_acts_relink(rt->c.m, a, prev) != 0)
        return rt_fail(rt, err, errlen, "%s", kern_error(rt->k) ? kern_error(rt->k) : "segment link failed");
    return 0;
}

bool rt_seg_has_prev(const wp_rt *rt, int mb) { return seg_of(rt, mb) > 0; }

int rt_seg_sample(const wp_rt *rt, int mb) { return mb / nseg(rt); }

void rt_seg_upload(wp_rt *rt, int mb, int32_t *d_tok, int32_t *d_tgt) {
    const int b = rt->c.L->cfg.micro_batch, s = rt->c.L->cfg.seq, j = seg_of(rt, mb);
    const int t0 = nseg(rt) == 1 ? 0 : rt->seg_t[j], len = nseg(rt) == 1 ? s : rt->seg_t[j + 1] - t0;
    const size_t row = (size_t)len * sizeof(int32_t);
    for (int r = 0; r < b; r++) {
        kern_to_device(rt->k, d_tok + (size_t)r * len, rt->h_tok + (size_t)r * s + t0, row);
        kern_to_device(rt->k, d_tgt + (size_t)r * len, rt->h_tgt + (size_t)r * s + t0, row);
    }
}

double rt_seg_share(const wp_rt *rt, const wp_action *x) {
    if (nseg(rt) == 1 || !op_is_compute(x->op)) return 1;
    int j = seg_of(rt, x->mb);
    return seqsplit_cost_share(rt->c.L, x->chunk, x->op, rt->seg_t[j], rt->seg_t[j + 1], rt->c.L->cfg.seq);
}

int64_t rt_seg_tokens(const wp_rt *rt, int mb) {
    const int b = rt->c.L->cfg.micro_batch, s = rt->c.L->cfg.seq, j = seg_of(rt, mb);
    const int t0 = nseg(rt) == 1 ? 0 : rt->seg_t[j], t1 = nseg(rt) == 1 ? s : rt->seg_t[j + 1];
    if (!rt->c.data || !loader_masked(rt->c.data)) return (int64_t)b * (t1 - t0);
    int64_t n = 0; /* the segment's targets that carry a loss: h_tgt holds its sample (load_tokens) */
    for (int r = 0; r < b; r++)
        for (int t = t0; t < t1; t++) n += rt->h_tgt[(size_t)r * s + t] >= 0;
    return n;
}

double rt_seg_step_tokens(const wp_rt *rt) {
    if (rt->c.data && loader_masked(rt->c.data)) return (double)loader_step_targets(rt->c.data, rt->step);
    return (double)sched_samples(rt->c.s) * rt->c.L->cfg.micro_batch * rt->c.L->cfg.seq;
}
