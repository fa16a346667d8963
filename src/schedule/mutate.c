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

static int reorder_recv(wp_schedule *s) {
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
                    return 0;
                }
        }
    }
    return -1;
}

/* Move the FREE of the first weights a compute reads to just before that compute. -1 when there
 * is none; else sched_insert's code. */
static int free_early(wp_schedule *s, char *err, size_t errlen) {
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
    return -1;
}

static int update_early(wp_schedule *s, char *err, size_t errlen) {
    int r, i = find_op(s, WP_OP_UPDATE, &r);
    if (i < 0) return -1;
    for (int j = i - 1; j >= 0; j--)
        if (s->rank[r].a[j].op == WP_OP_REDUCE) {
            wp_action u = s->rank[r].a[i];
            sched_delete(s, r, i);
            return sched_insert(s, r, j, u, err, errlen);
        }
    return -1;
}

/* -1 when the schedule offers no place for m; else 0 or sched_insert's code. */
static int apply(wp_schedule *s, wp_mutation m, char *err, size_t errlen) {
    int r, i;
    switch (m) {
    case WP_MUT_DROP_SEND:
        if ((i = find_op(s, WP_OP_SEND, &r)) < 0) return -1;
        sched_delete(s, r, i);
        return 0;
    case WP_MUT_SWAP_VERSION:
        if ((i = find_op(s, WP_OP_F, &r)) < 0) return -1;
        s->rank[r].a[i].buf.idx = 1;
        return 0;
    case WP_MUT_DOUBLE_GW: {
        int iw = find_op(s, WP_OP_W, &r), rb = 0;
        int ib = find_op(s, WP_OP_BW, &rb);
        if (iw < 0 && ib < 0) return -1;
        if (iw < 0) i = ib, r = rb;
        else i = iw;
        return sched_insert(s, r, i + 1, s->rank[r].a[i], err, errlen);
    }
    case WP_MUT_REORDER_RECV: return reorder_recv(s);
    case WP_MUT_FREE_EARLY: return free_early(s, err, errlen);
    case WP_MUT_DROP_ACC:
        if ((i = find_op(s, WP_OP_ACC, &r)) < 0) return -1;
        sched_delete(s, r, i);
        return 0;
    case WP_MUT_UPDATE_EARLY: return update_early(s, err, errlen);
    default: return -1;
    }
}

int sched_mutate(wp_schedule *s, wp_mutation m, char *err, size_t errlen) {
    if (m >= WP_MUT_COUNT) {
        snprintf(err, errlen, "mutation %d is not one of mutate.h's %d", (int)m, WP_MUT_COUNT);
        return 2;
    }
    int rc = apply(s, m, err, errlen);
    if (rc >= 0) return rc;
    snprintf(err, errlen, "%s finds nothing to break in this %s schedule", mutation_name(m),
             strategy_name(s->strategy));
    return 2;
}
