/* The ring builder: compute placement per (rank, turn) -> complete action lists (ring_build.h). */
#include "ring_build.h"

#include <stdlib.h>
#include <string.h>

enum { ST_WF = 0, ST_WB = 1, ST_GW = 2, ST_GWRET = 3 }; /* sort keys of the streams */

typedef struct {
    int rank, turn, slot, stream, chunk, seq;
    wp_action a;
} rb_ev;

typedef struct {
    ring_plan *p;
    char *err; /* holds "schedule: out of memory" while the lists are built */
    size_t errlen;
    int N, C;
    rb_ev *ev;
    int n_ev, cap_ev, seq;
    bool oom;
    int *need[3][WP_MAX_CHUNKS]; /* sorted turns at which stream s needs chunk c */
    int n_need[3][WP_MAX_CHUNKS], cap_need[3][WP_MAX_CHUNKS];
    bool staged[WP_MAX_CHUNKS];
} builder;

static int mod(int a, int n) {
    int r = a % n;
    return r < 0 ? r + n : r;
}

int ring_pos(int lane, int nranks, int chunk, int turn) {
    return lane == WP_LANE_F ? mod(turn - chunk, nranks) : mod(turn + chunk + 1, nranks);
}

void ring_plan_init(ring_plan *p, wp_schedule *s, int gw_lane, bool stage) {
    memset(p, 0, sizeof *p);
    p->s = s;
    p->gw_lane = gw_lane;
    p->stage = stage;
    for (int c = 0; c < WP_MAX_CHUNKS; c++) {
        p->offset[WP_RING_WF][c] = -c;
        p->offset[WP_RING_WB][c] = c + 1;
        p->offset[WP_RING_GW][c] = gw_lane == WP_LANE_F ? -c : c + 1;
    }
}

wp_result ring_add(ring_plan *p, int rank, int turn, wp_op op, int chunk, int mb, char *err, size_t errlen) {
    if (p->n_ops == p->cap_ops) {
        int nc = p->cap_ops ? 2 * p->cap_ops : 256;
        rb_op *q = realloc(p->ops, (size_t)nc * sizeof *q);
        if (!q) { return wp_fail(WP_FAILED, err, errlen, "schedule: out of memory"); }
        p->ops = q;
        p->cap_ops = nc;
    }
    p->ops[p->n_ops] = (rb_op){rank, turn, p->n_ops, (uint8_t)op, (int16_t)chunk, mb};
    p->n_ops++;
    return 0;
}

/* ST_WF, ST_WB and ST_GW are WP_RING_WF, WP_RING_WB and WP_RING_GW. */
static int pos(const builder *b, int st, int c, int t) { return mod(t + b->p->offset[st][c], b->N); }

static void emit(builder *b, int rank, int turn, int slot, int stream, int chunk, wp_action a) {
    if (b->oom) return;
    if (b->n_ev == b->cap_ev) {
        int nc = b->cap_ev ? 2 * b->cap_ev : 1024;
        rb_ev *q = realloc(b->ev, (size_t)nc * sizeof *q);
        if (!q) {
            b->oom = true;
            return;
        }
        b->ev = q;
        b->cap_ev = nc;
    }
    a.turn = turn;
    b->ev[b->n_ev++] = (rb_ev){rank, turn, slot, stream, chunk, b->seq++, a};
}

static void add_need(builder *b, int st, int c, int t) {
    int *n = &b->n_need[st][c], *cap = &b->cap_need[st][c];
    if (*n && b->need[st][c][*n - 1] == t) return;
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 16;
        int *q = realloc(b->need[st][c], (size_t)nc * sizeof *q);
        if (!q) {
            b->oom = true;
            return;
        }
        b->need[st][c] = q;
        *cap = nc;
    }
    b->need[st][c][(*n)++] = t;
}

static int cmp_op(const void *x, const void *y) {
    const rb_op *a = x, *b = y;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    if (a->turn != b->turn) return a->turn < b->turn ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int cmp_turn(const void *x, const void *y) {
    int a = *(const int *)x, b = *(const int *)y;
    return a < b ? -1 : a > b;
}

static int cmp_ev(const void *x, const void *y) {
    const rb_ev *a = x, *b = y;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    if (a->turn != b->turn) return a->turn < b->turn ? -1 : 1;
    if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
    if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
    if (a->chunk != b->chunk) return a->chunk < b->chunk ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Which stream an op reads from; -1 when it reads none. */
static int op_stream(const builder *b, const rb_op *o, bool gradient) {
    if (gradient) {
        bool writes_gw = o->op == WP_OP_W || o->op == WP_OP_BW;
        return writes_gw && (b->p->held || b->p->s->owner[o->chunk] != o->rank) ? ST_GW : -1;
    }
    if (o->op == WP_OP_F) return ST_WF;
    if (o->op == WP_OP_B || o->op == WP_OP_BW) return ST_WB;
    return -1;
}

static wp_result collect_needs(builder *b, char *err, size_t errlen) {
    static const char *const what[3] = {"forward-weights", "backward-weights", "gradient"};
    for (int i = 0; i < b->p->n_ops; i++) {
        const rb_op *o = &b->p->ops[i];
        for (int g = 0; g < 2; g++) {
            int st = op_stream(b, o, g);
            if (st < 0) continue;
            int at = pos(b, st, o->chunk, o->turn);
            if (at != o->rank) { return wp_fail(WP_FAILED, err, errlen, "generator: %s(%d,%d) placed on rank %d in turn %d, but the %s stream holds "
                         "chunk %d at rank %d then", op_name(o->op), o->chunk, o->mb, o->rank, o->turn, what[st],
                         o->chunk, at); }
            add_need(b, st, o->chunk, o->turn);
        }
    }
    for (int st = 0; st < 3; st++)
        for (int c = 0; c < b->C; c++)
            if (b->n_need[st][c]) qsort(b->need[st][c], (size_t)b->n_need[st][c], sizeof(int), cmp_turn);
    return b->oom ? 1 : 0;
}

/* A weights element of stream st from turn ts (at the owner) to te. */
static void weights_segment(builder *b, int st, int c, int ts, int te, bool carried, bool first) {
    wp_buf w = buf_w(c, 0, st);
    int ch = st == ST_WF ? WP_SCH_WFWD : WP_SCH_WBWD, owner = b->p->s->owner[c];
    bool held = b->p->held;
    if (held) { /* the owner's copy: lane F is there, lane B is made once; it is never freed here */
        if (first && st == ST_WB) emit(b, owner, ts, 2, st, c, act_buf(WP_OP_DUP, w, ts));
    } else if (carried) {
        if (sched_push_carry(b->p->s, pos(b, st, c, ts), w, b->err, b->errlen)) b->oom = true;
        b->staged[c] = true;
    } else {
        emit(b, pos(b, st, c, ts), ts, 2, st, c, act_buf(WP_OP_LOAD, w, ts));
    }
    for (int t = ts; t < te; t++) {
        int from = pos(b, st, c, t), to = pos(b, st, c, t + 1);
        if (from == to) continue; /* one rank: the element stays */
        emit(b, from, t, 3, st, c, act_xfer(WP_OP_SEND, w, to, ch, t));
        emit(b, to, t, 1, st, c, act_xfer(WP_OP_RECV, w, from, ch, t));
        if (!held || from != owner) emit(b, from, t, 8, st, c, act_buf(WP_OP_FREE, w, t));
    }
    if (!held || pos(b, st, c, te) != owner) emit(b, pos(b, st, c, te), te, 8, st, c, act_buf(WP_OP_FREE, w, te));
}

static void weights_stream(builder *b, int st, int c) {
    const int *need = b->need[st][c], n = b->n_need[st][c], owner = b->p->s->owner[c];
    bool first = true;
    for (int i = 0; i < n;) {
        int te = need[i++];
        int ts = b->N == 1 ? te : te - mod(pos(b, st, c, te) - owner, b->N);
        while (i < n) {
            if (b->N > 1) {
                int d = mod(owner - pos(b, st, c, te), b->N);
                if (need[i] >= te + (d ? d : b->N)) break; /* cheaper to re-create at the owner */
            }
            te = need[i++];
        }
        weights_segment(b, st, c, ts, te, first && st == ST_WF && b->p->stage, first);
        first = false;
    }
}

/* Gradient element from its first contributor (turn ts) to its last (te), then to the owner. */
static void gradient_segment(builder *b, int c, int ts, int te) {
    const int owner = b->p->s->owner[c], N = b->N;
    wp_buf g = buf_gw(c);
    int last = pos(b, ST_GW, c, te);
    int fwd = mod(owner - last, N), back = mod(last - owner, N);
    int tl = fwd <= back ? te + fwd : te;
    emit(b, pos(b, ST_GW, c, ts), ts, 4, ST_GW, c, act_buf(WP_OP_ZERO, g, ts));
    for (int t = ts; t < tl; t++) {
        int from = pos(b, ST_GW, c, t), to = pos(b, ST_GW, c, t + 1);
        emit(b, from, t, 7, ST_GW, c, act_xfer(WP_OP_SEND, g, to, WP_SCH_GRAD, t));
        emit(b, to, t, 1, ST_GW, c, act_xfer(WP_OP_RECV, g, from, WP_SCH_GRAD, t));
        emit(b, from, t + 1, 8, ST_GW, c, act_buf(WP_OP_FREE, g, t + 1));
    }
    int st = ST_GW, arrive = tl;
    if (fwd > back) { /* against the ring, on the reverse links that the streams leave idle */
        st = ST_GWRET;
        for (int j = 1; j <= back; j++) {
            int from = mod(last - j + 1, N), to = mod(last - j, N), t = te + j - 1;
            emit(b, from, t, 7, st, c, act_xfer(WP_OP_SEND, g, to, WP_SCH_GRADRET, t));
            /* posted after slot 8: the receiver may still hold the copy it sent forward a turn ago */
            emit(b, to, t, 9, st, c, act_xfer(WP_OP_RECV, g, from, WP_SCH_GRADRET, t));
            emit(b, from, t + 1, 8, st, c, act_buf(WP_OP_FREE, g, t + 1));
        }
        arrive = te + back;
    }
    if (b->p->held) {
        wp_buf sum = g;
        sum.lane = WP_LANE_SUM;
        emit(b, owner, arrive, 6, st, c, act_buf(WP_OP_FOLD, sum, arrive));
    } else {
        emit(b, owner, arrive, 6, st, c, act_chunk(WP_OP_ACC, c, arrive));
    }
    emit(b, owner, arrive, 8, st, c, act_buf(WP_OP_FREE, g, arrive));
}

static void gradient_stream(builder *b, int c) {
    const int *need = b->need[ST_GW][c], n = b->n_need[ST_GW][c], owner = b->p->s->owner[c];
    for (int i = 0; i < n;) {
        int ts = need[i++], te = ts;
        /* held: the owner contributes like anyone, so its own turn closes the segment there */
        while (i < n && need[i] < te + mod(owner - pos(b, ST_GW, c, te), b->N) + (b->p->held && pos(b, ST_GW, c, te) != owner))
            te = need[i++];
        gradient_segment(b, c, ts, te);
    }
}

static void computes(builder *b) {
    const wp_schedule *s = b->p->s;
    for (int i = 0; i < b->p->n_ops; i++) {
        const rb_op *o = &b->p->ops[i];
        int c = o->chunk, mb = o->mb, r = o->rank, t = o->turn;
        bool mine = s->owner[c] == r;
        int lane = o->op == WP_OP_F ? WP_LANE_F : WP_LANE_B;
        bool to_master = mine && !b->p->held && o->op != WP_OP_F && o->op != WP_OP_B;
        emit(b, r, t, 5, 0, 0, act_compute(o->op, c, mb, lane, to_master, t));
        if (o->op == WP_OP_F && c > 0) emit(b, r, t, 5, 0, 0, act_buf(WP_OP_FREE, buf_a(c - 1, mb), t));
        if ((o->op == WP_OP_B || o->op == WP_OP_BW) && c < s->nchunks - 1)
            emit(b, r, t, 5, 0, 0, act_buf(WP_OP_FREE, buf_ga(c, mb), t));
    }
}

static wp_result finish(builder *b) {
    wp_schedule *s = b->p->s;
    int last = 0;
    for (int i = 0; i < b->n_ev; i++)
        if (b->ev[i].turn > last) last = b->ev[i].turn;
    qsort(b->ev, (size_t)b->n_ev, sizeof *b->ev, cmp_ev);
    for (int i = 0; i < b->n_ev; i++)
        if (sched_push(s, b->ev[i].rank, b->ev[i].a, b->err, b->errlen)) return 1;
    int end = last + 1;
    for (int r = 0; r < b->N && !b->p->held; r++) {
        if (sched_push(s, r, act_chunk(WP_OP_REDUCE, 0, end), b->err, b->errlen)) return 1;
        for (int c = 0; c < b->C; c++)
            if (s->owner[c] == r && sched_push(s, r, act_chunk(WP_OP_UPDATE, c, end), b->err, b->errlen)) return 1;
        for (int c = 0; c < b->C; c++)
            if (s->owner[c] == r && b->staged[c] &&
                sched_push(s, r, act_buf(WP_OP_LOAD, buf_w(c, 1, WP_LANE_F), end), b->err, b->errlen))
                return 1;
    }
    return 0;
}

static void builder_free(builder *b) {
    for (int st = 0; st < 3; st++)
        for (int c = 0; c < WP_MAX_CHUNKS; c++) free(b->need[st][c]);
    free(b->ev);
}

wp_result ring_build(ring_plan *p, char *err, size_t errlen) {
    builder *b = calloc(1, sizeof *b);
    int rc = 1;
    snprintf(err, errlen, "schedule: out of memory");
    if (!b) goto out;
    b->p = p;
    b->err = err;
    b->errlen = errlen;
    b->N = p->s->nranks;
    b->C = p->s->nchunks;
    qsort(p->ops, (size_t)p->n_ops, sizeof *p->ops, cmp_op);
    if (collect_needs(b, err, errlen)) goto out;
    computes(b);
    for (int c = 0; c < b->C; c++) {
        weights_stream(b, ST_WF, c);
        weights_stream(b, ST_WB, c);
        gradient_stream(b, c);
    }
    if (b->oom || finish(b)) goto out;
    rc = 0;
out:
    if (b) builder_free(b);
    free(b);
    free(p->ops);
    p->ops = NULL;
    p->n_ops = p->cap_ops = 0;
    return rc;
}
