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

/* Strategies that pass activations and run every micro-batch on every rank: any M. */
static bool activation_passing(wp_strategy s) {
    return s == WP_STRAT_1F1B || s == WP_STRAT_GPIPE || s == WP_STRAT_ZBH1 || s == WP_STRAT_ZBH2 || s == WP_STRAT_SEQ1F1B;
}

/* C = vN; M is checked with the loop order (check_order). */
static int check_interleaved(int nranks, int nchunks, char *err, size_t errlen) {
    if (nchunks < nranks || nchunks % nranks != 0 || nchunks > WP_MAX_CHUNKS)
        return bad(err, errlen, "--num-chunks: interleaved-1f1b needs a multiple of --nranks %d (v chunks per rank, e.g. "
                   "%d), not %d", nranks, 2 * nranks, nchunks);
    return 0;
}

/* Depth-first interleaving walks the chunks in groups of N micro-batches (Megatron's rule). */
static int check_order(wp_strategy s, int nranks, int nmb, const wp_gen_opts *opt, char *err, size_t errlen) {
    if (s != WP_STRAT_I1F1B || opt->i1f1b_breadth_first || nmb % nranks == 0) return 0;
    int lo = nmb / nranks * nranks;
    if (lo == 0) lo = nranks;
    return bad(err, errlen, "--num-microbatches: interleaved-1f1b depth-first needs a multiple of --nranks %d (e.g. %d or "
               "%d), not %d; --i1f1b-order breadth-first takes any", nranks, lo, lo + nranks, nmb);
}

int gen_warmup_extra(const wp_gen_opts *opt, wp_strategy s, int nranks, int r) {
    /* interleaved-1f1b: checked and left out. Its warm-up already spans (v-1)N + 2(N-r-1)
     * forwards and its micro-batches cross the slow hop 2v-1 times; more warm-up only delays the
     * first backward (headline, b = 1: 30071 -> 29994 tokens/s at 1, 26019 at 2; depth-first
     * groups cannot take 3). gpipe runs every forward first anyway. */
    if (s != WP_STRAT_1F1B && s != WP_STRAT_ZBH1 && s != WP_STRAT_ZBH2 && s != WP_STRAT_SEQ1F1B) return 0;
    /* auto's extra forward is for 1F1B's round trip over the slow hop. The zero-bubble schedules
     * fill that wait with W-passes, and for them no rule won everywhere (simulated, tokens/s,
     * the paper's shape at 312 TFLOP/s with M = 16N, and configs/hier-goal-4x8-h2048.ini; none /
     * one per slow hop downstream, the 1f1b rule): zb-h1 at 4 x 8 60621 / 39187, 4 x 4 40339 /
     * 45140, 2 x 8 50995 / 54691, the goal case 128937 / 93644 (none is 0.96 of the best on
     * average, the 1f1b rule 0.84); zb-h2 40437 / 41287, 38336 / 45389, 54610 / 54610, 87306 /
     * 79569 (0.86 and 0.88). So auto gives them none; an explicit count applies, and simulate
     * --strategy auto tries 0-2. (1f1b at 4 x 8: 49181 -> 65607; seq1f1b 49623 -> 69079.) */
    if (opt->warmup_auto && (s == WP_STRAT_ZBH1 || s == WP_STRAT_ZBH2)) return 0;
    const int per = opt->ranks_per_node;
    if (opt->warmup_extra <= 0 || per <= 0 || per >= nranks) return 0;
    int hops = 0; /* slow hops downstream of rank r: after rank q = per-1, 2per-1, ... */
    for (int q = r; q < nranks; q++)
        if ((q + 1) % per == 0 && q < nranks - 1) hops++;
    return hops * opt->warmup_extra;
}

int strategy_default_chunks(wp_strategy s, int nranks, int ranks_per_node) {
    if (s == WP_STRAT_HIER) return ranks_per_node > 0 && ranks_per_node < nranks ? ranks_per_node : nranks;
    return s == WP_STRAT_I1F1B ? 2 * nranks : nranks;
}

/* weipipe-hier: K nodes of G ranks, a node's ring over G chunks (gen_hier.c); tawpipe: K nodes
 * of G ranks (gen_tawpipe.c). */
static int check_hier(wp_strategy s, int nranks, int nchunks, const wp_gen_opts *opt, char *err, size_t errlen) {
    if (s != WP_STRAT_HIER && s != WP_STRAT_TAWPIPE) return 0;
    int G = opt->ranks_per_node > 0 ? opt->ranks_per_node : nranks;
    if (G > nranks || nranks % G != 0)
        return bad(err, errlen, "--ranks-per-node: %s needs a divisor of --nranks %d, not %d", strategy_name(s), nranks, G);
    if (s == WP_STRAT_TAWPIPE) return 0; /* C = N: the shape check's rule */
    if (nchunks != G)
        return bad(err, errlen, "--num-chunks: weipipe-hier needs one chunk per rank of a node (%d), not %d", G, nchunks);
    return 0;
}

int schedule_check_shape(wp_strategy s, int nranks, int nmb, int nchunks, char *err, size_t errlen) {
    const int max_ranks = WP_MAX_CHUNKS, max_mb = 1 << 16;
    if (s >= WP_STRAT_COUNT) return bad(err, errlen, "--strategy: unknown strategy");
    if (nranks < 1 || nranks > max_ranks)
        return bad(err, errlen, "--nranks: %d is not between 1 and %d", nranks, max_ranks);
    if (nmb < 1 || nmb > max_mb)
        return bad(err, errlen, "--num-microbatches: %d is not between 1 and %d", nmb, max_mb);
    if (s == WP_STRAT_I1F1B) return check_interleaved(nranks, nchunks, err, errlen);
    bool any_chunks = (s == WP_STRAT_FSDP || s == WP_STRAT_HIER) && nchunks >= 1 && nchunks <= WP_MAX_CHUNKS; /* fsdp:
                         a chunk = a gather unit; weipipe-hier: checked with --ranks-per-node (check_hier) */
    if (nchunks != nranks && !any_chunks)
        return bad(err, errlen, "--num-chunks: %s needs one chunk per rank (%d), not %d", strategy_name(s), nranks,
                   nchunks);
    if (activation_passing(s)) return 0;
    if (nmb % nranks != 0) {
        int lo = nmb / nranks * nranks;
        if (lo == 0) lo = nranks;
        return bad(err, errlen, "--num-microbatches: %s needs a multiple of --nranks %d (e.g. %d or %d), not %d",
                   strategy_name(s), nranks, lo, lo + nranks, nmb);
    }
    return 0;
}

int schedule_generate(wp_strategy s, int nranks, int nmb, int nchunks, const wp_gen_opts *opt, wp_schedule *out,
                      char *err, size_t errlen) {
    wp_gen_opts defaults = {0};
    if (!opt) opt = &defaults;
    int rc = schedule_check_shape(s, nranks, nmb, nchunks, err, errlen);
    if (!rc) rc = check_order(s, nranks, nmb, opt, err, errlen);
    if (!rc) rc = check_hier(s, nranks, nchunks, opt, err, errlen);
    /* 1f1b receives one item ahead and frees a sent buffer after its next compute: a rank more
     * than 4 warm-up forwards ahead of the next one waits for it in a circle (found by
     * generating every N in {4,8,16}, ranks per node, M in {N,2N,4N}: 3 always runs, 4 never) */
    if (!rc && s == WP_STRAT_1F1B && gen_warmup_extra(opt, s, nranks, 0) > 0 && opt->warmup_extra > WP_1F1B_MAX_WARMUP_EXTRA)
        rc = bad(err, errlen, "--warmup-extra: 1f1b takes at most %d extra warm-up forwards per slow hop, not %d",
                 WP_1F1B_MAX_WARMUP_EXTRA, opt->warmup_extra);
    if (rc) return rc;
    rc = sched_init(out, s, nranks, nmb, nchunks, err, errlen);
    if (rc) return rc;
    switch (s) {
    case WP_STRAT_1F1B: rc = gen_1f1b(out, opt, err, errlen); break;
    case WP_STRAT_NAIVE: rc = gen_naive(out, err, errlen); break;
    case WP_STRAT_INTERLEAVE: rc = gen_interleave(out, err, errlen); break;
    case WP_STRAT_WZB1: rc = gen_wzb1(out, err, errlen); break;
    case WP_STRAT_WZB2: rc = gen_wzb2(out, opt, err, errlen); break;
    case WP_STRAT_GPIPE: rc = gen_gpipe(out, err, errlen); break;
    case WP_STRAT_I1F1B: rc = gen_i1f1b(out, opt, err, errlen); break;
    case WP_STRAT_ZBH1: rc = gen_zbh1(out, opt, err, errlen); break;
    case WP_STRAT_ZBH2: rc = gen_zbh2(out, opt, err, errlen); break;
    case WP_STRAT_FSDP: rc = gen_fsdp(out, err, errlen); break;
    case WP_STRAT_SEQ1F1B: rc = gen_seq1f1b(out, opt, err, errlen); break;
    case WP_STRAT_HIER: rc = gen_hier(out, opt, err, errlen); break;
    case WP_STRAT_TAWPIPE: rc = gen_tawpipe(out, opt, err, errlen); break;
    default: rc = bad(err, errlen, "--strategy: unknown strategy"); break;
    }
    if (rc) sched_free(out);
    return rc;
}
