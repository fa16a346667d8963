/* schedule_generate: the shape rules shared by all strategies, then the strategy's generator. */
#include <stdarg.h>
#include <string.h>

#include "schedule.h"

static int bad(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 2;
}

int schedule_check_shape(wp_strategy s, int nranks, int nmb, int nchunks, char *err, size_t errlen) {
    const int max_ranks = WP_MAX_CHUNKS, max_mb = 1 << 16;
    if (s >= WP_STRAT_COUNT) return bad(err, errlen, "--strategy: unknown strategy");
    if (nranks < 1 || nranks > max_ranks)
        return bad(err, errlen, "--nranks: %d is not between 1 and %d", nranks, max_ranks);
    if (nmb < 1 || nmb > max_mb)
        return bad(err, errlen, "--num-microbatches: %d is not between 1 and %d", nmb, max_mb);
    if (nchunks != nranks)
        return bad(err, errlen, "--num-chunks: %s needs one chunk per rank (%d), not %d", strategy_name(s), nranks,
                   nchunks);
    if (s != WP_STRAT_1F1B && nmb % nranks != 0) {
        int lo = nmb / nranks * nranks;
        if (lo == 0) lo = nranks;
        return bad(err, errlen, "--num-microbatches: %s needs a multiple of --nranks %d (e.g. %d or %d), not %d",
                   strategy_name(s), nranks, lo, lo + nranks, nmb);
    }
    return 0;
}

int schedule_generate(wp_strategy s, int nranks, int nmb, int nchunks, const wp_gen_opts *opt, wp_schedule *out,
                      char *err, size_t errlen) {
    int rc = schedule_check_shape(s, nranks, nmb, nchunks, err, errlen);
    if (rc) return rc;
    if (sched_init(out, s, nranks, nmb, nchunks) != 0) {
        snprintf(err, errlen, "schedule: out of memory");
        return 1;
    }
    wp_gen_opts defaults = {0};
    if (!opt) opt = &defaults;
    switch (s) {
    case WP_STRAT_1F1B: rc = gen_1f1b(out, err, errlen); break;
    case WP_STRAT_NAIVE: rc = gen_naive(out, err, errlen); break;
    case WP_STRAT_INTERLEAVE: rc = gen_interleave(out, err, errlen); break;
    case WP_STRAT_WZB1: rc = gen_wzb1(out, err, errlen); break;
    case WP_STRAT_WZB2: rc = gen_wzb2(out, opt, err, errlen); break;
    default: rc = bad(err, errlen, "--strategy: unknown strategy"); break;
    }
    if (rc) sched_free(out);
    return rc;
}
