/* The tuned baselines of issue 18:
 *   - extra warm-up before a slow hop (schedule.h, wp_gen_opts.warmup_extra): every rank runs
 *     textbook + e * (slow hops downstream of it) warm-up forwards, counted here from the lists
 *     (forwards before the first backward, capped at M) against a count written out per
 *     strategy (1f1b N-r-1, zb-h1 N-r-1, zb-h2 2(N-r)-1, seq1f1b N-r-1 + k-1 units); the lists
 *     validate; nothing changes
 *     for gpipe, interleaved-1f1b, or without ranks per node; 1f1b refuses more than
 *     WP_1F1B_MAX_WARMUP_EXTRA (bad input, 2).
 *   - on a ring whose hop between two nodes is slow (round trip longer than a forward), one extra
 *     warm-up forward shortens the simulated 1F1B step, and on free links it costs nothing
 *     more than the textbook step.
 *   - --chunk-layers auto (model_cfg_balanced_chunks): against every split of L layers into n
 *     chunks (brute force, each chunk costed by layout_chunk_flops on a built layout: F + B + W,
 *     F twice with recompute), its costliest chunk is the least possible; on Llama-2-7B shapes
 *     (V = 32000, 32 layers) the head is lighter than a layer and the split stays even at 2 or 4
 *     layers per chunk; with V = 128000 and 8 layers per chunk the last chunk gets fewer. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "schedule.h"
#include "sim.h"
#include "validate.h"

static int warm_of(wp_strategy st, int N, int r, int k) {
    switch (st) {
    case WP_STRAT_ZBH2: return 2 * (N - r) - 1;
    case WP_STRAT_SEQ1F1B: return N - r - 1 + k - 1;
    default: return N - r - 1;
    }
}

/* forwards before the first B or BW in rank r's list */
static int forwards_first(const wp_schedule *s, int r) {
    int n = 0;
    for (int i = 0; i < s->rank[r].n; i++) {
        int op = s->rank[r].a[i].op;
        if (op == WP_OP_B || op == WP_OP_BW) break;
        if (op == WP_OP_F) n++;
    }
    return n;
}

static void warm_counts(wp_strategy st, int N, int per, int M, int e) {
    const int k = 2;
    wp_gen_opts g = {.warmup_extra = e, .ranks_per_node = per, .seq_segments = k};
    wp_schedule s;
    char err[1024];
    int rc = schedule_generate(st, N, M, N, &g, &s, err, sizeof err);
    if (st == WP_STRAT_1F1B && e > WP_1F1B_MAX_WARMUP_EXTRA && per < N) {
        EXPECT(rc == 2, "1f1b e=%d: rc %d, want 2 (bad input)", e, rc);
        if (!rc) sched_free(&s);
        return;
    }
    if (rc) {
        EXPECT(0, "%s N=%d per=%d M=%d e=%d: %s", strategy_name(st), N, per, M, e, err);
        return;
    }
    const int units = st == WP_STRAT_SEQ1F1B ? M * k : M;
    for (int r = 0; r < N; r++) {
        int hops = 0;
        for (int b = per; b < N; b += per) /* a node boundary between rank b-1 and rank b */
            if (r <= b - 1) hops++;
        /* after the warm-up, 1f1b, seq1f1b and zb-h1 run F then B; zb-h2 runs B then F */
        int want = warm_of(st, N, r, k) + e * hops + (st != WP_STRAT_ZBH2);
        if (want > units) want = units;
        int got = forwards_first(&s, r);
        EXPECT(got == want, "%s N=%d per=%d M=%d e=%d rank %d: %d forwards before the first backward, want %d",
               strategy_name(st), N, per, M, e, r, got, want);
    }
    wp_run rep;
    EXPECT(sched_validate(&s, NULL, &rep, err, sizeof err) == 0, "%s N=%d per=%d M=%d e=%d: %s", strategy_name(st), N,
           per, M, e, err);
    run_free(&rep);
    sched_free(&s);
}

/* gpipe and interleaved-1f1b do not take the option: the same lists as without it. */
static void unchanged(wp_strategy st, int N, int C) {
    wp_gen_opts a = {0}, b = {.warmup_extra = 2, .ranks_per_node = 2};
    wp_schedule x, y;
    char err[1024];
    if (schedule_generate(st, N, 2 * N, C, &a, &x, err, sizeof err)) {
        EXPECT(0, "%s: %s", strategy_name(st), err);
        return;
    }
    if (schedule_generate(st, N, 2 * N, C, &b, &y, err, sizeof err)) {
        EXPECT(0, "%s: %s", strategy_name(st), err);
        sched_free(&x);
        return;
    }
    for (int r = 0; r < N; r++) {
        bool same = x.rank[r].n == y.rank[r].n;
        for (int i = 0; same && i < x.rank[r].n; i++)
            same = x.rank[r].a[i].op == y.rank[r].a[i].op && x.rank[r].a[i].chunk == y.rank[r].a[i].chunk &&
                   x.rank[r].a[i].mb == y.rank[r].a[i].mb;
        EXPECT(same, "%s rank %d: --warmup-extra changed the lists", strategy_name(st), r);
    }
    sched_free(&x);
    sched_free(&y);
}

/* --warmup-extra auto's count (warmup_auto) goes to 1f1b and seq1f1b only; an explicit count to
 * all four strategies that take it (schedule.h). */
static void auto_scope(void) {
    const wp_strategy takes[] = {WP_STRAT_1F1B, WP_STRAT_SEQ1F1B, WP_STRAT_ZBH1, WP_STRAT_ZBH2};
    for (int i = 0; i < 4; i++)
        for (int a = 0; a < 2; a++) {
            wp_gen_opts g = {.warmup_extra = 1, .warmup_auto = a, .ranks_per_node = 2};
            bool zb = takes[i] == WP_STRAT_ZBH1 || takes[i] == WP_STRAT_ZBH2;
            int want = a && zb ? 0 : 1, got = gen_warmup_extra(&g, takes[i], 4, 0);
            EXPECT(got == want, "%s, %s count 1: rank 0 of 2 x 2 runs %d extra warm-up forwards, want %d",
                   strategy_name(takes[i]), a ? "auto's" : "an explicit", got, want);
        }
}

/* 1F1B, N = 4 in two nodes of 2, unit computes (F = B = W = 1), the hop between the nodes takes
 * 3 units each way: rank 1 waits a round trip for each gradient with the textbook warm-up. */
static double step_1f1b(int e, double slow) {
    wp_gen_opts g = {.warmup_extra = e, .ranks_per_node = 2};
    wp_schedule s;
    char err[1024];
    if (schedule_generate(WP_STRAT_1F1B, 4, 16, 4, &g, &s, err, sizeof err)) {
        EXPECT(0, "1f1b e=%d: %s", e, err);
        return 0;
    }
    wp_costs c;
    costs_unit(&c, 4, 0);
    c.ranks_per_node = 2;
    c.link_lat = slow;
    c.node_lat = 0;
    wp_sim sim;
    double t = 0;
    if (simulate(&s, NULL, &c, false, &sim, err, sizeof err) == 0) t = sim.step_s;
    else EXPECT(0, "simulate e=%d: %s", e, err);
    sim_free(&sim);
    sched_free(&s);
    return t;
}

static double chunk_cost(const wp_model_cfg *cfg, int c) {
    wp_layout L;
    char err[256];
    if (layout_build(cfg, &L, err, sizeof err)) {
        EXPECT(0, "layout: %s", err);
        return 0;
    }
    wp_flops f = layout_chunk_flops(&L, c);
    layout_free(&L);
    return f.fwd * (cfg->recompute ? 2 : 1) + f.bwd_input + f.bwd_weight;
}

static double worst_chunk(const wp_model_cfg *cfg) {
    double w = 0;
    for (int c = 0; c < cfg->n_chunks; c++) w = fmax(w, chunk_cost(cfg, c));
    return w;
}

/* the least costliest chunk over every split of cfg's layers into n chunks of at least one */
static double brute(wp_model_cfg *cfg, int c, int left, int n) {
    if (c == n - 1) {
        cfg->chunk_layers[c] = left;
        return worst_chunk(cfg);
    }
    double best = INFINITY;
    for (int k = 1; k <= left - (n - 1 - c); k++) {
        cfg->chunk_layers[c] = k;
        best = fmin(best, brute(cfg, c + 1, left - k, n));
    }
    return best;
}

static wp_model_cfg llama_cfg(int layers, int h, int seq, int vocab, bool recompute) {
    wp_model_cfg c = {.n_layers = layers, .h = h, .ffn = 8 * h / 3, .n_heads = 4, .n_kv_heads = 4, .head_dim = h / 4,
                      .seq = seq, .micro_batch = 1, .vocab = vocab, .rope_theta = 1e4, .norm_eps = 1e-5, .init_std = 0.02,
                      .precision = WP_PREC_MIXED, .recompute = recompute};
    return c;
}

static void balanced(int layers, int n, int h, int seq, int vocab, bool recompute) {
    wp_model_cfg c = llama_cfg(layers, h, seq, vocab, recompute);
    model_cfg_balanced_chunks(&c, n);
    int sum = 0, ok = c.n_chunks == n;
    for (int k = 0; k < n; k++) sum += c.chunk_layers[k], ok &= c.chunk_layers[k] >= 1;
    EXPECT(ok && sum == layers, "L=%d n=%d: chunks do not split the layers", layers, n);
    double got = worst_chunk(&c);
    wp_model_cfg b = c;
    double want = brute(&b, 0, layers, n);
    EXPECT(check_close(got, want, 1e-12), "L=%d n=%d h=%d s=%d V=%d: costliest chunk %g, the best split has %g", layers, n,
           h, seq, vocab, got, want);
}

/* Llama shapes at 4096: the last chunk's layers with auto */
static int last_layers(int layers, int n, int vocab) {
    wp_model_cfg c = llama_cfg(layers, 4096, 4096, vocab, true);
    c.ffn = 11008;
    c.n_heads = c.n_kv_heads = 32;
    c.head_dim = 128;
    model_cfg_balanced_chunks(&c, n);
    return c.chunk_layers[n - 1];
}

int main(void) {
    for (int L = 2; L <= 10; L++)
        for (int n = 1; n <= 5 && n <= L; n++) {
            balanced(L, n, 64, 32, 256, false);
            balanced(L, n, 64, 32, 4096, true); /* a head of several layers' FLOPs */
            balanced(L, n, 32, 256, 1024, false);
        }
    EXPECT(last_layers(32, 16, 32000) == 2 && last_layers(32, 8, 32000) == 4, "V = 32000: auto is not even (%d, %d)",
           last_layers(32, 16, 32000), last_layers(32, 8, 32000));
    EXPECT(last_layers(32, 4, 128000) < 8, "V = 128000, 8 layers per chunk: the last chunk keeps %d",
           last_layers(32, 4, 128000));

    const wp_strategy sts[] = {WP_STRAT_1F1B, WP_STRAT_ZBH1, WP_STRAT_ZBH2, WP_STRAT_SEQ1F1B};
    for (size_t i = 0; i < sizeof sts / sizeof *sts; i++)
        for (int N = 2; N <= 8; N *= 2)
            for (int per = 1; per <= N; per *= 2)
                for (int M = N; M <= 4 * N; M *= 2)
                    for (int e = 0; e <= 4; e++) warm_counts(sts[i], N, per, M, e);
    unchanged(WP_STRAT_GPIPE, 4, 4);
    unchanged(WP_STRAT_I1F1B, 4, 8);
    auto_scope();
    double t0 = step_1f1b(0, 3), t1 = step_1f1b(1, 3), f0 = step_1f1b(0, 0), f1 = step_1f1b(1, 0);
    printf("1f1b N=4, 2 per node, hop 3 units: step %.1f textbook, %.1f with one extra warm-up forward; free links "
           "%.1f and %.1f\n", t0, t1, f0, f1);
    EXPECT(t1 < t0, "one extra warm-up forward does not shorten the link-bound step (%g vs %g)", t1, t0);
    EXPECT(f1 <= f0 + 1e-9, "on free links the extra warm-up lengthens the step (%g vs %g)", f1, f0);
    return check_result("schedule/tuned");
}
