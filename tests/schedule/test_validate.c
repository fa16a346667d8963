/* Every strategy generates lists that validate for N = 1..8 and M in {N, 2N, 3N} (1f1b also
 * M = 1, 3, 5), over two consecutive steps; the reports have the shapes the strategies promise;
 * bad shapes are refused with a reason. */
#include <string.h>

#include "schedule/schedule.h"
#include "schedule/validate.h"
#include "st.h"

static int validated;

static void check_report(const wp_schedule *s, const wp_run *rep, bool owner_last) {
    const int N = s->nranks;
    for (int r = 0; r < N; r++) {
        const wp_rank_report *q = &rep->rank[r];
        if (N == 1) CHECK(q->n_sent == 0 && q->n_recv == 0, "%s N=1 transfers %d", strategy_name(s->strategy), q->n_sent);
        if (s->strategy == WP_STRAT_1F1B) {
            /* weights never move; one activation in and one out at a time, plus one prefetched */
            CHECK(q->peak_n[WP_BUF_W] == 1 && q->peak_n[WP_BUF_GW] == 0, "1f1b rank %d holds %d W, %d GW", r,
                  q->peak_n[WP_BUF_W], q->peak_n[WP_BUF_GW]);
            int warm = N - r < s->nmb ? N - r : s->nmb;
            CHECK(q->peak_acts == warm, "1f1b N=%d M=%d rank %d peak activations %d, want %d", N, s->nmb, r,
                  q->peak_acts, warm);
        } else if (owner_last && r == N - 1) {
            /* the paper's WZB2: the last rank stages every chunk's next version for the next step */
            CHECK(q->peak_n[WP_BUF_W] >= N && q->peak_n[WP_BUF_W] <= N + 4, "wzb2 (owner last) N=%d holds %d W", N,
                  q->peak_n[WP_BUF_W]);
        } else {
            /* double-buffered: per weight stream the turn's chunk and the next one */
            CHECK(q->peak_n[WP_BUF_W] <= 4, "%s N=%d rank %d holds %d weight buffers", strategy_name(s->strategy), N, r,
                  q->peak_n[WP_BUF_W]);
            CHECK(q->peak_n[WP_BUF_A] <= 2 && q->peak_n[WP_BUF_GA] <= 2, "%s rank %d A %d GA %d",
                  strategy_name(s->strategy), r, q->peak_n[WP_BUF_A], q->peak_n[WP_BUF_GA]);
        }
    }
}

static void one(wp_strategy st, int N, int M, bool owner_last) {
    char err[1024];
    wp_schedule s;
    wp_gen_opts g = {.wzb2_owner_last = owner_last};
    int rc = schedule_generate(st, N, M, N, &g, &s, err, sizeof err);
    CHECK(rc == 0, "%s N=%d M=%d: generate: %s", strategy_name(st), N, M, err);
    if (rc) return;
    wp_run rep;
    rc = sched_validate(&s, NULL, &rep, err, sizeof err);
    CHECK(rc == 0, "%s N=%d M=%d%s: %s", strategy_name(st), N, M, owner_last ? " (owner last)" : "", err);
    if (!rc) {
        check_report(&s, &rep, owner_last);
        validated++;
    }
    run_free(&rep);
    sched_free(&s);
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
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        wp_schedule s;
        int rc = schedule_generate(cases[i].st, cases[i].N, cases[i].M, cases[i].C, NULL, &s, err, sizeof err);
        CHECK(rc == 2 && strstr(err, cases[i].phrase), "case %zu: rc %d, '%s' lacks '%s'", i, rc, err, cases[i].phrase);
        if (rc == 0) sched_free(&s);
    }
}

int main(void) {
    for (int st = 0; st < WP_STRAT_COUNT; st++)
        for (int N = 1; N <= 8; N++)
            for (int k = 1; k <= 3; k++) one((wp_strategy)st, N, k * N, false);
    for (int N = 1; N <= 8; N++)
        for (int M = 1; M <= 5; M += 2) one(WP_STRAT_1F1B, N, M, false);
    for (int N = 1; N <= 8; N++) one(WP_STRAT_WZB2, N, 2 * N, true);
    bad_shapes();
    printf("%d schedules validated, %d failures\n", validated, st_failures);
    return st_failures ? 1 : 0;
}
