/* schedule_generate: the shape rules shared by all strategies, the strategy's own rule, then its
 * generator, all picked from the strategy's row (strategies.def). */
#include <assert.h>
#include <string.h>

#include "gen_common.h"

static const struct {
    gen_fn *gen;
    gen_check_fn *check;
} dispatch[] = {
#define ROW_(id, name, gen, check, chunks, traits, knobs) [WP_STRAT_##id] = {gen, check},
    WP_STRATEGIES(ROW_)
#undef ROW_
};
static_assert(sizeof dispatch / sizeof dispatch[0] == WP_STRAT_COUNT, "a generator for every wp_strategy");

/* C = vN; M is checked with the loop order (the strategy's own rule). */
static wp_result check_interleaved(wp_strategy s, int nranks, int nchunks, char *err, size_t errlen) {
    if (nchunks < nranks || nchunks % nranks != 0 || nchunks > WP_MAX_CHUNKS)
        return gen_bad(err, errlen, "--num-chunks: %s needs a multiple of --nranks %d (v chunks per rank, e.g. %d), "
                       "not %d", strategy_name(s), nranks, 2 * nranks, nchunks);
    return 0;
}

wp_result schedule_check_shape(wp_strategy s, int nranks, int nmb, int nchunks, char *err, size_t errlen) {
    const int max_ranks = WP_MAX_CHUNKS, max_mb = 1 << 16;
    if (s >= WP_STRAT_COUNT) return gen_bad(err, errlen, "--strategy: unknown strategy");
    if (nranks < 1 || nranks > max_ranks)
        return gen_bad(err, errlen, "--nranks: %d is not between 1 and %d", nranks, max_ranks);
    if (nmb < 1 || nmb > max_mb)
        return gen_bad(err, errlen, "--num-microbatches: %d is not between 1 and %d", nmb, max_mb);
    const wp_chunk_rule rule = strategy_chunk_rule(s);
    if (rule == WP_CHUNKS_V_PER_RANK) return check_interleaved(s, nranks, nchunks, err, errlen);
    /* WP_CHUNKS_NODE: C = G is the strategy's own rule (it knows G) */
    bool any_chunks = (rule == WP_CHUNKS_ANY || rule == WP_CHUNKS_NODE) && nchunks >= 1 && nchunks <= WP_MAX_CHUNKS;
    if (nchunks != nranks && !any_chunks)
        return gen_bad(err, errlen, "--num-chunks: %s needs one chunk per rank (%d), not %d", strategy_name(s), nranks,
                       nchunks);
    if (strategy_has(s, WP_TRAIT_ANY_M)) return 0;
    if (nmb % nranks != 0) {
        int lo = nmb / nranks * nranks;
        if (lo == 0) lo = nranks;
        return gen_bad(err, errlen, "--num-microbatches: %s needs a multiple of --nranks %d (e.g. %d or %d), not %d",
                       strategy_name(s), nranks, lo, lo + nranks, nmb);
    }
    return 0;
}

wp_result schedule_generate(wp_strategy s, int nranks, int nmb, int nchunks, const wp_gen_opts *opt, wp_schedule *out,
                      char *err, size_t errlen) {
    wp_gen_opts defaults = {0};
    if (!opt) opt = &defaults;
    wp_result rc = schedule_check_shape(s, nranks, nmb, nchunks, err, errlen);
    if (!rc) rc = dispatch[s].check(nranks, nmb, nchunks, opt, err, errlen);
    if (rc) return rc;
    WP_TRY(sched_init(out, s, nranks, nmb, nchunks, err, errlen));
    rc = dispatch[s].gen(out, opt, err, errlen);
    if (rc) sched_free(out);
    return rc;
}
