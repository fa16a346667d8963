/* weipipe-hier: WeiPipe rings inside nodes, one exchange across nodes per step.
 *
 * Cluster: K nodes of G ranks (wp_gen_opts.ranks_per_node = G, N = K*G; rank r sits on node
 * r / G, as the simulator's links). The model is cut into C = G chunks. Node j runs a
 * WeiPipe-Interleave ring of its G ranks over those chunks (ring_build.h with ring_plan.held)
 * on its share of the step, micro-batches j*M/K .. (j+1)*M/K - 1 (M a multiple of N, so each
 * rank runs M/N whole micro-batches as in weipipe-interleave). On node j chunk c is held by
 * rank j*G + (G - c) mod G, its holder: the interleave ring's owner, without a master.
 *
 * Masters and optimizer state are sliced N ways as in fsdp (ir.h: rank k owns slice k of every
 * chunk), so each rank keeps 1/N of the fp32 master and AdamW state. A step of rank r:
 *   gather   for c = 0 .. C-1 (the first chunk first): LOAD slice r of W[c]@0 and SEND it to
 *            the holder of c on r's node and, on every other node j, to r's gateway there: the
 *            rank j*G + r mod G, which relays it to the holder of c on node j (a slice reaches a
 *            holder from its own node's rank directly). Why a gateway: all of r's slices then
 *            cross the slow link on one (src, dst, channel) queue, which is FIFO, so chunk 0's
 *            slices go first and the step's first forward starts after 1/C of the gather. Sent
 *            straight to the C holders, the C flows would share the node's NIC and chunk 0 would
 *            arrive about when the last chunk does. (The ring still waits for most of the rest
 *            early: every chunk moves on the forward belt from turn 0 and a holder's DUP that
 *            seeds the backward stream blocks its list, and the belt through it, until its chunk
 *            is whole; docs/schedules.md, "What stays exposed".) A holder RECVs the N-1 other
 *            slices of its chunk: its whole W[c]@0, which it keeps all step, and ZEROs GW[c].s.
 *   ring     the node's interleave lists: weight streams start from the holder's copy (lane B
 *            by DUP), every lap's travelling GW[c] is FOLDed into the holder's fp32 step sum.
 *   drain    as soon as the holder's last FOLD of GW[c].s is done (its node gradient is
 *            complete: the drain lap finishes the chunks one by one) it SENDs slice k of it
 *            to rank k for every k: as it is (fp32) inside the node, and to other nodes as a
 *            partial GW[c]/k:N.p in the grad dtype that DUP rounds from it once (the slow link
 *            is where bytes are dear); the owner of a slice ACCs the K node sums it receives (the
 *            slice from another node first: its RECV is posted when the step begins, so the
 *            slow transfer runs during the ring; the rest are received one after another, a
 *            rank never holding two buffers of one name).
 *   end      REDUCE (norm, inf/NaN skip over the N owners' slices), UPDATE of slice r of every
 *            chunk, chunk 0 first, so the next step's first gather starts with it.
 * Bytes across nodes per step and node: the gather brings (K-1)/K of each of the node's G
 * chunks in the weight dtype and the drain sends (K-1)/K of each in the grad dtype: 2(K-1)/K of
 * the model (w = g), independent of M, micro-batch size and sequence length
 * (docs/schedules.md). Inside a node the slices of the other G-1 local owners move too (fast
 * links). Every gradient is summed in fp32 beyond one lap of the node ring (a lap's GW in the
 * grad dtype, as weipipe-interleave) and a node's sum is rounded once more where it leaves the
 * node, so training lands on the single-rank weights (exactly in fp32).
 * With one rank nothing is sliced: rank 0 owns every chunk whole and LOADs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring_build.h"
#include "gen_common.h"

typedef struct {
    wp_schedule *s;
    int N, G, K, C, S; /* S = nslices (0 with one rank) */
    char *err;
    size_t errlen;
    int rc;
    /* Of the rank r being listed: kept[c*K + j] when it still holds slice j*G + r mod G of W[c]@0
     * from the gather (its own, j = r / G, or one it relays: every such slice has r's local index). */
    bool *kept;
} hier;

static void put(hier *h, int r, wp_action a) {
    if (!h->rc) h->rc = sched_push(h->s, r, a, h->err, h->errlen);
}

static int holder(const hier *h, int node, int c) { return node * h->G + (h->G - c) % h->G; }
static int held_chunk(const hier *h, int r) { return (h->G - r % h->G) % h->G; }

/* Slice k of a whole (the whole itself when nothing is sliced). */
static wp_buf part(const hier *h, wp_buf whole, int k) { return h->S ? buf_slice(whole, k, h->S) : whole; }

/* GW[c].s, the node's fp32 step sum of chunk c, and its slice k. */
static wp_buf sum_of(int c) {
    wp_buf g = buf_gw(c);
    g.lane = WP_LANE_SUM;
    return g;
}
static wp_buf sum_part(const hier *h, int c, int k) { return part(h, sum_of(c), k); }

/* Slice k of holder `from`'s node sum of chunk c as it travels to rank k: in fp32 inside a node,
 * in the grad dtype (a partial made by DUP, rounded once) across nodes, where bytes are dear. */
static wp_buf sum_wire(const hier *h, int c, int k, int from) {
    wp_buf b = sum_part(h, c, k);
    if (from / h->G != k / h->G) b.lane = WP_LANE_PART;
    return b;
}

/* The holders of chunk c whose sums rank r's slice gets, in drain order: other nodes first (their
 * first is received while the ring runs), then r's own node. */
static int sources(const hier *h, int r, int c, int *out) {
    int n = 0, mine = r / h->G;
    for (int j = 1; j <= h->K; j++) out[n++] = holder(h, (mine + j) % h->K, c);
    return n;
}

/* Transfers of the node ring move whole W and GW buffers: one action per slice when sliced. */
static void put_mapped(hier *h, int r, wp_action a, int base, int mb0) {
    if (a.peer >= 0) a.peer = (int16_t)(a.peer + base);
    if (op_is_compute(a.op)) a.mb += mb0;
    if (a.buf.kind == WP_BUF_A || a.buf.kind == WP_BUF_GA) a.buf.idx += mb0;
    bool xfer = a.op == WP_OP_SEND || a.op == WP_OP_RECV;
    if (!xfer || !h->S || a.buf.nslices) {
        put(h, r, a);
        return;
    }
    wp_buf whole = a.buf;
    for (int k = 0; k < h->S; k++) {
        a.buf = buf_slice(whole, k, h->S);
        put(h, r, a);
    }
}

/* The rank on node `node` through which slices from rank k (on another node) reach that node. */
static int gateway(const hier *h, int node, int k) { return node * h->G + k % h->G; }

/* Where holder `to` gets slice k of its chunk from: k itself on its own node, else k's gateway
 * on its node (k itself when the holder is that gateway). */
static int slice_from(const hier *h, int to, int k) {
    if (k / h->G == to / h->G) return k;
    int g = gateway(h, to / h->G, k);
    return g == to ? k : g;
}

static void gather(hier *h, int r) {
    const int mine = held_chunk(h, r), node = r / h->G;
    memset(h->kept, 0, (size_t)h->C * (size_t)h->K * sizeof *h->kept);
    for (int c = 0; c < h->C; c++) {
        wp_buf w = part(h, buf_w(c, 0, WP_LANE_F), r);
        put(h, r, act_buf(WP_OP_LOAD, w, 0));
        if (c != mine && h->S) h->kept[c * h->K + node] = true;
        for (int j = 0; j < h->K; j++) {
            int to = j == node ? holder(h, j, c) : gateway(h, j, r);
            if (to != r) put(h, r, act_xfer(WP_OP_SEND, w, to, WP_SCH_XNODE, 0));
        }
    }
    /* As a gateway: the slices of ranks with r's local index on the other nodes, chunk by chunk
     * in the order their senders send them, each relayed to its holder here as it arrives. */
    for (int c = 0; h->S && c < h->C; c++)
        for (int j = 0; j < h->K; j++) {
            int k = j * h->G + r % h->G, to = holder(h, node, c);
            if (j == node) continue;
            wp_buf w = part(h, buf_w(c, 0, WP_LANE_F), k);
            put(h, r, act_xfer(WP_OP_RECV, w, k, WP_SCH_XNODE, 0)); /* to == r: a slice of its own chunk */
            if (to == r) continue;
            put(h, r, act_xfer(WP_OP_SEND, w, to, WP_SCH_XNODE, 0));
            h->kept[c * h->K + j] = true;
        }
    /* As the holder, the rest: from each source in the order it sends (a gateway its own slice
     * first, then those it relays, by node). */
    for (int k = 0; h->S && k < h->S; k++)
        if (k != r && k / h->G == node)
            put(h, r, act_xfer(WP_OP_RECV, part(h, buf_w(mine, 0, WP_LANE_F), k), k, WP_SCH_XNODE, 0));
    for (int k = 0; h->S && k < h->S; k++)
        if (k / h->G != node && slice_from(h, r, k) != k)
            put(h, r, act_xfer(WP_OP_RECV, part(h, buf_w(mine, 0, WP_LANE_F), k), slice_from(h, r, k), WP_SCH_XNODE, 0));
    put(h, r, act_buf(WP_OP_ZERO, sum_of(mine), 0));
    int src[WP_MAX_CHUNKS];
    for (int c = 0; h->S && c < h->C; c++) /* the first slice (from another node when K > 1), posted now */
        if (c != mine) {
            sources(h, r, c, src);
            put(h, r, act_xfer(WP_OP_RECV, sum_wire(h, c, r, src[0]), src[0], WP_SCH_XNODE, 0));
        }
}

/* Drop the gather's slices of chunk c that rank r still holds (each waits for its sends). */
static void drop_kept(hier *h, int r, int c, int turn) {
    for (int j = 0; j < h->K; j++)
        if (h->kept[c * h->K + j]) {
            put(h, r, act_buf(WP_OP_FREE, part(h, buf_w(c, 0, WP_LANE_F), j * h->G + r % h->G), turn));
            h->kept[c * h->K + j] = false;
        }
}

/* The holder's node sum of its chunk is complete: its own slice into its accumulator, the others
 * to their owners, then the first slice from another node may come. */
static void drain_start(hier *h, int r, int turn) {
    const int c = held_chunk(h, r);
    wp_action acc = act_chunk(WP_OP_ACC, c, turn);
    acc.buf = sum_part(h, c, r);
    put(h, r, acc);
    if (!h->S) return;
    put(h, r, act_buf(WP_OP_FREE, sum_part(h, c, r), turn));
    for (int k = 0; k < h->S; k++) {
        if (k == r) continue;
        wp_buf b = sum_wire(h, c, k, r);
        if (b.lane == WP_LANE_PART) put(h, r, act_buf(WP_OP_DUP, b, turn));
        put(h, r, act_xfer(WP_OP_SEND, b, k, WP_SCH_XNODE, turn));
    }
    int src[WP_MAX_CHUNKS];
    sources(h, r, c, src);
    if (h->K > 1) put(h, r, act_xfer(WP_OP_RECV, sum_wire(h, c, r, src[0]), src[0], WP_SCH_XNODE, turn));
}

/* Every slice r gets from the holders that are not r: ACC each, RECV the next. */
static void drain_finish(hier *h, int r, int turn) {
    const int mine = held_chunk(h, r);
    int src[WP_MAX_CHUNKS];
    for (int c = 0; h->S && c < h->C; c++) {
        int n = sources(h, r, c, src);
        if (c == mine) n--; /* the last source is r itself, drained at drain_start */
        if (c == mine && h->K == 1) continue;
        for (int i = 0; i < n; i++) {
            wp_buf b = sum_wire(h, c, r, src[i]);
            if (i > 0) put(h, r, act_xfer(WP_OP_RECV, b, src[i], WP_SCH_XNODE, turn));
            wp_action acc = act_chunk(WP_OP_ACC, c, turn);
            acc.buf = b;
            put(h, r, acc);
            put(h, r, act_buf(WP_OP_FREE, b, turn));
        }
    }
}

static void finish(hier *h, int r, int turn) {
    const int mine = held_chunk(h, r);
    drain_finish(h, r, turn);
    put(h, r, act_buf(WP_OP_FREE, sum_of(mine), turn)); /* what is left: the slices sent to their owners */
    for (int k = 0; h->S && k < h->S; k++) /* the rounded copies sent across nodes */
        if (k / h->G != r / h->G) put(h, r, act_buf(WP_OP_FREE, sum_wire(h, mine, k, r), turn));
    put(h, r, act_buf(WP_OP_FREE, buf_w(mine, 0, WP_LANE_F), turn));
    put(h, r, act_buf(WP_OP_FREE, buf_w(mine, 0, WP_LANE_B), turn));
    for (int c = 0; c < h->C; c++) drop_kept(h, r, c, turn);
    put(h, r, act_chunk(WP_OP_REDUCE, 0, turn));
    for (int c = 0; c < h->C; c++) put(h, r, act_chunk(WP_OP_UPDATE, c, turn));
}

/* Node j's ring, built on G ranks, then copied into the N-rank lists. */
static wp_result node_ring(hier *h, int j) {
    wp_schedule sub;
    const int Mn = h->s->nmb / h->K, base = j * h->G;
    WP_TRY(sched_init(&sub, WP_STRAT_INTERLEAVE, h->G, Mn, h->G, h->err, h->errlen));
    for (int c = 0; c < h->G; c++) sub.owner[c] = (h->G - c) % h->G;
    ring_plan p;
    ring_plan_init(&p, &sub, WP_LANE_B, false);
    p.held = true;
    if (interleave_place(&p, h->err, h->errlen)) {
        free(p.ops);
        sched_free(&sub);
        return 1;
    }
    wp_result rc = WP_OK;
    if ((rc = ring_build(&p, h->err, h->errlen))) {
        sched_free(&sub);
        return rc;
    }
    for (int l = 0; l < h->G; l++) {
        const wp_rank_prog *P = &sub.rank[l];
        int r = base + l, c = held_chunk(h, r), last_fold = -1, turn = 0;
        for (int i = 0; i < P->n; i++)
            if (P->a[i].op == WP_OP_FOLD && P->a[i].buf.chunk == c) last_fold = i;
        gather(h, r);
        for (int i = 0; i < P->n; i++) {
            const wp_action *a = &P->a[i];
            /* The ring brings this chunk's forward weights, with the slices r loaded or relayed
             * for the gather in them: those go first (once their sends are done). */
            if (a->op == WP_OP_RECV && a->buf.kind == WP_BUF_W && a->buf.lane == WP_LANE_F)
                drop_kept(h, r, a->buf.chunk, a->turn);
            put_mapped(h, r, *a, base, j * Mn);
            turn = P->a[i].turn;
            if (i == last_fold) drain_start(h, r, turn);
        }
        finish(h, r, turn + 1);
    }
    sched_free(&sub);
    return h->rc;
}

wp_result gen_hier(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    const int N = s->nranks, G = opt->ranks_per_node > 0 ? opt->ranks_per_node : N;
    hier h = {.s = s, .N = N, .G = G, .K = N / G, .C = s->nchunks, .S = N > 1 ? N : 0, .err = err, .errlen = errlen};
    s->split = false;
    s->nslices = h.S;
    for (int c = 0; c < s->nchunks; c++) s->owner[c] = 0;
    if (!(h.kept = calloc((size_t)h.C * (size_t)h.K, sizeof *h.kept))) return snprintf(err, errlen, "out of memory"), 1;
    wp_result rc = WP_OK;
    for (int j = 0; j < h.K && !rc; j++) rc = node_ring(&h, j);
    free(h.kept);
    return rc ? rc : (wp_result)h.rc;
}

/* K nodes of G ranks, a node's ring over G chunks: G divides N and C = G. */
wp_result gen_check_hier(int nranks, int nmb, int nchunks, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)nmb;
    int G, rc = gen_check_nodes(strategy_name(WP_STRAT_HIER), nranks, opt, &G, err, errlen);
    if (!rc && nchunks != G)
        rc = gen_bad(err, errlen, "--num-chunks: weipipe-hier needs one chunk per rank of a node (%d), not %d", G, nchunks);
    return rc;
}
