/* tawpipe: TawPipe (Wu & Chen, AAAI 2026) as a peer baseline, from the facts in
 * ../shared/papers/README.md (the algorithm, not the authors' code); docs/schedules.md lists the
 * choices made where the description is open.
 *
 * K nodes of S ranks (wp_gen_opts.ranks_per_node = S, N = K*S; rank r on node r / S), C = N
 * chunks. Chunk i is owned (fp32 master, AdamW state, fp32 accumulator) by rank
 * (i mod K)*S + i / K: consecutive chunks cycle through the nodes. Every rank runs its own
 * micro-batches r, r+N, ... (M/N rounds, M a multiple of N) through every chunk, forward then
 * backward, one micro-batch at a time; all ranks of a node use the same chunk at once.
 *
 * Getting W[c] to node j (once for the forward, once for the backward; the last chunk stays from
 * its forward to its backward), posted one chunk ahead (prefetch, double buffers):
 *   - owner on node j: it LOADs W[c] and SENDs it to every other rank of node j (the broadcast)
 *     and to the staging rank of every other node;
 *   - owner elsewhere: node j's staging rank j*S + (owner mod S) RECVs it from the owner and
 *     relays it to the other ranks of node j.
 * Gradients after BW(c): the owner's own W-pass goes into its accumulator; on the owner's node
 * every other rank SENDs its GW[c] to the owner, which ACCs them one by one; on any other node
 * the ranks SEND GW[c] to local rank 0, which FOLDs them and its own into an fp32 node sum
 * GW[c].s and SENDs that to the owner (channel xnode); the owner ACCs the K-1 node sums (the
 * first one's RECV posted when its round begins, the others at the round's end: a rank never
 * holds two buffers of one name). REDUCE and the owners' UPDATEs end the step. */
#include "gen_common.h"

typedef struct {
    wp_schedule *s;
    int N, S, K, C, r, node;
    char *err;
    size_t errlen;
    int rc, turn;
} taw;

static void put(taw *t, wp_action a) {
    a.turn = t->turn;
    if (!t->rc) t->rc = sched_push(t->s, t->r, a, t->err, t->errlen);
}

static int owner_of(const taw *t, int c) { return (c % t->K) * t->S + c / t->K; }
static wp_buf wf(int c) { return buf_w(c, 0, WP_LANE_F); }
static wp_buf node_sum(int c) {
    wp_buf g = buf_gw(c);
    g.lane = WP_LANE_SUM;
    return g;
}

/* Post what brings W[c] to this rank (see the top). */
static void acquire(taw *t, int c) {
    const int o = owner_of(t, c), base = t->node * t->S;
    if (o / t->S == t->node) {
        if (t->r != o) {
            put(t, act_xfer(WP_OP_RECV, wf(c), o, WP_SCH_WFWD, 0));
            return;
        }
        put(t, act_buf(WP_OP_LOAD, wf(c), 0));
        for (int l = 0; l < t->S; l++)
            if (base + l != o) put(t, act_xfer(WP_OP_SEND, wf(c), base + l, WP_SCH_WFWD, 0));
        for (int j = 1; j < t->K; j++) {
            int other = (t->node + j) % t->K;
            put(t, act_xfer(WP_OP_SEND, wf(c), other * t->S + o % t->S, WP_SCH_XNODE, 0));
        }
        return;
    }
    int st = base + o % t->S;
    if (t->r != st) {
        put(t, act_xfer(WP_OP_RECV, wf(c), st, WP_SCH_WFWD, 0));
        return;
    }
    put(t, act_xfer(WP_OP_RECV, wf(c), o, WP_SCH_XNODE, 0));
    for (int l = 0; l < t->S; l++)
        if (base + l != st) put(t, act_xfer(WP_OP_SEND, wf(c), base + l, WP_SCH_WFWD, 0));
}

static void compute(taw *t, wp_op op, int c, int mb, bool to_master) {
    put(t, act_compute(op, c, mb, WP_LANE_F, to_master, t->turn));
    t->turn++;
}

/* After BW(c): this rank's part of the node's reduction of GW[c] (see the top). sent_gw and
 * sent_sum record what is freed at the round's end, after this rank's own receives of node sums:
 * an owner posts its second and later RECVs there, so a FREE that waited for them earlier would
 * close a cycle over three nodes. */
static void reduce(taw *t, int c, bool *sent_gw, bool *sent_sum) {
    const int o = owner_of(t, c), base = t->node * t->S;
    const int to = o / t->S == t->node ? o : base;
    if (t->r == o) {
        for (int l = 0; l < t->S; l++) {
            if (base + l == o) continue;
            put(t, act_xfer(WP_OP_RECV, buf_gw(c), base + l, WP_SCH_GRAD, 0));
            put(t, act_chunk(WP_OP_ACC, c, 0));
            put(t, act_buf(WP_OP_FREE, buf_gw(c), 0));
        }
        return;
    }
    if (t->r != to) {
        put(t, act_xfer(WP_OP_SEND, buf_gw(c), to, WP_SCH_GRAD, 0));
        sent_gw[c] = true;
        return;
    }
    /* local rank 0 of a node without the owner: the node's sum, in fp32 */
    put(t, act_buf(WP_OP_ZERO, node_sum(c), 0));
    put(t, act_buf(WP_OP_FOLD, node_sum(c), 0));
    put(t, act_buf(WP_OP_FREE, buf_gw(c), 0));
    for (int l = 1; l < t->S; l++) {
        put(t, act_xfer(WP_OP_RECV, buf_gw(c), base + l, WP_SCH_GRAD, 0));
        put(t, act_buf(WP_OP_FOLD, node_sum(c), 0));
        put(t, act_buf(WP_OP_FREE, buf_gw(c), 0));
    }
    put(t, act_xfer(WP_OP_SEND, node_sum(c), o, WP_SCH_GRAD, 0)); /* o is on another node: no local GW shares it */
    sent_sum[c] = true;
}

/* The owner's node sums from the other nodes: nodes node+1, node+2, ... */
static int sum_source(const taw *t, int j) { return ((t->node + 1 + j) % t->K) * t->S; }

static void round_of(taw *t, int mb) {
    bool sent_gw[WP_MAX_CHUNKS] = {false}, sent_sum[WP_MAX_CHUNKS] = {false};
    int mine = -1;
    for (int c = 0; c < t->C; c++)
        if (owner_of(t, c) == t->r) mine = c;
    if (mine >= 0 && t->K > 1) put(t, act_xfer(WP_OP_RECV, node_sum(mine), sum_source(t, 0), WP_SCH_GRAD, 0));
    acquire(t, 0);
    for (int c = 0; c < t->C; c++) {
        if (c + 1 < t->C) acquire(t, c + 1);
        compute(t, WP_OP_F, c, mb, false);
        if (c > 0) put(t, act_buf(WP_OP_FREE, buf_a(c - 1, mb), 0));
        if (c + 1 < t->C) put(t, act_buf(WP_OP_FREE, wf(c), 0));
    }
    for (int c = t->C - 1; c >= 0; c--) {
        if (c > 0) acquire(t, c - 1);
        bool own = owner_of(t, c) == t->r;
        if (!own) put(t, act_buf(WP_OP_ZERO, buf_gw(c), 0));
        compute(t, WP_OP_BW, c, mb, own);
        if (c < t->C - 1) put(t, act_buf(WP_OP_FREE, buf_ga(c, mb), 0));
        put(t, act_buf(WP_OP_FREE, wf(c), 0));
        reduce(t, c, sent_gw, sent_sum);
    }
    for (int j = 0; mine >= 0 && j < t->K - 1; j++) {
        if (j > 0) put(t, act_xfer(WP_OP_RECV, node_sum(mine), sum_source(t, j), WP_SCH_GRAD, 0));
        wp_action acc = act_chunk(WP_OP_ACC, mine, 0);
        acc.buf = node_sum(mine);
        put(t, acc);
        put(t, act_buf(WP_OP_FREE, node_sum(mine), 0));
    }
    for (int c = 0; c < t->C; c++) {
        if (sent_gw[c]) put(t, act_buf(WP_OP_FREE, buf_gw(c), 0));
        if (sent_sum[c]) put(t, act_buf(WP_OP_FREE, node_sum(c), 0));
    }
}

wp_result gen_tawpipe(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    const int N = s->nranks, S = opt->ranks_per_node > 0 ? opt->ranks_per_node : N;
    s->split = false;
    for (int r = 0; r < N; r++) {
        taw t = {.s = s, .N = N, .S = S, .K = N / S, .C = s->nchunks, .r = r, .node = r / S, .err = err,
                 .errlen = errlen};
        for (int c = 0; c < t.C; c++) s->owner[c] = owner_of(&t, c);
        for (int q = 0; q < s->nmb / N; q++) round_of(&t, q * N + r);
        put(&t, act_chunk(WP_OP_REDUCE, 0, 0));
        for (int c = 0; c < t.C; c++)
            if (owner_of(&t, c) == r) put(&t, act_chunk(WP_OP_UPDATE, c, 0));
        if (t.rc) return t.rc;
    }
    return 0;
}

/* K nodes of G ranks: G divides N (C = N is the shared shape check's). */
wp_result gen_check_tawpipe(int nranks, int nmb, int nchunks, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)nmb, (void)nchunks;
    int G;
    return gen_check_nodes(strategy_name(WP_STRAT_TAWPIPE), nranks, opt, &G, err, errlen);
}
