/* Every strategy generates lists that validate for N = 1..8 and M in {N, 2N, 3N} (the
 * activation-passing ones also M = 1, 3, 5; interleaved-1f1b with v = 1, 2, 3 chunks per rank in
 * both loop orders), over two consecutive steps; the reports have the shapes the strategies
 * promise; bad shapes are refused with a reason. */
#include <string.h>

#include "check.h"
#include "schedule.h"
#include "validate.h"

static int validated;

/* Activation states and buffers of the activation-passing baselines (act_build.h): weights never
 * move, no travelling gradient; the activation states peak where each schedule says. */
static bool check_baseline(const wp_schedule *s, const wp_run *rep, bool breadth) {
    const int N = s->nranks, M = s->nmb, v = s->nchunks / N;
    int want = -1;
    switch (s->strategy) {
    case WP_STRAT_GPIPE: want = M; break;
    case WP_STRAT_ZBH1: want = N < M ? N : M; break;
    case WP_STRAT_ZBH2: want = 2 * N - 1 < M ? 2 * N - 1 : M; break;
    case WP_STRAT_ZBV: want = 2 * (N < M ? N : M); break; /* chunk states, each half a stage */
    case WP_STRAT_I1F1B: break;
    case WP_STRAT_SEQ1F1B: break;
    default: return false;
    }
    for (int r = 0; r < N; r++) {
        const wp_rank_report *q = &rep->rank[r];
        if (s->strategy == WP_STRAT_I1F1B) { /* Megatron's warm-up, plus the steady phase's one forward */
            int g = breadth ? M : N, warm = v == 1 ? N - r - 1 : 2 * (N - r - 1) + (v - 1) * g;
            want = warm + 1 < v * M ? warm + 1 : v * M;
        }
        if (s->strategy == WP_STRAT_SEQ1F1B) { /* 1F1B's warm-up in segments, plus k-1: M counts units */
            int k = s->nseg > 1 ? s->nseg : 1;
            want = N - r - 1 + k < M ? N - r - 1 + k : M;
        }
        EXPECT(q->peak_acts == want, "%s N=%d M=%d v=%d%s rank %d peak activation states %d, want %d",
               strategy_name(s->strategy), N, M, v, breadth ? " breadth-first" : "", r, q->peak_acts, want);
        EXPECT(q->peak_n[WP_BUF_W] == v && q->peak_n[WP_BUF_GW] == 0, "%s rank %d holds %d W, %d GW",
               strategy_name(s->strategy), r, q->peak_n[WP_BUF_W], q->peak_n[WP_BUF_GW]);
        /* one received ahead per stream, one being read, one sent; interleaved-1f1b also holds what
         * the wrap (rank N-1 -> 0, and back) delivers before its chunk's turn comes (a whole chunk's
         * outputs breadth-first), never more than its micro-batches in flight */
        int a = q->peak_n[WP_BUF_A], ga = q->peak_n[WP_BUF_GA];
        if (s->strategy == WP_STRAT_ZBV) /* the same per leg: two streams in, two out */
            EXPECT(a <= 6 && ga <= 6, "zb-v N=%d M=%d rank %d A %d GA %d", N, M, r, a, ga);
        else if (s->strategy != WP_STRAT_I1F1B)
            EXPECT(a <= 3 && ga <= 3, "%s N=%d rank %d A %d GA %d", strategy_name(s->strategy), N, r, a, ga);
        else
            EXPECT((breadth || a <= 3) && a <= q->peak_acts + 3 && ga <= q->peak_acts + 3,
                   "%s N=%d M=%d v=%d%s rank %d A %d GA %d, %d in flight", strategy_name(s->strategy), N, M, v,
                   breadth ? " breadth-first" : "", r, a, ga, q->peak_acts);
    }
    return true;
}

static void check_report(const wp_schedule *s, const wp_run *rep, bool owner_last, bool breadth) {
    const int N = s->nranks;
    if (check_baseline(s, rep, breadth)) return;
    for (int r = 0; r < N; r++) {
        const wp_rank_report *q = &rep->rank[r];
        if (N == 1) EXPECT(q->n_sent == 0 && q->n_recv == 0, "%s N=1 transfers %d", strategy_name(s->strategy), q->n_sent);
        if (s->strategy == WP_STRAT_1F1B) {
            /* weights never move; one activation in and one out at a time, plus one prefetched */
            EXPECT(q->peak_n[WP_BUF_W] == 1 && q->peak_n[WP_BUF_GW] == 0, "1f1b rank %d holds %d W, %d GW", r,
                   q->peak_n[WP_BUF_W], q->peak_n[WP_BUF_GW]);
            int warm = N - r < s->nmb ? N - r : s->nmb;
            EXPECT(q->peak_acts == warm, "1f1b N=%d M=%d rank %d peak activations %d, want %d", N, s->nmb, r,
                   q->peak_acts, warm);
        } else if (owner_last && r == N - 1) {
            /* the paper's WZB2: the last rank stages every chunk's next version for the next step */
            EXPECT(q->peak_n[WP_BUF_W] >= N && q->peak_n[WP_BUF_W] <= N + 4, "wzb2 (owner last) N=%d holds %d W", N,
                   q->peak_n[WP_BUF_W]);
        } else if (s->strategy == WP_STRAT_HIER) {
            /* the two streams' buffers, the holder's two lanes kept all step, and the slices a
             * rank gathered out for chunks its ring has not brought yet (gen_hier.c) */
            EXPECT(q->peak_n[WP_BUF_W] <= 4 + 2 + s->nchunks - 1, "weipipe-hier N=%d rank %d holds %d weight buffers",
                   N, r, q->peak_n[WP_BUF_W]);
        } else {
            /* double-buffered: per weight stream the turn's chunk and the next one */
            EXPECT(q->peak_n[WP_BUF_W] <= 4, "%s N=%d rank %d holds %d weight buffers", strategy_name(s->strategy), N, r,
                   q->peak_n[WP_BUF_W]);
            EXPECT(q->peak_n[WP_BUF_A] <= 2 && q->peak_n[WP_BUF_GA] <= 2, "%s rank %d A %d GA %d",
                   strategy_name(s->strategy), r, q->peak_n[WP_BUF_A], q->peak_n[WP_BUF_GA]);
        }
    }
}

static void one_gen(wp_strategy st, int N, int M, int C, wp_gen_opts g) {
    char err[1024];
    wp_schedule s;
    bool owner_last = g.wzb2_owner_last, breadth = g.i1f1b_breadth_first;
    int rc = schedule_generate(st, N, M, C, &g, &s, err, sizeof err);
    EXPECT(rc == 0, "%s N=%d M=%d C=%d: generate: %s", strategy_name(st), N, M, C, err);
    if (rc) return;
    wp_run rep;
    rc = sched_validate(&s, NULL, &rep, err, sizeof err);
    EXPECT(rc == 0, "%s N=%d M=%d C=%d%s%s: %s", strategy_name(st), N, M, C, owner_last ? " (owner last)" : "",
           breadth ? " (breadth-first)" : "", err);
    if (!rc) {
        check_report(&s, &rep, owner_last, breadth);
        validated++;
    }
    run_free(&rep);
    sched_free(&s);
}

static void one(wp_strategy st, int N, int M, bool owner_last) {
    one_gen(st, N, M, strategy_default_chunks(st, N, 0), (wp_gen_opts){.wzb2_owner_last = owner_last});
}

static bool any_m(wp_strategy st) {
    return st == WP_STRAT_1F1B || st == WP_STRAT_GPIPE || st == WP_STRAT_ZBH1 || st == WP_STRAT_ZBH2 ||
           st == WP_STRAT_ZBV;
}

static void bad_shapes(void) {
    static const struct {
        wp_strategy st;
        int N, M, C;
        const char *phrase;
    } cases[] = {
        {WP_STRAT_INTERLEAVE, 4, 6, 4, "multiple of --nranks 4 (e.g. 4 or 8)"},
        {WP_STRAT_WZB1, 3, 2, 3, "multiple of --nranks 3 (e.g. 3 or 6)"},
        {WP_STRAT_NAIVE, 0, 4, 0, "--nranks: 0"},
        {WP_STRAT_1F1B, 2, 0, 2, "--num-microbatches: 0"},
        {WP_STRAT_1F1B, 4, 4, 8, "one chunk per rank (4), not 8"},
        {WP_STRAT_WZB2, 2, 4, 1, "one chunk per rank (2), not 1"},
        {WP_STRAT_GPIPE, 3, 5, 6, "one chunk per rank (3), not 6"},
        {WP_STRAT_ZBH2, 4, 4, 2, "one chunk per rank (4), not 2"},
        {WP_STRAT_I1F1B, 4, 8, 6, "multiple of --nranks 4 (v chunks per rank, e.g. 8), not 6"},
        {WP_STRAT_I1F1B, 4, 8, 2, "multiple of --nranks 4 (v chunks per rank, e.g. 8), not 2"},
        {WP_STRAT_ZBV, 4, 8, 12, "zb-v needs two chunks per rank (8), not 12"},
        {WP_STRAT_ZBV, 4, 8, 6, "multiple of --nranks 4"},
        {WP_STRAT_I1F1B, 3, 7, 6, "depth-first needs a multiple of --nranks 3 (e.g. 6 or 9), not 7"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        wp_schedule s;
        int rc = schedule_generate(cases[i].st, cases[i].N, cases[i].M, cases[i].C, NULL, &s, err, sizeof err);
        EXPECT(rc == 2 && strstr(err, cases[i].phrase), "case %zu: rc %d, '%s' lacks '%s'", i, rc, err, cases[i].phrase);
        if (rc == 0) sched_free(&s);
    }
}

int main(void) {
    for (int st = 0; st < WP_STRAT_COUNT; st++)
        for (int N = 1; N <= 8; N++)
            for (int k = 1; k <= 3; k++) one((wp_strategy)st, N, k * N, false);
    for (int st = 0; st < WP_STRAT_COUNT; st++)
        for (int N = 1; N <= 8 && any_m((wp_strategy)st); N++)
            for (int M = 1; M <= 5; M += 2) one((wp_strategy)st, N, M, false);
    for (int N = 1; N <= 8; N++)
        for (int v = 1; v <= 3; v++)
            for (int bf = 0; bf < 2; bf++)
                for (int M = bf ? 1 : N; M <= 2 * N + bf; M += bf ? (N > 2 ? N - 1 : 1) : N)
                    one_gen(WP_STRAT_I1F1B, N, M, v * N, (wp_gen_opts){.i1f1b_breadth_first = bf});
    for (int N = 1; N <= 8; N++) one(WP_STRAT_WZB2, N, 2 * N, true);
    bad_shapes();
    printf("%d schedules validated, %d failures\n", validated, check_failures());
    return check_failures() ? 1 : 0;
}
