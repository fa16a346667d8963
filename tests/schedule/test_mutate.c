/* The validator catches each invariant broken on purpose, with the right message: for every
 * strategy and N = 1..5 (M = 2N) each applicable mutation of mutate.h; a hand-written two-rank
 * schedule whose gradient is forked so that one contribution reaches the owner twice; the same
 * schedule with a cyclic wait (deadlock); and carried state that the end of the step does not
 * restore. */
#include <string.h>

#include "check.h"
#include "mutate.h"
#include "schedule.h"
#include "validate.h"

static int caught;

/* Whether msg contains one of the '|'-separated phrases. */
static bool mentions(const char *msg, const char *phrases) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", phrases);
    for (char *save = NULL, *p = strtok_r(buf, "|", &save); p; p = strtok_r(NULL, "|", &save))
        if (strstr(msg, p)) return true;
    return false;
}

static int validate(const wp_schedule *s, char *err, size_t len) {
    wp_run rep;
    int rc = sched_validate(s, NULL, &rep, err, len);
    run_free(&rep);
    return rc;
}

/* No ACC where no gradient travels (activation passing: weights and gradients stay home). */
static bool no_travelling_gradient(wp_strategy st) {
    return st == WP_STRAT_1F1B || st == WP_STRAT_GPIPE || st == WP_STRAT_I1F1B || st == WP_STRAT_ZBH1 ||
           st == WP_STRAT_ZBH2 || st == WP_STRAT_ZBV || st == WP_STRAT_SEQ1F1B;
}

static void mutations(wp_strategy st, int N) {
    int applied = 0;
    for (int m = 0; m < WP_MUT_COUNT; m++) {
        char err[1024] = "";
        wp_schedule s;
        if (schedule_generate(st, N, 2 * N, strategy_default_chunks(st, N, 0), NULL, &s, err, sizeof err)) {
            EXPECT(0, "%s N=%d: %s", strategy_name(st), N, err);
            return;
        }
        if (sched_mutate(&s, (wp_mutation)m, err, sizeof err) == 0) {
            applied++;
            int rc = validate(&s, err, sizeof err);
            bool ok = rc == 1 && mentions(err, mutation_expect((wp_mutation)m)) && strstr(err, "rank ");
            EXPECT(ok, "%s N=%d %s: rc %d, message '%s' lacks '%s'", strategy_name(st), N, mutation_name((wp_mutation)m),
                   rc, err, mutation_expect((wp_mutation)m));
            caught += ok;
        }
        sched_free(&s);
    }
    /* with two ranks or more every mutation finds a target, except: no ACC where no gradient
     * travels (activation passing), and no two different receives on one channel with two
     * weight-passing ranks */
    /* fsdp, weipipe-hier: slices give two different receives on one channel even with two ranks */
    bool two_kinds = N == 2 && st != WP_STRAT_FSDP && st != WP_STRAT_HIER;
    int want = N == 1 ? 4 : no_travelling_gradient(st) || two_kinds ? WP_MUT_COUNT - 1 : WP_MUT_COUNT;
    if (N == 1 && st == WP_STRAT_HIER) want = 5; /* weipipe-hier drains its step sum by ACC even alone */
    /* tawpipe on one node: a rank receives from a peer only the chunk that peer owns (weights) or
     * only its gradient of the chunk this rank owns, so no two receives from one peer on one
     * channel name different buffers */
    if (N > 1 && st == WP_STRAT_TAWPIPE) want = WP_MUT_COUNT - 1;
    EXPECT(applied == want, "%s N=%d: %d mutations applied, want %d", strategy_name(st), N, applied, want);
}

/* Rank 0 runs micro-batch 0 through both chunks; rank 1 owns chunk 1 and lends its weights. With
 * fork set, rank 0 sends its gradient of chunk 1 twice and rank 1 drains both copies. */
static void handmade(wp_schedule *s, bool fork, bool late_send) {
    char err[256];
    sched_init(s, WP_STRAT_NAIVE, 2, 1, 2, err, sizeof err);
    s->owner[0] = 0;
    s->owner[1] = 1;
    wp_action r0[] = {
        act_buf(WP_OP_LOAD, buf_w(0, 0, 0), 0),
        act_xfer(WP_OP_RECV, buf_w(1, 0, 0), 1, WP_SCH_WFWD, 0),
        act_compute(WP_OP_F, 0, 0, 0, false, 0),
        act_compute(WP_OP_F, 1, 0, 0, false, 0),
        act_buf(WP_OP_FREE, buf_a(0, 0), 0),
        act_buf(WP_OP_ZERO, buf_gw(1), 0),
        act_compute(WP_OP_BW, 1, 0, 0, false, 0),
        act_xfer(WP_OP_SEND, buf_gw(1), 1, WP_SCH_GRAD, 0),
        act_xfer(WP_OP_SEND, buf_gw(1), 1, WP_SCH_GRAD, 0),
        act_compute(WP_OP_BW, 0, 0, 0, true, 0),
        act_buf(WP_OP_FREE, buf_ga(0, 0), 0),
        act_buf(WP_OP_FREE, buf_gw(1), 0),
        act_buf(WP_OP_FREE, buf_w(1, 0, 0), 0),
        act_buf(WP_OP_FREE, buf_w(0, 0, 0), 0),
        act_chunk(WP_OP_REDUCE, 0, 0),
        act_chunk(WP_OP_UPDATE, 0, 0),
    };
    wp_action r1[] = {
        act_buf(WP_OP_LOAD, buf_w(1, 0, 0), 0),
        act_xfer(WP_OP_SEND, buf_w(1, 0, 0), 0, WP_SCH_WFWD, 0),
        act_buf(WP_OP_FREE, buf_w(1, 0, 0), 0),
        act_xfer(WP_OP_RECV, buf_gw(1), 0, WP_SCH_GRAD, 0),
        act_chunk(WP_OP_ACC, 1, 0),
        act_buf(WP_OP_FREE, buf_gw(1), 0),
        act_xfer(WP_OP_RECV, buf_gw(1), 0, WP_SCH_GRAD, 0),
        act_chunk(WP_OP_ACC, 1, 0),
        act_buf(WP_OP_FREE, buf_gw(1), 0),
        act_chunk(WP_OP_REDUCE, 0, 0),
        act_chunk(WP_OP_UPDATE, 1, 0),
    };
    for (size_t i = 0; i < sizeof r0 / sizeof r0[0]; i++)
        if (fork || i != 8) sched_push(s, 0, r0[i], err, sizeof err);
    for (size_t i = 0; i < sizeof r1 / sizeof r1[0]; i++) {
        if (late_send && (i == 1 || i == 2)) continue;
        if (fork || i < 6 || i > 8) sched_push(s, 1, r1[i], err, sizeof err);
        if (late_send && i == 4) { /* lend the weights only after draining the gradient they produce */
            sched_push(s, 1, r1[1], err, sizeof err);
            sched_push(s, 1, r1[2], err, sizeof err);
        }
    }
}

static void forked_gradient(void) {
    char err[1024] = "";
    wp_schedule s;
    handmade(&s, false, false);
    int rc = validate(&s, err, sizeof err);
    EXPECT(rc == 0, "hand-written schedule: %s", err);
    sched_free(&s);
    handmade(&s, true, false);
    rc = validate(&s, err, sizeof err);
    EXPECT(rc == 1 && strstr(err, "rank 1, action 7 (ACC(1))") && strstr(err, "micro-batch 0's contribution to the owner a second time"),
           "forked gradient: rc %d '%s'", rc, err);
    caught += rc == 1;
    sched_free(&s);
}

/* Rank 1 sends the weights rank 0 needs only after draining the gradient they would produce. */
static void cyclic_wait(void) {
    char err[1024] = "";
    wp_schedule s;
    handmade(&s, false, true);
    int rc = validate(&s, err, sizeof err);
    EXPECT(rc == 1 && strstr(err, "deadlock: rank 0, action 3 (F(1,0)) waits for W[1]@0 to arrive; rank 1, action 2 (ACC(1)) "
                                  "waits for GW[1] to arrive"), "cyclic wait: rc %d '%s'", rc, err);
    caught += rc == 1;
    sched_free(&s);
}

/* WZB2 carries the staged forward weights; without the LOAD that stages them, the second step
 * starts without them. */
static void broken_carry(void) {
    char err[1024] = "";
    wp_schedule s;
    schedule_generate(WP_STRAT_WZB2, 3, 3, 3, NULL, &s, err, sizeof err);
    int victim = -1;
    for (int r = 0; r < s.nranks && victim < 0; r++)
        if (s.rank[r].n_carry) victim = r;
    EXPECT(victim >= 0, "wzb2 carries nothing");
    if (victim >= 0) {
        wp_rank_prog *p = &s.rank[victim];
        EXPECT(p->a[p->n - 1].op == WP_OP_LOAD, "wzb2 rank %d does not end with the staging LOAD", victim);
        sched_delete(&s, victim, p->n - 1);
        int rc = validate(&s, err, sizeof err);
        EXPECT(rc == 1 && strstr(err, "does not hold") && strstr(err, "second step"), "broken carry: rc %d '%s'", rc, err);
        caught += rc == 1;
    }
    sched_free(&s);
}

int main(void) {
    for (int st = 0; st < WP_STRAT_COUNT; st++)
        for (int N = 1; N <= 5; N++) mutations((wp_strategy)st, N);
    forked_gradient();
    cyclic_wait();
    broken_carry();
    printf("%d broken schedules caught, %d failures\n", caught, check_failures());
    return check_failures() ? 1 : 0;
}
