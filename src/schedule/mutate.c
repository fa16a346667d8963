/* Mutations for the validator's tests (mutate.h). */
#include "mutate.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name, *expect;
} table[WP_MUT_COUNT] = {
    {"drop-send", "FIFO order|deadlock|never"},
    {"swap-version", "version @0"},
    {"double-gw", "a second time"},
    {"reorder-recv", "FIFO order|does not hold"},
    {"free-early", "freed at action"},
    {"drop-acc", "lacks micro-batch"},
    {"update-early", "before this rank's REDUCE"},
};

const char *mutation_name(wp_mutation m) { return m < WP_MUT_COUNT ? table[m].name : "?"; }
const char *mutation_expect(wp_mutation m) { return m < WP_MUT_COUNT ? table[m].expect : "?"; }

bool mutation_parse(const char *name, wp_mutation *m) {
    for (int i = 0; i < WP_MUT_COUNT; i++)
        if (strcmp(name, table[i].name) == 0) {
            *m = (wp_mutation)i;
            return true;
        }
    return false;
}

/* First action (rank-major) with op; -1 when none. */
static int find_op(const wp_schedule *s, int op, int *rank) {
    for (int r = 0; r < s->nranks; r++)
        for (int i = 0; i < s->rank[r].n; i++)
            if (s->rank[r].a[i].op == op) {
                *rank = r;
                return i;
            }
    return -1;
}

/* The one line of a mutation that finds no place in the schedule: bad input, as the choice is the user's. */
static wp_result nothing(const wp_schedule *s, wp_mutation m, char *err, size_t errlen) {
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s finds nothing to break in this %s schedule", mutation_name(m),
                   strategy_name(s->strategy));
}

/* Swaps the buffers of the first two RECVs from one peer on one channel; false when there are none. */
static bool reorder_recv(wp_schedule *s) {
    for (int r = 0; r < s->nranks; r++) {
        wp_action *a = s->rank[r].a;
        for (int i = 0; i < s->rank[r].n; i++) {
            if (a[i].op != WP_OP_RECV) continue;
            for (int j = i + 1; j < s->rank[r].n; j++)
                if (a[j].op == WP_OP_RECV && a[j].peer == a[i].peer && a[j].channel == a[i].channel &&
                    !buf_eq(a[j].buf, a[i].buf)) {
                    wp_buf t = a[i].buf;
                    a[i].buf = a[j].buf;
                    a[j].buf = t;
                    return true;
                }
        }
    }
    return false;
}

/* Move the FREE of the first weights a compute reads to just before that compute. */
static wp_result free_early(wp_schedule *s, char *err, size_t errlen) {
    for (int r = 0; r < s->nranks; r++) {
        wp_rank_prog *p = &s->rank[r];
        for (int i = 0; i < p->n; i++) {
            wp_action a = p->a[i];
            if (a.op != WP_OP_F && a.op != WP_OP_B && a.op != WP_OP_BW) continue;
            for (int j = i + 1; j < p->n; j++)
                if (p->a[j].op == WP_OP_FREE && buf_eq(p->a[j].buf, a.buf)) {
                    wp_action f = p->a[j];
                    sched_delete(s, r, j);
                    return sched_insert(s, r, i, f, err, errlen);
                }
        }
    }
    return nothing(s, WP_MUT_FREE_EARLY, err, errlen);
}

static wp_result update_early(wp_schedule *s, char *err, size_t errlen) {
    int r, i = find_op(s, WP_OP_UPDATE, &r);
    if (i < 0) return nothing(s, WP_MUT_UPDATE_EARLY, err, errlen);
    for (int j = i - 1; j >= 0; j--)
        if (s->rank[r].a[j].op == WP_OP_REDUCE) {
            wp_action u = s->rank[r].a[i];
            sched_delete(s, r, i);
            return sched_insert(s, r, j, u, err, errlen);
        }
    return nothing(s, WP_MUT_UPDATE_EARLY, err, errlen);
}

/* Breaks the schedule by m; "finds nothing to break" when the schedule offers no place for it. */
static wp_result apply(wp_schedule *s, wp_mutation m, char *err, size_t errlen) {
    int r, i;
    switch (m) {
    case WP_MUT_DROP_SEND:
        if ((i = find_op(s, WP_OP_SEND, &r)) < 0) return nothing(s, m, err, errlen);
        sched_delete(s, r, i);
        return 0;
    case WP_MUT_SWAP_VERSION:
        if ((i = find_op(s, WP_OP_F, &r)) < 0) return nothing(s, m, err, errlen);
        s->rank[r].a[i].buf.idx = 1;
        return 0;
    case WP_MUT_DOUBLE_GW: {
        int iw = find_op(s, WP_OP_W, &r), rb = 0;
        int ib = find_op(s, WP_OP_BW, &rb);
        if (iw < 0 && ib < 0) return nothing(s, m, err, errlen);
        if (iw < 0) i = ib, r = rb;
        else i = iw;
        return sched_insert(s, r, i + 1, s->rank[r].a[i], err, errlen);
    }
    case WP_MUT_REORDER_RECV: return reorder_recv(s) ? WP_OK : nothing(s, m, err, errlen);
    case WP_MUT_FREE_EARLY: return free_early(s, err, errlen);
    case WP_MUT_DROP_ACC:
        if ((i = find_op(s, WP_OP_ACC, &r)) < 0) return nothing(s, m, err, errlen);
        sched_delete(s, r, i);
        return 0;
    case WP_MUT_UPDATE_EARLY: return update_early(s, err, errlen);
    default: return nothing(s, m, err, errlen);
    }
}

wp_result sched_mutate(wp_schedule *s, wp_mutation m, char *err, size_t errlen) {
    if (m >= WP_MUT_COUNT) return wp_fail(WP_BAD_INPUT, err, errlen, "mutation %d is not one of mutate.h's %d", (int)m, WP_MUT_COUNT);
    return apply(s, m, err, errlen);
}
