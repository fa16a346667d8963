/* Helpers the generators share (gen_common.h), and the extra warm-up rule (schedule.h). */
#include "gen_common.h"

#include <stdarg.h>
#include <stdio.h>

wp_result gen_bad(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 2;
}

wp_result gen_check_none(int nranks, int nmb, int nchunks, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)nranks, (void)nmb, (void)nchunks, (void)opt, (void)err, (void)errlen;
    return 0;
}

wp_result gen_check_nodes(const char *name, int nranks, const wp_gen_opts *opt, int *G, char *err, size_t errlen) {
    *G = opt->ranks_per_node > 0 ? opt->ranks_per_node : nranks;
    if (*G > nranks || nranks % *G != 0)
        return gen_bad(err, errlen, "--ranks-per-node: %s needs a divisor of --nranks %d, not %d", name, nranks, *G);
    return 0;
}

int gen_warmup_extra(const wp_gen_opts *opt, wp_strategy s, int nranks, int r) {
    /* interleaved-1f1b: checked and left out. Its warm-up already spans (v-1)N + 2(N-r-1)
     * forwards and its micro-batches cross the slow hop 2v-1 times; more warm-up only delays the
     * first backward (headline, b = 1: 30071 -> 29994 tokens/s at 1, 26019 at 2; depth-first
     * groups cannot take 3). gpipe runs every forward first anyway. */
    if (!strategy_has(s, WP_TRAIT_WARMUP)) return 0;
    /* auto's extra forward is for 1F1B's round trip over the slow hop. The zero-bubble schedules
     * fill that wait with W-passes, and for them no rule won everywhere (simulated, tokens/s,
     * the paper's shape at 312 TFLOP/s with M = 16N, and configs/hier-goal-4x8-h2048.ini; none /
     * one per slow hop downstream, the 1f1b rule): zb-h1 at 4 x 8 60621 / 39187, 4 x 4 40339 /
     * 45140, 2 x 8 50995 / 54691, the goal case 128937 / 93644 (none is 0.96 of the best on
     * average, the 1f1b rule 0.84); zb-h2 40437 / 41287, 38336 / 45389, 54610 / 54610, 87306 /
     * 79569 (0.86 and 0.88). So auto gives them none (WP_TRAIT_WARMUP_EXPLICIT); an explicit
     * count applies, and simulate --strategy auto tries 0-2. (1f1b at 4 x 8: 49181 -> 65607;
     * seq1f1b 49623 -> 69079.) */
    if (opt->warmup_auto && strategy_has(s, WP_TRAIT_WARMUP_EXPLICIT)) return 0;
    const int per = opt->ranks_per_node;
    if (opt->warmup_extra <= 0 || per <= 0 || per >= nranks) return 0;
    int hops = 0; /* slow hops downstream of rank r: after rank q = per-1, 2per-1, ... */
    for (int q = r; q < nranks; q++)
        if ((q + 1) % per == 0 && q < nranks - 1) hops++;
    return hops * opt->warmup_extra;
}
