/* The activation-passing baselines of issue 8 against their published closed forms, simulated
 * with uniform chunks and free links (unit model, transfers take no time):
 *   - GPipe (Huang et al. 2019): step (M+N-1)(F+B), bubble (N-1)/(M+N-1) for any F/B ratio;
 *     M activation states on every rank.
 *   - interleaved 1F1B, depth-first (Narayanan et al. 2021, section 2.2.2): bubble time
 *     (N-1)(F+B) with F, B the times of one chunk, i.e. (1/v)(N-1)/M of the ideal time, so the
 *     step is (vM + N-1)(F+B) and the bubble (N-1)/(vM + N-1); activation bytes sent v times
 *     1F1B's plus the wrap: 2(vN-1)M activations in all, against 2(N-1)M.
 *   - ZB-H1 (Qi et al. 2023, section 2.1): bubble (N-1)(F+B-W), step M(F+B+W) + (N-1)(F+B-W);
 *     peak activation states min(N, M) on every rank, the same as 1F1B's peak (on its rank 0).
 *   - ZB-H2 (Qi et al. 2023, section 2.2) with F = B = W as the paper draws it: no idle time
 *     inside a rank's block of work (the parallelogram); what is left is the fill, (N-1)F, since
 *     a step of this IR ends with the global REDUCE: step M(F+B+W) + (N-1)F; peak min(2N-1, M)
 *     activation states on every rank.
 *   - ZB-V (Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, section 6; the
 *     authors' table: bubble rate 0 with T_F = T_B = T_W, 1F1B's activation memory): 2N chunks in
 *     a V, each half a stage. With F = B = W per chunk no rank idles inside its block of 6M
 *     computes, and as for ZB-H2 the step barrier leaves the fill, (N-1)F of one chunk (half a
 *     stage's): step 2M(F+B+W) + (N-1)F = 6M + N-1 units, bubble (N-1)/(6M+N-1), for M >= N
 *     (with M >= 2N the N-1-r idle units of rank r all come before its first compute);
 *     peak 2 min(N, M) chunk states on every rank, min(N, M) stages' worth: 1F1B's peak.
 * Tolerances: the unit model adds and subtracts small multiples of the given times, so every
 * time is exact up to double rounding (1e-12 relative). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "schedule.h"
#include "sim.h"
#include "validate.h"

static int checks;


typedef struct {
    wp_strategy st;
    int N, M, v;
    bool breadth;
    double f, b, w; /* one chunk's F, B and W times; a fused BW takes b + w */
} shape;

/* Simulate a shape; 0 and *sim filled (caller frees), or -1. */
static int run(const shape *x, bool record, wp_sim *sim) {
    char err[1024];
    wp_schedule s;
    wp_gen_opts g = {.i1f1b_breadth_first = x->breadth};
    int C = x->v * x->N;
    if (schedule_generate(x->st, x->N, x->M, C, &g, &s, err, sizeof err)) {
        EXPECT(0, "%s N=%d M=%d C=%d: %s", strategy_name(x->st), x->N, x->M, C, err);
        return -1;
    }
    wp_costs c;
    costs_unit(&c, C, 0);
    for (int k = 0; k < C; k++) costs_set_measured(&c, k, x->f, x->b, x->w);
    int rc = simulate(&s, NULL, &c, record, sim, err, sizeof err);
    EXPECT(rc == 0, "%s N=%d M=%d: %s", strategy_name(x->st), x->N, x->M, err);
    sched_free(&s);
    if (rc) sim_free(sim);
    return rc ? -1 : 0;
}

static void check_step(const shape *x, double want_step, const char *formula) {
    wp_sim sim;
    if (run(x, false, &sim)) return;
    double work = x->v * x->M * (x->f + x->b + x->w);
    double want_bubble = 1 - work / want_step;
    EXPECT(check_close(sim.step_s, want_step, 1e-12) && fabs(sim.bubble - want_bubble) < 1e-12,
           "%s%s N=%d M=%d v=%d F=%g B=%g W=%g: step %.12g, bubble %.12f; %s gives %.12g, %.12f", strategy_name(x->st),
           x->breadth ? " breadth-first" : "", x->N, x->M, x->v, x->f, x->b, x->w, sim.step_s, sim.bubble, formula,
           want_step, want_bubble);
    checks++;
    sim_free(&sim);
}

static int peak_acts(wp_strategy st, int N, int M, int C, bool breadth, int rank) {
    char err[1024];
    wp_schedule s;
    wp_gen_opts g = {.i1f1b_breadth_first = breadth};
    if (schedule_generate(st, N, M, C, &g, &s, err, sizeof err)) {
        EXPECT(0, "%s: %s", strategy_name(st), err);
        return -1;
    }
    wp_run rep;
    int rc = sched_validate(&s, NULL, &rep, err, sizeof err);
    EXPECT(rc == 0, "%s N=%d M=%d: %s", strategy_name(st), N, M, err);
    int peak = -1;
    for (int r = 0; r < N; r++)
        if (!rc && (rank == r || (rank < 0 && rep.rank[r].peak_acts > peak))) peak = rep.rank[r].peak_acts;
    run_free(&rep);
    sched_free(&s);
    return peak;
}

static void gpipe(void) {
    static const double fb[][2] = {{1, 1}, {1, 2}, {2.5, 1}};
    for (int N = 1; N <= 6; N++)
        for (int mi = 0; mi < 4; mi++) {
            int M = (int[]){1, 3, N, 2 * N + 1}[mi];
            for (int q = 0; q < 3; q++) {
                shape x = {WP_STRAT_GPIPE, N, M, 1, false, fb[q][0], fb[q][1], 0};
                check_step(&x, (M + N - 1) * (x.f + x.b), "(M+N-1)(F+B)");
            }
            for (int r = 0; r < N; r++) {
                int p = peak_acts(WP_STRAT_GPIPE, N, M, N, false, r);
                EXPECT(p == M, "gpipe N=%d M=%d rank %d holds %d activation states, want M", N, M, r, p);
            }
            checks++;
        }
}

static void interleaved(void) {
    static const double fb[][2] = {{1, 1}, {1, 2}};
    for (int N = 1; N <= 5; N++)
        for (int v = 1; v <= 3; v++)
            for (int k = 1; k <= 3; k++)
                for (int q = 0; q < 2; q++) {
                    for (int bf = 0; bf < 2; bf++) {
                    shape x = {WP_STRAT_I1F1B, N, k * N + bf, v, bf, fb[q][0], fb[q][1], 0};
                    check_step(&x, (v * x.M + N - 1) * (x.f + x.b), "(vM+N-1)(F+B)");
                    }
                }
}

static size_t act_bytes_sent(wp_strategy st, int N, int M, int C, const wp_layout *L) {
    char err[1024];
    wp_schedule s;
    if (schedule_generate(st, N, M, C, NULL, &s, err, sizeof err)) {
        EXPECT(0, "%s: %s", strategy_name(st), err);
        return 0;
    }
    wp_run rep;
    int rc = sched_validate(&s, L, &rep, err, sizeof err);
    EXPECT(rc == 0, "%s: %s", strategy_name(st), err);
    size_t sum = 0;
    for (int r = 0; r < N && !rc; r++) sum += rep.rank[r].sent[WP_BUF_A] + rep.rank[r].sent[WP_BUF_GA];
    run_free(&rep);
    sched_free(&s);
    return sum;
}

/* Activation bytes: 2(vN-1)M activations in all for interleaved-1f1b, 2(N-1)M for 1F1B. */
static void interleaved_traffic(void) {
    for (int N = 2; N <= 4; N++)
        for (int v = 2; v <= 3; v++) {
            const int M = 2 * N, C = v * N;
            wp_model_cfg c = {.n_layers = C, .h = 32, .ffn = 96, .n_heads = 4, .n_kv_heads = 4, .head_dim = 8, .seq = 16,
                              .micro_batch = 2, .vocab = 64, .rope_theta = 1e4, .norm_eps = 1e-5, .init_std = 0.02,
                              .precision = WP_PREC_MIXED};
            model_cfg_even_chunks(&c, C);
            wp_layout L;
            char err[256];
            if (layout_build(&c, &L, err, sizeof err)) {
                EXPECT(0, "layout: %s", err);
                continue;
            }
            size_t one = buf_bytes(&L, buf_a(0, 0));
            size_t got = act_bytes_sent(WP_STRAT_I1F1B, N, M, C, &L);
            EXPECT(got == 2 * (size_t)(C - 1) * M * one, "interleaved-1f1b N=%d v=%d sends %zu activation bytes, want "
                   "2(vN-1)M x %zu", N, v, got, one);
            layout_free(&L);
            checks++;
        }
}

static void zbh1(void) {
    static const double fbw[][3] = {{1, 1, 1}, {1, 1.5, 0.5}, {1, 1.2, 0.8}};
    for (int N = 1; N <= 6; N++)
        for (int mi = 0; mi < 3; mi++) {
            int M = (int[]){N, 2 * N, 3 * N + 1}[mi];
            for (int q = 0; q < 3; q++) {
                shape x = {WP_STRAT_ZBH1, N, M, 1, false, fbw[q][0], fbw[q][1], fbw[q][2]};
                check_step(&x, M * (x.f + x.b + x.w) + (N - 1) * (x.f + x.b - x.w), "M(F+B+W) + (N-1)(F+B-W)");
            }
        }
    for (int N = 1; N <= 8; N++)
        for (int M = 1; M <= 2 * N + 1; M += N > 1 ? N - 1 : 1) {
            int h1 = peak_acts(WP_STRAT_ZBH1, N, M, N, false, -1), base = peak_acts(WP_STRAT_1F1B, N, M, N, false, -1);
            int want = N < M ? N : M;
            EXPECT(h1 == base && h1 == want, "zb-h1 N=%d M=%d peak %d activation states, 1f1b %d, want min(N,M) = %d", N,
                   M, h1, base, want);
            for (int r = 0; r < N; r++) {
                int p = peak_acts(WP_STRAT_ZBH1, N, M, N, false, r);
                EXPECT(p == want, "zb-h1 N=%d M=%d rank %d peak %d, want %d", N, M, r, p, want);
            }
            checks++;
        }
}

/* Idle time inside rank r's block of work: from its first compute's start to its last's end. */
static double inner_idle(const wp_sim *sim, int r) {
    double t0 = INFINITY, t1 = -INFINITY, busy = 0;
    for (int i = 0; i < sim->run.n_comp; i++) {
        const wp_comp_event *e = &sim->run.comp[i];
        if (e->rank != r || e->step != 1 || e->op > WP_OP_BW) continue;
        t0 = fmin(t0, e->t0);
        t1 = fmax(t1, e->t1);
        busy += e->t1 - e->t0;
    }
    return t1 - t0 - busy;
}

static void zbh2(void) {
    for (int N = 1; N <= 6; N++)
        for (int mi = 0; mi < 3; mi++) {
            int M = (int[]){N, 2 * N, 3 * N + 1}[mi];
            shape x = {WP_STRAT_ZBH2, N, M, 1, false, 1, 1, 1};
            check_step(&x, M * 3.0 + (N - 1), "M(F+B+W) + (N-1)F");
            wp_sim sim;
            if (M < 2 * N - 1 || run(&x, true, &sim)) continue; /* fewer cannot fill the warm-up */
            for (int r = 0; r < N; r++) {
                double idle = inner_idle(&sim, r);
                EXPECT(fabs(idle) < 1e-9, "zb-h2 N=%d M=%d rank %d idles %g inside its block of work", N, M, r, idle);
            }
            sim_free(&sim);
            int want = 2 * N - 1 < M ? 2 * N - 1 : M;
            for (int r = 0; r < N; r++) {
                int p = peak_acts(WP_STRAT_ZBH2, N, M, N, false, r);
                EXPECT(p == want, "zb-h2 N=%d M=%d rank %d peak %d activation states, want min(2N-1, M) = %d", N, M, r, p,
                       want);
            }
            checks++;
        }
}

static void zbv(void) {
    for (int N = 1; N <= 8; N++)
        for (int mi = 0; mi < 4; mi++) {
            int M = (int[]){N, N + 1, 2 * N, 3 * N + 1}[mi];
            shape x = {WP_STRAT_ZBV, N, M, 2, false, 1, 1, 1};
            check_step(&x, 6.0 * M + (N - 1), "2M(F+B+W) + (N-1)F");
            wp_sim sim;
            /* with M < 2N the step is the same, but part of the fill sits inside rank r's block */
            if (M < 2 * N || run(&x, true, &sim)) continue;
            for (int r = 0; r < N; r++) {
                double idle = inner_idle(&sim, r);
                EXPECT(fabs(idle) < 1e-9, "zb-v N=%d M=%d rank %d idles %g inside its block of work", N, M, r, idle);
            }
            sim_free(&sim);
        }
    for (int N = 1; N <= 8; N++)
        for (int M = 1; M <= 2 * N + 1; M += N > 1 ? N - 1 : 1) {
            int want = 2 * (N < M ? N : M);
            for (int r = 0; r < N; r++) {
                int p = peak_acts(WP_STRAT_ZBV, N, M, 2 * N, false, r);
                EXPECT(p == want, "zb-v N=%d M=%d rank %d peak %d chunk states, want 2 min(N, M) = %d", N, M, r, p, want);
            }
            checks++;
        }
}

int main(void) {
    gpipe();
    interleaved();
    interleaved_traffic();
    zbh1();
    zbh2();
    zbv();
    printf("%d closed-form checks, %d failures\n", checks, check_failures());
    return check_failures() ? 1 : 0;
}
