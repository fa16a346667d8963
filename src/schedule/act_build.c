/* The activation-passing builder: compute order per rank -> complete action lists (act_build.h). */
#include "act_build.h"

#include <stdlib.h>
#include <string.h>

/* Position of an action in a rank's list: slot -1 is the start of the step, slot i (0..n-1)
 * compute i and what follows it, slot n the end; sub orders the actions of one slot. */
enum { SUB_LOAD = 0, SUB_COMPUTE = 0, SUB_FREE_SENT = 1, SUB_FREE_READ = 2, SUB_RECV = 3, SUB_SEND = 4,
       SUB_FREE_W = 5, SUB_REDUCE = 6, SUB_UPDATE = 7 };

typedef struct {
    int slot, sub, seq;
    wp_action a;
} ab_ev;

typedef struct {
    act_plan *p;
    int N, M, C;
    int *f_idx, *b_idx; /* [C*M]: index of F(c,mb) and of B/BW(c,mb) in their rank's list */
    double *t_end[WP_MAX_CHUNKS]; /* per rank and compute: when it ends with unit times */
    ab_ev *ev;
    int n_ev, cap_ev, seq;
    bool oom;
} builder;

void act_plan_init(act_plan *p, wp_schedule *s) {
    memset(p, 0, sizeof *p);
    p->s = s;
    for (int c = 0; c < s->nchunks; c++) s->owner[c] = c % s->nranks;
}

void act_add(act_plan *p, int rank, wp_op op, int chunk, int mb) {
    if (p->oom) return;
    if (p->n[rank] == p->cap[rank]) {
        int nc = p->cap[rank] ? 2 * p->cap[rank] : 64;
        ab_op *q = realloc(p->ops[rank], (size_t)nc * sizeof *q);
        if (!q) {
            p->oom = true;
            return;
        }
        p->ops[rank] = q;
        p->cap[rank] = nc;
    }
    p->ops[rank][p->n[rank]++] = (ab_op){(uint8_t)op, (int16_t)chunk, mb};
}

static void emit(builder *b, int slot, int sub, wp_action a) {
    if (b->oom) return;
    if (b->n_ev == b->cap_ev) {
        int nc = b->cap_ev ? 2 * b->cap_ev : 256;
        ab_ev *q = realloc(b->ev, (size_t)nc * sizeof *q);
        if (!q) {
            b->oom = true;
            return;
        }
        b->ev = q;
        b->cap_ev = nc;
    }
    a.turn = slot < 0 ? 0 : slot;
    b->ev[b->n_ev++] = (ab_ev){slot, sub, b->seq++, a};
}

static int cmp_ev(const void *x, const void *y) {
    const ab_ev *a = x, *b = y;
    if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
    if (a->sub != b->sub) return a->sub < b->sub ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static bool reads_input(const ab_op *o) { return o->op != WP_OP_W; }
static bool is_backward_input(const ab_op *o) { return o->op == WP_OP_B || o->op == WP_OP_BW; }

/* The buffer compute o reads from another chunk (A for F, GA for B/BW); false when none. */
static bool input_of(const builder *b, const ab_op *o, wp_buf *buf, int *src, int *ch) {
    if (o->op == WP_OP_F && o->chunk > 0) {
        *buf = buf_a(o->chunk - 1, o->mb);
        *src = act_holder(b->p->s, o->chunk - 1);
        *ch = WP_SCH_ACT;
        return true;
    }
    if (is_backward_input(o) && o->chunk < b->C - 1) {
        *buf = buf_ga(o->chunk, o->mb);
        *src = act_holder(b->p->s, o->chunk + 1);
        *ch = WP_SCH_ACTGRAD;
        return true;
    }
    return false;
}

/* The buffer compute o writes for another chunk; false when none. */
static bool output_of(const builder *b, const ab_op *o, wp_buf *buf, int *dst, int *ch) {
    if (o->op == WP_OP_F && o->chunk < b->C - 1) {
        *buf = buf_a(o->chunk, o->mb);
        *dst = act_holder(b->p->s, o->chunk + 1);
        *ch = WP_SCH_ACT;
        return true;
    }
    if (is_backward_input(o) && o->chunk > 0) {
        *buf = buf_ga(o->chunk - 1, o->mb);
        *dst = act_holder(b->p->s, o->chunk - 1);
        *ch = WP_SCH_ACTGRAD;
        return true;
    }
    return false;
}

/* Index tables and the placement check. */
static wp_result index_ops(builder *b, char *err, size_t errlen) {
    const size_t cm = (size_t)b->C * b->M;
    b->f_idx = malloc(cm * sizeof *b->f_idx);
    b->b_idx = malloc(cm * sizeof *b->b_idx);
    if (!b->f_idx || !b->b_idx) { return wp_fail(WP_FAILED, err, errlen, "schedule: out of memory"); }
    for (size_t i = 0; i < cm; i++) b->f_idx[i] = b->b_idx[i] = -1;
    for (int r = 0; r < b->N; r++)
        for (int i = 0; i < b->p->n[r]; i++) {
            const ab_op *o = &b->p->ops[r][i];
            if (o->chunk < 0 || o->chunk >= b->C || o->mb < 0 || o->mb >= b->M || act_holder(b->p->s, o->chunk) != r) { return wp_fail(WP_FAILED, err, errlen, "generator: %s(%d,%d) placed on rank %d, which does not hold that chunk",
                         op_name(o->op), o->chunk, o->mb, r); }
            size_t k = (size_t)o->chunk * b->M + o->mb;
            if (o->op == WP_OP_F) b->f_idx[k] = i;
            if (is_backward_input(o)) b->b_idx[k] = i;
        }
    return 0;
}

/* ---- unit timing: each compute starts when its rank is free and its inputs exist ---- */

static double unit_time(int op) { return op == WP_OP_BW ? 2 : 1; }

/* Raise *t to the end of compute idx of rank r; false while that is not known yet. */
static bool after(const builder *b, int r, int idx, double *t) {
    if (idx < 0 || b->t_end[r][idx] < 0) return false;
    if (b->t_end[r][idx] > *t) *t = b->t_end[r][idx];
    return true;
}

/* When the producer of what compute o needs has ended; -1 while that is not known yet. */
static double ready_at(const builder *b, const ab_op *o) {
    const int M = b->M;
    const wp_schedule *s = b->p->s;
    size_t k = (size_t)o->chunk * M + o->mb;
    double t = 0;
    bool known = true;
    if (o->op == WP_OP_F && o->chunk > 0)
        known = known && after(b, act_holder(s, o->chunk - 1), b->f_idx[k - M], &t);
    if (is_backward_input(o) && o->chunk < b->C - 1)
        known = known && after(b, act_holder(s, o->chunk + 1), b->b_idx[k + M], &t);
    if (o->op == WP_OP_W) known = known && after(b, act_holder(s, o->chunk), b->b_idx[k], &t);
    return known ? t : -1;
}

/* Times every compute; 1 with a reason when the order waits in a circle. */
static wp_result unit_timing(builder *b, char *err, size_t errlen) {
    int next[WP_MAX_CHUNKS] = {0}, left = 0;
    for (int r = 0; r < b->N; r++) {
        if (!(b->t_end[r] = malloc(((size_t)b->p->n[r] + 1) * sizeof(double)))) { return wp_fail(WP_FAILED, err, errlen, "schedule: out of memory"); }
        for (int i = 0; i < b->p->n[r]; i++) b->t_end[r][i] = -1;
        left += b->p->n[r];
    }
    while (left > 0) {
        int moved = 0;
        for (int r = 0; r < b->N; r++)
            for (; next[r] < b->p->n[r]; next[r]++, moved++) {
                const ab_op *o = &b->p->ops[r][next[r]];
                double t = ready_at(b, o), free_at = next[r] ? b->t_end[r][next[r] - 1] : 0;
                if (t < 0) break;
                b->t_end[r][next[r]] = (t > free_at ? t : free_at) + unit_time(o->op);
            }
        if (!moved) {
            int r = 0;
            while (next[r] == b->p->n[r]) r++;
            const ab_op *o = &b->p->ops[r][next[r]];
            return wp_fail(WP_FAILED, err, errlen, "generator: rank %d waits at %s(%d,%d) for an input that is never produced before it",
                     r, op_name(o->op), o->chunk, o->mb);
        }
        left -= moved;
    }
    return 0;
}

/* The last slot of rank r posted by time t (slot s is posted when compute s ends; -1 at 0). */
static int slot_by(const builder *b, int r, double t) {
    int s = -1;
    while (s + 1 < b->p->n[r] && b->t_end[r][s + 1] <= t) s++;
    return s;
}

/* Index (in rank r's list) of the compute that reads buf; -1 when none. */
static int consumer(const builder *b, wp_buf buf) {
    size_t k = (size_t)buf.chunk * b->M + buf.idx;
    return buf.kind == WP_BUF_A ? b->f_idx[k + b->M] : b->b_idx[k];
}

/* The RECVs of rank r from rank q on channel ch, in q's send order (act_build.h). */
static int receives(builder *b, int r, int q, int ch) {
    int n = 0, *cons = malloc((size_t)b->p->n[q] * sizeof *cons), *sent_by = malloc((size_t)b->p->n[q] * sizeof *sent_by);
    wp_buf *items = malloc((size_t)b->p->n[q] * sizeof *items);
    if (!cons || !items || !sent_by) {
        free(cons);
        free(items);
        free(sent_by);
        return 1;
    }
    for (int i = 0; i < b->p->n[q]; i++) {
        wp_buf buf;
        int dst, c;
        if (output_of(b, &b->p->ops[q][i], &buf, &dst, &c) && dst == r && c == ch) {
            items[n] = buf;
            sent_by[n] = slot_by(b, r, b->t_end[q][i]);
            cons[n++] = consumer(b, buf);
        }
    }
    int limit = b->p->n[r], prev = -1;
    int *pos = cons; /* overwritten from the back: the suffix minimum needs only later entries */
    for (int k = n - 1; k >= 0; k--) {
        int c = cons[k] < 0 ? b->p->n[r] : cons[k];
        int before = k > 0 ? (cons[k - 1] < 0 ? b->p->n[r] : cons[k - 1]) : -1;
        if (c - 1 < limit) limit = c - 1;
        if (sent_by[k] < before) before = sent_by[k];
        pos[k] = before < limit ? before : limit;
    }
    for (int k = 0; k < n; k++) {
        if (pos[k] < prev) pos[k] = prev;
        prev = pos[k];
        emit(b, pos[k], SUB_RECV, act_xfer(WP_OP_RECV, items[k], q, ch, 0));
    }
    free(cons);
    free(items);
    free(sent_by);
    return 0;
}

static void computes(builder *b, int r) {
    const int n = b->p->n[r];
    wp_buf sent[2];
    int n_sent = 0;
    for (int i = 0; i < n; i++) {
        const ab_op *o = &b->p->ops[r][i];
        emit(b, i, SUB_COMPUTE, act_compute(o->op, o->chunk, o->mb, WP_LANE_F, o->op == WP_OP_W || o->op == WP_OP_BW, i));
        for (int k = 0; k < n_sent; k++) emit(b, i, SUB_FREE_SENT, act_buf(WP_OP_FREE, sent[k], i));
        n_sent = 0;
        wp_buf buf;
        int peer, ch;
        if (reads_input(o) && input_of(b, o, &buf, &peer, &ch)) emit(b, i, SUB_FREE_READ, act_buf(WP_OP_FREE, buf, i));
        if (output_of(b, o, &buf, &peer, &ch) && peer != r) {
            emit(b, i, SUB_SEND, act_xfer(WP_OP_SEND, buf, peer, ch, i));
            sent[n_sent++] = buf;
        }
    }
    for (int k = 0; k < n_sent; k++) emit(b, n, SUB_FREE_SENT, act_buf(WP_OP_FREE, sent[k], n));
}

static void weights(builder *b, int r) {
    const int n = b->p->n[r];
    for (int c = 0; c < b->C; c++) {
        if (act_holder(b->p->s, c) != r) continue;
        emit(b, -1, SUB_LOAD, act_buf(WP_OP_LOAD, buf_w(c, 0, WP_LANE_F), 0));
        emit(b, n, SUB_FREE_W, act_buf(WP_OP_FREE, buf_w(c, 0, WP_LANE_F), n));
        emit(b, n, SUB_UPDATE, act_chunk(WP_OP_UPDATE, c, n));
    }
    emit(b, n, SUB_REDUCE, act_chunk(WP_OP_REDUCE, 0, n));
}

static wp_result build_rank(builder *b, int r, char *err, size_t errlen) {
    b->n_ev = 0;
    computes(b, r);
    weights(b, r);
    for (int q = 0; q < b->N; q++)
        if (q != r && (receives(b, r, q, WP_SCH_ACT) || receives(b, r, q, WP_SCH_ACTGRAD))) return 1;
    if (b->oom) return 1;
    qsort(b->ev, (size_t)b->n_ev, sizeof *b->ev, cmp_ev);
    for (int i = 0; i < b->n_ev; i++)
        if (sched_push(b->p->s, r, b->ev[i].a, err, errlen)) return 1;
    return 0;
}

wp_result act_build(act_plan *p, char *err, size_t errlen) {
    builder b = {.p = p, .N = p->s->nranks, .M = p->s->nmb, .C = p->s->nchunks};
    int rc = 1;
    snprintf(err, errlen, "schedule: out of memory");
    if (p->oom || index_ops(&b, err, errlen) || unit_timing(&b, err, errlen)) goto out;
    snprintf(err, errlen, "schedule: out of memory");
    for (int r = 0; r < b.N; r++)
        if (build_rank(&b, r, err, errlen)) goto out;
    rc = 0;
out:
    free(b.f_idx);
    free(b.b_idx);
    free(b.ev);
    for (int r = 0; r < WP_MAX_CHUNKS; r++) {
        free(p->ops[r]);
        free(b.t_end[r]);
    }
    memset(p->ops, 0, sizeof p->ops);
    return rc;
}
