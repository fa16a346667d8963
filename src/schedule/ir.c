/* The schedule IR: names, sizes, building. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

const char *op_name(wp_op op) {
    static const char *const names[WP_OP_COUNT] = {
        "F", "B", "W", "BW", "SEND", "RECV", "LOAD", "ZERO", "ACC", "REDUCE", "UPDATE", "FREE", "FOLD", "DUP", "TOUT",
        "TIN",
    };
    return op < WP_OP_COUNT ? names[op] : "?";
}

const char *channel_name(int ch) {
    static const char *const names[] = {"wfwd", "wbwd", "grad", "act", "actgrad", "gradret", "xnode", "tie"};
    return ch >= 0 && ch < (int)(sizeof names / sizeof names[0]) ? names[ch] : "ch?";
}

char *buf_name(wp_buf b, char *out, size_t len) {
    char sl[24] = "";
    if (b.nslices) snprintf(sl, sizeof sl, "/%d:%d", b.slice, b.nslices);
    switch (b.kind) {
    case WP_BUF_W: snprintf(out, len, "W[%d]@%d%s%s", b.chunk, b.idx, sl, b.lane == WP_LANE_B ? ".b" : ""); break;
    case WP_BUF_GW:
        snprintf(out, len, "GW[%d]%s%s", b.chunk, sl, b.lane == WP_LANE_PART ? ".p" : b.lane == WP_LANE_SUM ? ".s" : "");
        break;
    case WP_BUF_A: snprintf(out, len, "A[%d][%d]", b.chunk, b.idx); break;
    case WP_BUF_GA: snprintf(out, len, "GA[%d][%d]", b.chunk, b.idx); break;
    case WP_BUF_T:
        snprintf(out, len, "T.%c[%d>%d]", b.lane == WP_TIE_GRAD ? 'g' : 'w', tie_piece_k(b), tie_piece_j(b));
        break;
    default: snprintf(out, len, "?"); break;
    }
    return out;
}

char *action_text(const wp_action *a, char *out, size_t len) {
    char nb[48];
    switch (a->op) {
    case WP_OP_F:
    case WP_OP_B:
    case WP_OP_W:
    case WP_OP_BW:
        snprintf(out, len, "%s(%d,%d)%s", op_name(a->op), a->chunk, a->mb, a->to_master ? "*" : "");
        break;
    case WP_OP_SEND: snprintf(out, len, "SEND %s ->%d", buf_name(a->buf, nb, sizeof nb), a->peer); break;
    case WP_OP_RECV: snprintf(out, len, "RECV %s <-%d", buf_name(a->buf, nb, sizeof nb), a->peer); break;
    case WP_OP_LOAD:
    case WP_OP_ZERO:
    case WP_OP_FREE: snprintf(out, len, "%s %s", op_name(a->op), buf_name(a->buf, nb, sizeof nb)); break;
    case WP_OP_ACC:
        if (a->buf.nslices || a->buf.lane) snprintf(out, len, "ACC %s", buf_name(a->buf, nb, sizeof nb));
        else snprintf(out, len, "ACC(%d)", a->chunk);
        break;
    case WP_OP_UPDATE: snprintf(out, len, "%s(%d)", op_name(a->op), a->chunk); break;
    case WP_OP_FOLD:
    case WP_OP_TOUT:
    case WP_OP_TIN:
    case WP_OP_DUP: snprintf(out, len, "%s %s", op_name(a->op), buf_name(a->buf, nb, sizeof nb)); break;
    default: snprintf(out, len, "%s", op_name(a->op)); break;
    }
    return out;
}

wp_buf buf_w(int chunk, int version, int lane) {
    return (wp_buf){.kind = WP_BUF_W, .lane = (uint8_t)lane, .chunk = (int16_t)chunk, .idx = version};
}
wp_buf buf_gw(int chunk) { return (wp_buf){.kind = WP_BUF_GW, .chunk = (int16_t)chunk}; }
wp_buf buf_a(int chunk, int mb) { return (wp_buf){.kind = WP_BUF_A, .chunk = (int16_t)chunk, .idx = mb}; }
wp_buf buf_ga(int chunk, int mb) { return (wp_buf){.kind = WP_BUF_GA, .chunk = (int16_t)chunk, .idx = mb}; }


void slice_range(size_t E, int k, int n, size_t *off, size_t *len) {
    size_t lo = E * (size_t)k / (size_t)n, hi = E * (size_t)(k + 1) / (size_t)n;
    *off = lo;
    *len = hi - lo;
}

bool sched_owns(const wp_schedule *s, int rank, int chunk, int slice) {
    if (!s->nslices) return s->owner[chunk] == rank;
    if (slice >= 0) return slice == rank;
    return s->nslices == 1 && rank == 0;
}

wp_buf buf_tie(int lane, int k, int j) {
    return (wp_buf){.kind = WP_BUF_T, .lane = (uint8_t)lane, .chunk = 0, .idx = k * 65536 + j};
}
int tie_piece_k(wp_buf b) { return b.idx / 65536; }
int tie_piece_j(wp_buf b) { return b.idx % 65536; }

bool tie_offsets(const wp_layout *L, size_t *emb_off, size_t *head_off, size_t *numel) {
    const wp_param *e = layout_find(L, "model.embed_tokens.weight"), *h = layout_find(L, "lm_head.weight");
    if (!L->cfg.tied || !e || !h) return false;
    *emb_off = e->offset;
    *head_off = h->offset;
    *numel = (size_t)e->rows * e->cols;
    return true;
}

/* [lo, hi) of the tied tensor that slice k of n of a chunk of E elements covers, the tensor
 * starting at element `at` of that chunk. */
static void tie_cut(size_t E, size_t at, size_t numel, int k, int n, size_t *lo, size_t *hi) {
    size_t off = 0, len = E;
    if (n) slice_range(E, k, n, &off, &len);
    size_t a = off > at ? off - at : 0, b = off + len > at ? off + len - at : 0;
    *lo = a < numel ? a : numel;
    *hi = b < numel ? b : numel;
}

void tie_piece(const wp_layout *L, int n, int k, int j, size_t *off, size_t *len) {
    size_t eo, ho, numel, hl, hh, el, eh;
    *off = *len = 0;
    if (!tie_offsets(L, &eo, &ho, &numel)) return;
    tie_cut(L->chunk_numel[L->cfg.n_chunks - 1], ho, numel, k, n, &hl, &hh);
    tie_cut(L->chunk_numel[0], eo, numel, j, n, &el, &eh);
    size_t lo = hl > el ? hl : el, hi = hh < eh ? hh : eh;
    if (hi > lo) {
        *off = lo;
        *len = hi - lo;
    }
}

size_t buf_bytes_n(const wp_layout *L, int nslices, wp_buf b) {
    if (b.kind != WP_BUF_T) return buf_bytes(L, b);
    size_t off, len;
    tie_piece(L, nslices, tie_piece_k(b), tie_piece_j(b), &off, &len);
    return len * sizeof(float);
}

size_t buf_bytes(const wp_layout *L, wp_buf b) {
    const wp_model_cfg *m = &L->cfg;
    if (b.chunk < 0 || b.chunk >= m->n_chunks) return 0;
    size_t numel = L->chunk_numel[b.chunk], off;
    if (b.nslices) slice_range(numel, b.slice, b.nslices, &off, &numel);
    switch (b.kind) {
    case WP_BUF_W: return numel * wp_dtype_size(precision_weight_dtype(m->precision));
    case WP_BUF_GW: return numel * wp_dtype_size(b.lane == WP_LANE_SUM ? WP_F32 : precision_grad_dtype(m->precision));
    case WP_BUF_A:
    case WP_BUF_GA: return (size_t)m->micro_batch * m->seq * m->h * wp_dtype_size(precision_act_dtype(m->precision));
    default: return 0;
    }
}

static wp_result oom(char *err, size_t errlen) { return wp_fail(WP_FAILED, err, errlen, "schedule: out of memory"); }

wp_result sched_init(wp_schedule *s, wp_strategy strategy, int nranks, int nmb, int nchunks, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->strategy = strategy;
    s->nranks = nranks;
    s->nmb = nmb;
    s->nchunks = nchunks;
    s->rank = calloc((size_t)nranks, sizeof *s->rank);
    return s->rank ? 0 : oom(err, errlen);
}

void sched_free(wp_schedule *s) {
    if (s->rank)
        for (int r = 0; r < s->nranks; r++) {
            free(s->rank[r].a);
            free(s->rank[r].carry);
        }
    free(s->rank);
    memset(s, 0, sizeof *s);
}

static wp_result grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return WP_FAILED;
    *p = q;
    *cap = nc;
    return 0;
}

wp_result sched_push(wp_schedule *s, int rank, wp_action a, char *err, size_t errlen) {
    wp_rank_prog *p = &s->rank[rank];
    if (grow((void **)&p->a, &p->cap, p->n + 1, sizeof *p->a)) return oom(err, errlen);
    p->a[p->n++] = a;
    return 0;
}

wp_result sched_push_carry(wp_schedule *s, int rank, wp_buf b, char *err, size_t errlen) {
    wp_rank_prog *p = &s->rank[rank];
    if (grow((void **)&p->carry, &p->cap_carry, p->n_carry + 1, sizeof *p->carry)) return oom(err, errlen);
    p->carry[p->n_carry++] = b;
    return 0;
}

wp_result sched_insert(wp_schedule *s, int rank, int i, wp_action a, char *err, size_t errlen) {
    wp_rank_prog *p = &s->rank[rank];
    if (i < 0 || i > p->n) { return wp_fail(WP_BAD_INPUT, err, errlen, "schedule: insert at %d of rank %d's %d actions", i, rank, p->n); }
    if (grow((void **)&p->a, &p->cap, p->n + 1, sizeof *p->a)) return oom(err, errlen);
    memmove(p->a + i + 1, p->a + i, (size_t)(p->n - i) * sizeof *p->a);
    p->a[i] = a;
    p->n++;
    return 0;
}

void sched_delete(wp_schedule *s, int rank, int i) {
    wp_rank_prog *p = &s->rank[rank];
    if (i < 0 || i >= p->n) return;
    memmove(p->a + i, p->a + i + 1, (size_t)(p->n - i - 1) * sizeof *p->a);
    p->n--;
}

wp_action act_compute(wp_op op, int chunk, int mb, int lane, bool to_master, int turn) {
    wp_action a = {.op = (uint8_t)op, .chunk = (int16_t)chunk, .mb = mb, .turn = turn, .peer = -1};
    a.to_master = to_master;
    a.buf = op == WP_OP_W ? buf_gw(chunk) : buf_w(chunk, 0, lane);
    return a;
}

wp_action act_xfer(wp_op op, wp_buf b, int peer, int channel, int turn) {
    return (wp_action){.op = (uint8_t)op, .channel = (uint8_t)channel, .chunk = b.chunk, .peer = (int16_t)peer,
                       .mb = -1, .turn = turn, .buf = b};
}

wp_action act_buf(wp_op op, wp_buf b, int turn) {
    return (wp_action){.op = (uint8_t)op, .chunk = b.chunk, .peer = -1, .mb = -1, .turn = turn, .buf = b};
}

wp_action act_chunk(wp_op op, int chunk, int turn) {
    wp_action a = {.op = (uint8_t)op, .chunk = (int16_t)chunk, .peer = -1, .mb = -1, .turn = turn};
    if (op == WP_OP_ACC) a.buf = buf_gw(chunk);
    return a;
}
