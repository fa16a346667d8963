/* The strategies' table (src/schedule/strategies.def) against what the strategies do: every
 * promise a row makes is checked by generating schedules, not by reading the row back.
 *   - names: each parses back to itself, none repeats, none is a pseudo-choice (all, auto), and
 *     --strategy's choice list (WP_STRATEGY_CHOICES) is exactly the names in table order;
 *   - WP_TRAIT_BASELINE: one row, 1f1b (simulate's column is vs_1f1b);
 *   - WP_TRAIT_ANY_M: the strategy takes M = 3 on N = 2 ranks; without it, M must be a multiple
 *     of N and M = 3 is refused naming --num-microbatches;
 *   - the chunk rule and default chunks: the default on N = 4 ranks (2 per node) is what the rule
 *     says (2N for C = vN, G for C = G, else N) and a schedule of that shape generates; C = N + 1
 *     is refused unless the rule is WP_CHUNKS_ANY;
 *   - WP_TRAIT_WARMUP / _EXPLICIT: with a slow hop after every rank, one extra warm-up forward
 *     changes the generated lists exactly when the row takes it, and under --warmup-extra auto
 *     exactly when it also lacks _EXPLICIT; _EXPLICIT never comes without _WARMUP;
 *   - WP_TRAIT_SEGMENTS: the generated schedule runs sequence segments (nseg = 2 for 2) exactly
 *     when the row says so. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "schedule.h"

static void names(void) {
    char joined[1024] = "";
    for (int i = 0; i < WP_STRAT_COUNT; i++) {
        const char *n = strategy_name((wp_strategy)i);
        wp_strategy back = WP_STRAT_COUNT;
        EXPECT(strategy_parse(n, &back) && back == (wp_strategy)i, "%s does not parse back to row %d", n, i);
        EXPECT(strcmp(n, "all") && strcmp(n, "auto"), "row %d is named like a pseudo-choice: %s", i, n);
        for (int j = 0; j < i; j++) EXPECT(strcmp(n, strategy_name((wp_strategy)j)), "rows %d and %d: %s", j, i, n);
        snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s|", n);
    }
    EXPECT(strcmp(joined, WP_STRATEGY_CHOICES) == 0, "choices '%s', names '%s'", WP_STRATEGY_CHOICES, joined);
    wp_strategy x;
    EXPECT(!strategy_parse("1f1b ", &x) && !strategy_parse("", &x), "near-names parse");
    int baselines = 0;
    for (int i = 0; i < WP_STRAT_COUNT; i++) baselines += strategy_has((wp_strategy)i, WP_TRAIT_BASELINE);
    EXPECT(baselines == 1 && strcmp(strategy_name(strategy_baseline()), "1f1b") == 0, "%d baselines, the pick %s",
           baselines, strategy_name(strategy_baseline()));
}

static int gen(wp_strategy s, int N, int M, int C, const wp_gen_opts *o, int *nseg, char *err, size_t errlen) {
    wp_schedule sc;
    int rc = schedule_generate(s, N, M, C, o, &sc, err, errlen);
    if (!rc) {
        if (nseg) *nseg = sc.nseg;
        sched_free(&sc);
    }
    return rc;
}

static void shapes(wp_strategy s) {
    const char *n = strategy_name(s);
    const wp_gen_opts nodes = {.ranks_per_node = 2};
    char err[512];
    /* any M */
    const bool any_m = strategy_has(s, WP_TRAIT_ANY_M);
    int rc = gen(s, 2, 3, strategy_default_chunks(s, 2, 0), NULL, NULL, err, sizeof err);
    EXPECT(any_m ? rc == 0 : rc == 2 && strstr(err, "--num-microbatches"), "%s N=2 M=3: rc %d (%s), any M %d", n, rc,
           rc ? err : "", any_m);
    /* default chunks */
    const wp_chunk_rule rule = strategy_chunk_rule(s);
    const int want = rule == WP_CHUNKS_V_PER_RANK ? 8 : rule == WP_CHUNKS_NODE ? 2 : 4;
    const int C = strategy_default_chunks(s, 4, 2);
    EXPECT(C == want, "%s: default chunks on 4 ranks, 2 per node: %d, want %d", n, C, want);
    rc = gen(s, 4, 8, C, &nodes, NULL, err, sizeof err);
    EXPECT(rc == 0, "%s N=4 M=8 C=%d (its default): %s", n, C, err);
    if (rule != WP_CHUNKS_NODE) {
        rc = gen(s, 4, 8, 5, NULL, NULL, err, sizeof err);
        EXPECT(rule == WP_CHUNKS_ANY ? rc == 0 : rc == 2 && strstr(err, "--num-chunks"), "%s C=5 on 4 ranks: rc %d %s",
               n, rc, rc ? err : "");
    }
    /* segments */
    const wp_gen_opts seg = {.seq_segments = 2};
    int nseg = -1;
    rc = gen(s, 2, 4, strategy_default_chunks(s, 2, 0), &seg, &nseg, err, sizeof err);
    const bool segs = strategy_has(s, WP_TRAIT_SEGMENTS);
    EXPECT(rc == 0 && (nseg >= 2) == segs, "%s --seq-segments 2: rc %d, nseg %d, the row says %d", n, rc, nseg, segs);
}

/* Whether o's warm-up setting changes the lists s generates on 4 ranks, 1 per node (a slow hop
 * after every rank), against none: compared as text, action by action. */
static bool warmup_changes(wp_strategy s, wp_gen_opts o) {
    const wp_gen_opts none = {.ranks_per_node = 1};
    const int C = strategy_default_chunks(s, 4, 1);
    wp_schedule x, y;
    char err[512];
    CHECK(schedule_generate(s, 4, 8, C, &none, &x, err, sizeof err) == 0, "%s: %s", strategy_name(s), err);
    CHECK(schedule_generate(s, 4, 8, C, &o, &y, err, sizeof err) == 0, "%s: %s", strategy_name(s), err);
    bool differ = false;
    for (int r = 0; r < 4 && !differ; r++) {
        differ = x.rank[r].n != y.rank[r].n;
        for (int i = 0; i < x.rank[r].n && !differ; i++) {
            char t1[128], t2[128];
            differ = strcmp(action_text(&x.rank[r].a[i], t1, sizeof t1), action_text(&y.rank[r].a[i], t2, sizeof t2));
        }
    }
    sched_free(&x);
    sched_free(&y);
    return differ;
}

static void warmup(wp_strategy s) {
    const char *n = strategy_name(s);
    const bool w = strategy_has(s, WP_TRAIT_WARMUP), ex = strategy_has(s, WP_TRAIT_WARMUP_EXPLICIT);
    EXPECT(w || !ex, "%s: _EXPLICIT without _WARMUP", n);
    wp_gen_opts o = {.ranks_per_node = 1, .warmup_extra = 1};
    bool d = warmup_changes(s, o);
    EXPECT(d == w, "%s: an explicit extra warm-up %s its lists, the row says it takes one: %d", n,
           d ? "changes" : "does not change", w);
    o.warmup_auto = true;
    d = warmup_changes(s, o);
    EXPECT(d == (w && !ex), "%s: --warmup-extra auto %s its lists, the row says %d/%d", n,
           d ? "changes" : "does not change", w, ex);
}

int main(void) {
    names();
    for (int i = 0; i < WP_STRAT_COUNT; i++) {
        shapes((wp_strategy)i);
        warmup((wp_strategy)i);
    }
    return check_result("schedule/strategies");
}
