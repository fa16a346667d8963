/* Interleaved 1F1B (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
 * Clusters Using Megatron-LM", section 2.2.2): C = vN chunks, rank r holds the v looped stages
 * r, r+N, ..., r+(v-1)N, so a micro-batch laps the ring v times. Each rank walks its v local
 * chunks in groups of g micro-batches: its k-th forward is local chunk (k/g) mod v on micro-batch
 * (k/(gv))g + k mod g, its k-th backward the same with the local chunks in reverse order.
 *   depth-first (Megatron's default): g = N, so M must be a multiple of N; the bubble shrinks to
 *     (N-1)/(vM + N-1) of the step with uniform chunks (Megatron's (1/v)(N-1)/M of the ideal time)
 *     at v times 1F1B's activation traffic.
 *   breadth-first (Lamy-Poirier 2022, "Breadth-First Pipeline Parallelism"): g = M, every
 *     micro-batch passes a local chunk before the next chunk starts, so any M works and each
 *     chunk's gradient is complete early (what that paper overlaps with data-parallel reduction);
 *     the price is about (v-1)M + 2(N-r-1) + 1 activation states on rank r.
 * Warm-up: 2(N-r-1) + (v-1)g forwards (Megatron's count: the first backward of rank r can start
 * only after micro-batch 0 went up to the last chunk and its gradient came back), capped at vM;
 * then one forward and one fused backward alternate; then the remaining backwards. With v = 1
 * both orders are plain 1F1B (N-r-1 warm-up forwards). Transfers: act_build.h (the output of
 * rank N-1's chunks wraps to rank 0). */
#include "act_build.h"
#include "gen_common.h"

typedef struct {
    int N, v, g, r;
} loop;

static int forward_chunk(const loop *l, int k, int *mb) {
    *mb = k / (l->g * l->v) * l->g + k % l->g;
    return (k / l->g) % l->v * l->N + l->r;
}

static int backward_chunk(const loop *l, int k, int *mb) {
    *mb = k / (l->g * l->v) * l->g + k % l->g;
    return (l->v - 1 - (k / l->g) % l->v) * l->N + l->r;
}

static void rank_order(act_plan *p, const loop *l, int M) {
    const int total = l->v * M;
    int warm = l->v == 1 ? l->N - l->r - 1 : 2 * (l->N - l->r - 1) + (l->v - 1) * l->g;
    if (warm > total) warm = total;
    int mb, c;
    for (int k = 0; k < warm; k++) {
        c = forward_chunk(l, k, &mb);
        act_add(p, l->r, WP_OP_F, c, mb);
    }
    for (int k = 0; k < total - warm; k++) {
        c = forward_chunk(l, warm + k, &mb);
        act_add(p, l->r, WP_OP_F, c, mb);
        c = backward_chunk(l, k, &mb);
        act_add(p, l->r, WP_OP_BW, c, mb);
    }
    for (int k = total - warm; k < total; k++) {
        c = backward_chunk(l, k, &mb);
        act_add(p, l->r, WP_OP_BW, c, mb);
    }
}

wp_result gen_i1f1b(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    act_plan p;
    act_plan_init(&p, s);
    s->split = false;
    for (int r = 0; r < s->nranks; r++) {
        loop l = {.N = s->nranks, .v = s->nchunks / s->nranks, .r = r};
        l.g = opt->i1f1b_breadth_first ? s->nmb : s->nranks;
        rank_order(&p, &l, s->nmb);
    }
    return act_build(&p, err, errlen);
}

/* C = vN is the shared shape check's (WP_CHUNKS_V_PER_RANK); here M: depth-first interleaving
 * walks the chunks in groups of N micro-batches (Megatron's rule), breadth-first takes any M. */
wp_result gen_check_i1f1b(int nranks, int nmb, int nchunks, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)nchunks;
    if (opt->i1f1b_breadth_first || nmb % nranks == 0) return 0;
    int lo = nmb / nranks * nranks;
    if (lo == 0) lo = nranks;
    return gen_bad(err, errlen, "--num-microbatches: interleaved-1f1b depth-first needs a multiple of --nranks %d (e.g. "
                   "%d or %d), not %d; --i1f1b-order breadth-first takes any", nranks, lo, lo + nranks, nmb);
}
