/* FSDP, ZeRO-3 style, as a sliced schedule (ir.h): data parallel over weights that nobody holds
 * whole. Rank k owns slice k of every chunk (fp32 master, AdamW state, fp32 accumulator: 1/N of
 * the model), and every rank runs its own micro-batches r, r+N, ... (M/N of them) through all
 * chunks, one micro-batch at a time, as a PyTorch FSDP loop without no_sync does:
 *
 *   forward   for c = 0..C-1: all-gather W[c] (posted one chunk ahead), F(c,mb), FREE W[c]
 *             (resharded after use; the last chunk stays for the backward that follows at once)
 *   backward  for c = C-1..0: all-gather W[c-1] ahead, ZERO GW[c], BW(c,mb), FREE W[c], then a
 *             ring reduce-scatter of GW[c] whose hops run one per later compute, so that the
 *             transfers hide behind the next chunks' backward; at most RS_IN_FLIGHT at once (the
 *             oldest finishes when a new one would exceed that), the rest at the micro-batch's end,
 *             after the all-gather of the next micro-batch's first chunk is posted
 *   step end  REDUCE, then every rank UPDATEs its slice of every chunk; nothing is carried.
 *
 * All-gather of W[c] at rank r (channel wfwd, r -> r+1): LOAD its slice W[c]@0/r:N from its
 * master, then in hop j = 0..N-2 SEND slice r-j (its own, then each one just received: a relay
 * may send what is still arriving) and RECV slice r-j-1 from r-1. Each rank sends and receives
 * N-1 slices: (N-1)/N of the chunk per use.
 *
 * Reduce-scatter of GW[c] (channel grad, r -> r+1): the partial of slice s, GW[c]/s:N.p, starts
 * at rank s+1 (ZERO, FOLD of its own slice) and passes ranks s+2, ..., each FOLDing its own slice
 * in, until it reaches s, the owner, after N-1 hops. The owner ACCs the partial and its own
 * slice into its fp32 accumulator separately, so the last add is in fp32.
 * Precision: a FOLD adds in fp32 and rounds once to the grad dtype, so a partial that reaches
 * its owner has been rounded N-2 times and holds one micro-batch from each of N-1 ranks: a bf16
 * sum over one lap of the ring, the same bound as a WeiPipe GW (ir.h), and everything beyond
 * that lap (the M/N micro-batches of a rank, the whole step) is summed in the owner's fp32
 * accumulator. That is why the reduce-scatter runs per micro-batch and not once per step: a
 * per-step one would keep a bf16 running sum of each rank's M/N micro-batches.
 *
 * With one rank there is nothing to slice: rank 0 owns every chunk whole (nslices = 0), LOADs
 * each chunk's weights and its BW adds straight into the fp32 accumulator (to_master). */
#include <stdlib.h>

#include "gen_common.h"

typedef struct {
    int chunk, hop;
} rs_state;

/* Reduce-scatters under way at once: the one just started and the one before it, so a rank
 * holds at most two chunks' own gradients (less the slices already folded away). */
enum { RS_IN_FLIGHT = 2 };

typedef struct {
    wp_schedule *s;
    int N, C, r, turn;
    int rc; /* the first failed sched_push's, whose reason is in err */
    char *err;
    size_t errlen;
    rs_state rs[RS_IN_FLIGHT]; /* reduce-scatters under way, oldest first */
    int n_rs;
} fsdp_rank;

static int ring(int a, int n) { return ((a % n) + n) % n; }

static void put(fsdp_rank *g, wp_action a) {
    a.turn = g->turn;
    if (!g->rc) g->rc = sched_push(g->s, g->r, a, g->err, g->errlen);
}

static wp_buf w_slice(const fsdp_rank *g, int c, int k) { return buf_slice(buf_w(c, 0, WP_LANE_F), ring(k, g->N), g->N); }

static wp_buf partial(const fsdp_rank *g, int c, int k) {
    wp_buf p = buf_slice(buf_gw(c), ring(k, g->N), g->N);
    p.lane = WP_LANE_PART;
    return p;
}

static void gather(fsdp_rank *g, int c) {
    const int r = g->r, up = ring(r + 1, g->N), down = ring(r - 1, g->N);
    if (g->N == 1) {
        put(g, act_buf(WP_OP_LOAD, buf_w(c, 0, WP_LANE_F), 0));
        return;
    }
    put(g, act_buf(WP_OP_LOAD, w_slice(g, c, r), 0));
    for (int j = 0; j < g->N - 1; j++) {
        put(g, act_xfer(WP_OP_SEND, w_slice(g, c, r - j), up, WP_SCH_WFWD, 0));
        put(g, act_xfer(WP_OP_RECV, w_slice(g, c, r - j - 1), down, WP_SCH_WFWD, 0));
    }
}

/* One hop of the reduce-scatter of chunk c at this rank (hop 0 .. N-1, see the top). */
static void rs_hop(fsdp_rank *g, int c, int j) {
    const int N = g->N, r = g->r, up = ring(r + 1, N), down = ring(r - 1, N);
    if (j == N - 1) { /* the owner's end: both adds into fp32, then drop what remains */
        wp_action acc = act_chunk(WP_OP_ACC, c, 0);
        acc.buf = partial(g, c, r);
        put(g, acc);
        acc.buf = buf_slice(buf_gw(c), r, N);
        put(g, acc);
        put(g, act_buf(WP_OP_FREE, partial(g, c, r), 0));
        put(g, act_buf(WP_OP_FREE, partial(g, c, r - j), 0));
        put(g, act_buf(WP_OP_FREE, buf_gw(c), 0));
        return;
    }
    wp_buf p = partial(g, c, r - j - 1);
    if (j == 0) put(g, act_buf(WP_OP_ZERO, p, 0));
    put(g, act_buf(WP_OP_FOLD, p, 0));
    put(g, act_buf(WP_OP_FREE, buf_slice(buf_gw(c), ring(r - j - 1, N), N), 0)); /* own slice: folded in */
    put(g, act_xfer(WP_OP_SEND, p, up, WP_SCH_GRAD, 0));
    if (j > 0) put(g, act_buf(WP_OP_FREE, partial(g, c, r - j), 0)); /* sent a hop ago */
    put(g, act_xfer(WP_OP_RECV, partial(g, c, r - j - 2), down, WP_SCH_GRAD, 0));
}

/* After a compute: every reduce-scatter under way moves one hop. */
static void rs_advance(fsdp_rank *g) {
    int kept = 0;
    for (int i = 0; i < g->n_rs; i++) {
        rs_state *q = &g->rs[i];
        rs_hop(g, q->chunk, ++q->hop);
        if (q->hop < g->N - 1) g->rs[kept++] = *q;
    }
    g->n_rs = kept;
}

/* Finish the oldest reduce-scatter (all its remaining hops). */
static void rs_finish_oldest(fsdp_rank *g) {
    rs_state q = g->rs[0];
    while (++q.hop < g->N) rs_hop(g, q.chunk, q.hop);
    for (int i = 1; i < g->n_rs; i++) g->rs[i - 1] = g->rs[i];
    g->n_rs--;
}

static void rs_flush(fsdp_rank *g) {
    while (g->n_rs) rs_finish_oldest(g);
}

static void compute(fsdp_rank *g, wp_op op, int c, int mb) {
    put(g, act_compute(op, c, mb, WP_LANE_F, op == WP_OP_BW && g->N == 1, g->turn));
    g->turn++;
}

static void forward(fsdp_rank *g, int mb) {
    for (int c = 0; c < g->C; c++) {
        if (c + 1 < g->C) gather(g, c + 1);
        compute(g, WP_OP_F, c, mb);
        if (c > 0) put(g, act_buf(WP_OP_FREE, buf_a(c - 1, mb), 0));
        if (c + 1 < g->C) put(g, act_buf(WP_OP_FREE, buf_w(c, 0, WP_LANE_F), 0));
    }
}

static void backward(fsdp_rank *g, int mb) {
    for (int c = g->C - 1; c >= 0; c--) {
        if (c > 0) gather(g, c - 1);
        if (g->N > 1) put(g, act_buf(WP_OP_ZERO, buf_gw(c), 0));
        compute(g, WP_OP_BW, c, mb);
        if (c < g->C - 1) put(g, act_buf(WP_OP_FREE, buf_ga(c, mb), 0));
        put(g, act_buf(WP_OP_FREE, buf_w(c, 0, WP_LANE_F), 0));
        if (g->N == 1) continue;
        rs_advance(g);
        if (g->n_rs == RS_IN_FLIGHT) rs_finish_oldest(g);
        rs_hop(g, c, 0);
        g->rs[g->n_rs++] = (rs_state){c, 0};
    }
}

wp_result gen_fsdp(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)opt;
    const int N = s->nranks, k = s->nmb / N;
    s->split = false;
    s->nslices = N > 1 ? N : 0;
    for (int c = 0; c < s->nchunks; c++) s->owner[c] = 0;
    for (int r = 0; r < N; r++) {
        fsdp_rank g = {.s = s, .N = N, .C = s->nchunks, .r = r, .err = err, .errlen = errlen};
        gather(&g, 0);
        for (int i = 0; i < k; i++) {
            int mb = i * N + r;
            forward(&g, mb);
            backward(&g, mb);
            if (i + 1 < k) gather(&g, 0); /* the next micro-batch's first chunk moves during the flush */
            rs_flush(&g);
        }
        put(&g, act_chunk(WP_OP_REDUCE, 0, 0));
        for (int c = 0; c < s->nchunks; c++) put(&g, act_chunk(WP_OP_UPDATE, c, 0));
        if (g.rc) return g.rc;
    }
    return 0;
}
