/* Seq1F1B (gen_seq1f1b.c) in the schedule framework:
 *   - validates for N = 1..8, several M and k = 1..4 segments, without and with a model;
 *   - the validator catches the two dependencies segments add: a segment's F on a rank before its
 *     predecessor's (it would attend to keys and values not there yet), and a segment's backward
 *     before the backward of the segment after it (it would miss its dK/dV);
 *   - closed forms with uniform stages and equal segments (unit model, free links): step
 *     (kM + N-1)(F+B+W)/k, bubble (N-1)/(kM + N-1); rank r holds at most N-r-1 + k segment states;
 *   - the computation-wise split gives every segment about 1/k of the FLOPs (within one token's
 *     worth) with shorter later segments, while equal token counts would not; the simulator
 *     charges each segment its share, so a rank's busy time equals 1F1B's whole-sequence busy
 *     time, and activations cross each link once per token: the same bytes as 1F1B;
 *   - bad segment counts (negative, above WP_MAX_SEGMENTS, more than the tokens) are bad input.
 * Tolerances: unit-model times are sums of small multiples of 1/k, exact up to double rounding
 * (1e-12 relative); FLOP shares are compared with the share of one token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mutate.h"
#include "schedule.h"
#include "seq_split.h"
#include "sim.h"
#include "validate.h"
#include "check.h"

static int checks;


static int gen(wp_schedule *s, wp_strategy st, int N, int M, int k) {
    char err[1024];
    wp_gen_opts g = {.seq_segments = k};
    int rc = schedule_generate(st, N, M, N, &g, s, err, sizeof err);
    EXPECT(rc == 0, "%s N=%d M=%d k=%d: %s", strategy_name(st), N, M, k, err);
    return rc;
}

static wp_layout model(int N, int seq, bool recompute) {
    wp_model_cfg c = {.n_layers = N, .h = 64, .ffn = 160, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .seq = seq,
                      .micro_batch = 2, .vocab = 96, .rope_theta = 1e4, .norm_eps = 1e-5, .init_std = 0.02,
                      .precision = WP_PREC_MIXED, .recompute = recompute};
    model_cfg_even_chunks(&c, N);
    wp_layout L;
    char err[256];
    CHECK(layout_build(&c, &L, err, sizeof err) == 0, "layout: %s", err);
    return L;
}

static void validates(void) {
    for (int N = 1; N <= 8; N++)
        for (int mi = 0; mi < 4; mi++)
            for (int k = 1; k <= 4; k++) {
                int M = (int[]){1, 2, N, 2 * N + 1}[mi];
                wp_schedule s;
                if (gen(&s, WP_STRAT_SEQ1F1B, N, M, k)) continue;
                EXPECT(s.nseg == k && s.nmb == k * M, "N=%d M=%d k=%d: nseg %d, %d units", N, M, k, s.nseg, s.nmb);
                wp_layout L = model(N, 40, false);
                char err[1024];
                for (int with = 0; with < 2; with++) {
                    wp_run rep;
                    int rc = sched_validate(&s, with ? &L : NULL, &rep, err, sizeof err);
                    EXPECT(rc == 0, "seq1f1b N=%d M=%d k=%d%s: %s", N, M, k, with ? " with a model" : "", err);
                    for (int r = 0; r < N && !rc; r++)
                        EXPECT(rep.rank[r].peak_acts <= N - r - 1 + k, "N=%d M=%d k=%d: rank %d holds %d segment states, "
                               "more than N-r-1+k = %d", N, M, k, r, rep.rank[r].peak_acts, N - r - 1 + k);
                    run_free(&rep);
                    checks++;
                }
                layout_free(&L);
                sched_free(&s);
            }
}

/* Index of the first compute op on rank r with (chunk, mb), or -1. */
static int find_compute(const wp_schedule *s, int r, int op, int mb) {
    for (int i = 0; i < s->rank[r].n; i++)
        if (s->rank[r].a[i].op == op && s->rank[r].a[i].mb == mb) return i;
    return -1;
}

static void expect_caught(wp_schedule *s, const char *what, const char *phrase) {
    char err[1024];
    wp_run rep;
    int rc = sched_validate(s, NULL, &rep, err, sizeof err);
    EXPECT(rc == 1 && strstr(err, phrase), "%s: validator said %d (%s), want a message with '%s'", what, rc,
           rc ? err : "valid", phrase);
    if (rc == 1) fprintf(stderr, "ok   %s caught: %s\n", what, err);
    run_free(&rep);
    checks++;
}

/* Swap the computes of two units on one rank. */
static void swap_units(wp_schedule *s, int r, int op, int u0, int u1) {
    int i = find_compute(s, r, op, u0), j = find_compute(s, r, op, u1);
    if (i < 0 || j < 0) {
        EXPECT(0, "no %s of units %d and %d on rank %d", op_name(op), u0, u1, r);
        return;
    }
    s->rank[r].a[i].mb = u1;
    s->rank[r].a[j].mb = u0;
}

static void mutations(void) {
    for (int N = 1; N <= 4; N++) {
        wp_schedule s;
        if (gen(&s, WP_STRAT_SEQ1F1B, N, 2, 3)) continue;
        swap_units(&s, N - 1, WP_OP_BW, 0, 1); /* the last rank runs segment 0's backward before segment 1's */
        expect_caught(&s, "backward first in, first out", "last in, first out");
        sched_free(&s);
        if (gen(&s, WP_STRAT_SEQ1F1B, N, 2, 3)) continue;
        swap_units(&s, 0, WP_OP_F, 1, 2); /* rank 0 runs segment 2's forward before segment 1's */
        expect_caught(&s, "segment forward out of order", "the segment before it");
        sched_free(&s);
    }
}

static double sim_step(const wp_schedule *s, const wp_layout *L, const wp_costs *c, wp_sim *sim) {
    char err[1024];
    int rc = simulate(s, L, c, false, sim, err, sizeof err);
    EXPECT(rc == 0, "simulate %s: %s", strategy_name(s->strategy), err);
    return rc ? NAN : sim->step_s;
}

static void closed_forms(void) {
    for (int N = 1; N <= 6; N++)
        for (int k = 1; k <= 4; k++)
            for (int mi = 0; mi < 3; mi++) {
                int M = (int[]){1, N, 2 * N + 1}[mi];
                wp_schedule s;
                if (gen(&s, WP_STRAT_SEQ1F1B, N, M, k)) continue;
                wp_costs c;
                costs_unit(&c, N, 0); /* F = B = W = 1 per micro-batch; a segment does 1/k */
                wp_sim sim;
                double step = sim_step(&s, NULL, &c, &sim), want = (k * M + N - 1) * 3.0 / k;
                double bubble = (N - 1.0) / (k * M + N - 1.0);
                EXPECT(check_close(step, want, 1e-12) && fabs(sim.bubble - bubble) < 1e-12,
                       "N=%d M=%d k=%d: step %.12g bubble %.12f, want (kM+N-1)(F+B+W)/k = %.12g, (N-1)/(kM+N-1) = %.12f",
                       N, M, k, step, sim.bubble, want, bubble);
                checks++;
                sim_free(&sim);
                sched_free(&s);
            }
}

/* Largest minus smallest share of the step's compute (F + B + W of every chunk, as the
 * simulator charges them) that one segment takes. */
static double split_spread(const wp_layout *L, const int *t, int k) {
    wp_machine m = {.flops = 1};
    wp_costs c;
    costs_from_layout(&c, L, L->cfg.n_chunks, &m);
    double lo = INFINITY, hi = 0, whole = 0;
    for (int ch = 0; ch < L->cfg.n_chunks; ch++)
        for (int op = WP_OP_F; op <= WP_OP_W; op++) whole += c.op_s[op][ch];
    for (int j = 0; j < k; j++) {
        double cost = 0;
        for (int ch = 0; ch < L->cfg.n_chunks; ch++)
            for (int op = WP_OP_F; op <= WP_OP_W; op++)
                cost += c.op_s[op][ch] * seqsplit_cost_share(L, ch, op, t[j], t[j + 1], L->cfg.seq);
        lo = fmin(lo, cost / whole);
        hi = fmax(hi, cost / whole);
    }
    return hi - lo;
}

static void computation_wise(void) {
    const int seqs[] = {64, 1000, 4096};
    for (int i = 0; i < 3; i++)
        for (int k = 2; k <= 4; k++) {
            wp_layout L = model(4, seqs[i], i == 1);
            int t[WP_MAX_SEGMENTS + 1], even[WP_MAX_SEGMENTS + 1];
            char err[256];
            if (seqsplit_bounds(&L, k, t, err, sizeof err)) {
                EXPECT(0, "seg_split: %s", err);
                layout_free(&L);
                continue;
            }
            for (int j = 0; j <= k; j++) even[j] = seqs[i] * j / k;
            double spread = split_spread(&L, t, k), even_spread = split_spread(&L, even, k);
            /* a boundary moved by one token changes two segments by the cost of that token, at most
             * the last token's share, (lin + att*s) / total ~ 2/s */
            double token = 4.0 / seqs[i];
            bool shorter = true;
            for (int j = 1; j < k; j++) shorter = shorter && t[j + 1] - t[j] <= t[j] - t[j - 1];
            EXPECT(spread <= token && shorter && even_spread > spread,
                   "s=%d k=%d: split [%d..%d] FLOP shares spread %.3g (one token %.3g), equal tokens %.3g, later "
                   "segments %s", seqs[i], k, t[1], t[k - 1], spread, token, even_spread, shorter ? "shorter" : "longer");
            if (k == 4) fprintf(stderr, "ok   s=%d k=4: boundaries %d %d %d, FLOP share spread %.2e vs %.2e for equal tokens\n",
                                seqs[i], t[1], t[2], t[3], spread, even_spread);
            checks++;
            layout_free(&L);
        }
}

/* With FLOP costs, a rank's compute time is 1F1B's (the shares add up to one whole sequence) and
 * the activation bytes on the wire are 1F1B's (every token crosses once). */
static void flops_and_bytes(void) {
    for (int N = 2; N <= 4; N++)
        for (int k = 2; k <= 3; k++) {
            const int M = N + 1;
            wp_layout L = model(N, 96, false);
            wp_machine m = {.flops = 1e12, .node_bw = 1e9, .node_lat = 1e-6};
            wp_costs c;
            costs_from_layout(&c, &L, N, &m);
            wp_schedule a, b;
            if (gen(&a, WP_STRAT_SEQ1F1B, N, M, k)) continue;
            if (gen(&b, WP_STRAT_1F1B, N, M, 0)) continue;
            wp_sim sa, sb;
            sim_step(&a, &L, &c, &sa);
            sim_step(&b, &L, &c, &sb);
            for (int r = 0; r < N; r++) {
                double ba = sa.run.rank[r].busy, bb = sb.run.rank[r].busy;
                size_t xa = sa.run.rank[r].sent[WP_BUF_A] + sa.run.rank[r].sent[WP_BUF_GA];
                size_t xb = sb.run.rank[r].sent[WP_BUF_A] + sb.run.rank[r].sent[WP_BUF_GA];
                EXPECT(fabs(ba - bb) <= 1e-9 * bb && xa == xb, "N=%d k=%d rank %d: busy %.9g s vs 1f1b %.9g s, "
                       "activation bytes %zu vs %zu", N, k, r, ba, bb, xa, xb);
                checks++;
            }
            EXPECT(sa.step_s < sb.step_s, "N=%d k=%d: seq1f1b step %.6g s not shorter than 1f1b %.6g s", N, k, sa.step_s,
                   sb.step_s);
            sim_free(&sa);
            sim_free(&sb);
            sched_free(&a);
            sched_free(&b);
            layout_free(&L);
        }
}

/* Bad segment counts are bad input (2, naming the flag); k = 0 means the default. */
static void bad_input(void) {
    const int ks[] = {-1, WP_MAX_SEGMENTS + 1};
    for (int i = 0; i < 2; i++) {
        char err[256] = "";
        wp_schedule s;
        wp_gen_opts g = {.seq_segments = ks[i]};
        int rc = schedule_generate(WP_STRAT_SEQ1F1B, 2, 2, 2, &g, &s, err, sizeof err);
        EXPECT(rc == 2 && strstr(err, "--seq-segments"), "k=%d: rc %d '%s'", ks[i], rc, err);
        if (rc == 0) sched_free(&s);
        checks++;
    }
    wp_schedule s;
    if (!gen(&s, WP_STRAT_SEQ1F1B, 2, 2, 0)) {
        EXPECT(s.nseg == WP_SEQ1F1B_DEFAULT_SEGMENTS, "k = 0 gave %d segments, want the default %d", s.nseg,
               WP_SEQ1F1B_DEFAULT_SEGMENTS);
        sched_free(&s);
        checks++;
    }
    wp_layout L = model(2, 3, false);
    int t[WP_MAX_SEGMENTS + 1];
    char err[256] = "";
    EXPECT(seqsplit_bounds(&L, 4, t, err, sizeof err) == 2 && strstr(err, "--seq-segments"), "4 segments of 3 tokens: '%s'", err);
    EXPECT(seqsplit_bounds(&L, 3, t, err, sizeof err) == 0 && t[1] == 1 && t[2] == 2, "3 segments of 3 tokens: %d %d", t[1], t[2]);
    checks += 2;
    layout_free(&L);
}

int main(void) {
    bad_input();
    validates();
    mutations();
    closed_forms();
    computation_wise();
    flops_and_bytes();
    printf("%d checks, %d failures\n", checks, check_failures());
    return check_failures() ? 1 : 0;
}
