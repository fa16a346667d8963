/* The schedule IR: for every rank, the ordered list of actions of ONE optimizer step. The ring
 * runtime executes these lists as they are, step after step; the validator, the simulator and
 * the drawings read the very same lists (docs/schedules.md explains every strategy).
 * src/schedule sits on src/model only (docs/architecture.md).
 *
 * Buffers are named by what they hold (wp_buf):
 *   W[c]@v     weights of chunk c after v optimizer steps, v counted from the step the list
 *              runs in (@0: this step's weights, @1: the weights this step's UPDATE produces).
 *              lane tells copies of the same weights apart (a rank may hold the forward-stream
 *              copy W[c]@0 and the backward-stream copy W[c]@0.b at once); wire dtype =
 *              precision_weight_dtype.
 *   GW[c]      a travelling weight gradient of chunk c (grad dtype, bf16 in mixed precision).
 *              It holds the contributions of the micro-batches whose W-pass added into it since
 *              it was created by ZERO or drained by ACC; never more than one lap of the ring.
 *   A[c][mb]   output of chunk c for micro-batch mb (input of chunk c+1), activation dtype.
 *   GA[c][mb]  gradient of the loss w.r.t. A[c][mb], activation dtype.
 *   W[c]@v/k:n, GW[c]/k:n   slice k of n of a W or GW buffer: elements [k*E/n, (k+1)*E/n) of
 *              the chunk's E (slice_range). Only a sliced schedule (wp_schedule.nslices = n > 0)
 *              names slices, always with n = nslices. There a rank holds W and GW buffers as
 *              slices: a whole name means all n slices of it (ZERO creates them all, FREE drops
 *              those held, F/B/W/BW need all n present), a slice name means that one slice
 *              (SEND, RECV, LOAD, ACC, FOLD move or fill one slice at a time). A whole buffer is
 *              present when every slice of it is: so a compute reading W[c] waits until the
 *              last slice of an all-gather has arrived. The runtime keeps a whole as one
 *              allocation with its slices inside; a slice owner's optimizer holds that element
 *              range, and its checkpoint shards name the range (docs/schedules.md, FSDP).
 *   GW[c]/k:n.p  a partial sum of slice k travelling a ring reduce-scatter (lane WP_LANE_PART),
 *              apart from the rank's own GW[c] that its W-passes wrote: FOLD adds the own slice
 *              into the partial, which holds the contributions of the ranks it passed.
 *   GW[c].s    a step sum of chunk c (lane WP_LANE_SUM), held in fp32 whatever the grad dtype: FOLD
 *              adds whole travelling gradients into it, so that gradients from many laps can be
 *              summed away from the owner's accumulator without a bf16 running sum; its slices
 *              GW[c]/k:n.s travel to their owners and are drained by ACC (gen_hier.c).
 *   T.g[k>j], T.w[k>j]  tied word embeddings (tie.c; wp_schedule.tied): piece (k, j) of the one
 *              tensor, the elements that slice k of the last chunk's head and slice j of chunk 0's
 *              embedding share (k = j = 0 and the whole tensor in a schedule without slices),
 *              always fp32. T.g (lane WP_TIE_GRAD) carries the head's accumulated gradient from
 *              the head's owner to the embedding's, T.w (WP_TIE_WEIGHT) the embedding's updated
 *              master back to the head's owner. buf.idx = k * 65536 + j, buf.chunk = 0.
 * Data is not a buffer: the rank that runs F(0, mb) reads micro-batch mb's tokens, the rank that
 * runs F(last, mb) its targets, from the deterministic loader.
 * The activation state of (c, mb) (what F keeps for the backward) is not a buffer either: it
 * lives on the rank that ran F(c, mb) until its W or BW releases it.
 * Sequence segments (wp_schedule.nseg = k >= 2, Seq1F1B; seq_split.h): every micro-batch is cut
 * along the sequence into k segments, and mb in the lists names a unit u = sample*k + j, segment
 * j of micro-batch `sample` (nmb counts units: M*k). Segment boundaries are a function of the
 * model (seq_split.h: seqsplit_bounds), not of the lists. A unit reads its slice of the sample's tokens
 * and targets; A[c][u] and GA[c][u] hold its tokens only. Two extra dependencies, because a
 * segment's attention reads the keys and values its sample's earlier segments kept:
 *   F(c,u) with j > 0 runs on the rank that ran F(c,u-1), while that state is still held;
 *   B(c,u) (or BW) with j < k-1 runs after B(c,u+1): the later segment's backward hands the
 *   earlier ones their dK/dV (last in, first out across the segments of one micro-batch).
 *
 * Actions (wp_action), run strictly in list order by each rank:
 *   F(c,mb)   forward: reads `buf` (= W[c]@0, some lane) and A[c-1][mb] (c > 0); writes
 *             A[c][mb] (c < last) and creates the activation state; F(last) adds the loss.
 *   B(c,mb)   input gradient: reads `buf` (weights), GA[c][mb] (c < last) and the state from
 *             F(c,mb) on this rank; writes GA[c-1][mb] (c > 0).
 *   W(c,mb)   weight gradient (W-pass): reads the state left by B(c,mb) on this rank, adds this
 *             micro-batch's gW into GW[c] (which must be here), or into the owner's fp32
 *             accumulator when `to_master` is set (the rank must own c); releases the state.
 *   BW(c,mb)  B followed by W in one action (bit-identical to B then W).
 *   SEND(buf, peer, channel) / RECV(buf, peer, channel): post a transfer (never blocks).
 *   LOAD(buf) owner only: creates W[c]@v from its fp32 master; v must be the master's version.
 *             In a sliced schedule, rank k owns slice k of every chunk (fp32 master, AdamW state
 *             and fp32 accumulator of that slice) and LOADs W[c]@v/k:n.
 *   ZERO(buf) creates an empty GW[c].
 *   ACC(c)    owner only: adds the GW[c] it holds into its fp32 accumulator and zeroes GW[c],
 *             so a gradient is never summed in bf16 across a whole step. `buf` names what is
 *             drained: GW[c], or in a sliced schedule a slice GW[c]/k:n or a partial
 *             GW[c]/k:n.p, which rank k (the slice's owner) adds into slice k's accumulator.
 *   FOLD(buf) buf = a partial GW[c]/k:n.p held here: adds slice k of this rank's own GW[c] into
 *             it (the sum computed in fp32, stored once in the grad dtype); the own GW[c] is only
 *             read. One hop of a ring reduce-scatter (gen_fsdp.c). Or buf = a step sum GW[c].s
 *             (whole, or slice k): the same part of the own GW[c] is added into it in fp32.
 *   DUP(buf)  buf = W[c]@v on a lane other than F (whole or a slice): created as a copy of W[c]@v
 *             on lane F held here (every slice of it arrived), which stays. A rank that keeps
 *             one chunk's weights for a whole step seeds both weight streams from them
 *             (gen_hier.c). Or buf = a partial slice GW[c]/k:n.p: created from slice k of the
 *             step sum GW[c].s held here, rounded once to the grad dtype (with its
 *             contributions); the step sum stays. A node's sum then crosses the slow link in the
 *             grad dtype (gen_hier.c).
 *   TOUT(buf) buf = T.g[k>j] or T.w[k>j], created from this rank's optimizer state: T.g from the
 *             head's part of the last chunk's fp32 accumulator, which it then zeroes (it must hold
 *             all M contributions; before REDUCE), T.w from the embedding's part of chunk 0's
 *             master (after UPDATE(0)). The rank must own slice k of the last chunk (T.g) or
 *             slice j of chunk 0 (T.w).
 *   TIN(buf)  the other end: T.g added in fp32 into the embedding's part of chunk 0's accumulator
 *             (owner of slice j, before REDUCE, so the norm counts the sum once); T.w copied over
 *             the head's part of the last chunk's master (owner of slice k, after UPDATE(last)
 *             and before a LOAD of the last chunk's next version). buf stays until FREE.
 *   REDUCE    every rank once per step: the global exchange of the squared gradient norm and the
 *             inf/NaN flag (control channel, not the ring). A rank's REDUCE requires each chunk it
 *             owns to hold all M contributions; it completes when every rank has reached it.
 *   UPDATE(c) owner only, after REDUCE: AdamW (clipped by the global norm, skipped on inf/NaN)
 *             turns the accumulator into the master's next version and zeroes the accumulator.
 *             In a sliced schedule every rank runs UPDATE(c) on the slice of c it owns; W and BW
 *             may use to_master only where the rank owns every slice (one rank).
 *   FREE(buf) drop a buffer held by this rank.
 *
 * Transfer and waiting semantics (the runtime implements exactly these):
 *   - SEND and RECV are posted without blocking. Matching is FIFO per (src, dst, channel): the
 *     k-th SEND from a to b on channel ch pairs with the k-th RECV that b posts from a on ch, and
 *     both must name the same buffer (so the same size). A RECV reserves the buffer's slot at
 *     once; a rank never holds two buffers of one name.
 *   - A transfer progresses once both sides posted it and the buffer is present at the sender
 *     (a relay may SEND a buffer that is still arriving). Transfers of one (src, dst, channel)
 *     leave in FIFO order, one after the other; different channels progress independently.
 *   - An action that reads a buffer (F, B, W, BW, ACC, FOLD) waits until it has arrived (every
 *     slice of it, for a whole name in a sliced schedule); one that writes a buffer (W, BW into
 *     GW, ACC, FOLD into its partial) also waits until earlier SENDs of it have completed.
 *   - FREE waits until the buffer has arrived and its SENDs have completed, then drops it.
 *     A buffer that arrives stays until FREE.
 *   - Compute actions (F, B, W, BW, LOAD, ZERO, ACC, FOLD, DUP, TOUT, TIN, UPDATE) run on the rank's one device
 *     stream and finish before the next action starts.
 *   - REDUCE waits for all ranks' REDUCE of the same step.
 *
 * Step boundaries: each list is self-contained (every SEND pairs with a RECV in the same step),
 * all buffers are freed by the end of the step except `carry`: those a rank holds when a step
 * begins (named relative to that step, e.g. W[0]@0) and holds again when it ends (named relative
 * to the ended step, e.g. W[0]@1). Carried weights must sit at their owner, which creates them by
 * LOAD before the first step. Running a list twice in a row is checked by the validator. */
#ifndef WP_SCHEDULE_IR_H
#define WP_SCHEDULE_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "layout.h"
#include "strategy.h" /* wp_strategy, its names and traits (strategies.def) */
#include "result.h"

typedef enum {
    WP_OP_F = 0,
    WP_OP_B,
    WP_OP_W,
    WP_OP_BW,
    WP_OP_SEND,
    WP_OP_RECV,
    WP_OP_LOAD,
    WP_OP_ZERO,
    WP_OP_ACC,
    WP_OP_REDUCE,
    WP_OP_UPDATE,
    WP_OP_FREE,
    WP_OP_FOLD,
    WP_OP_DUP,
    WP_OP_TOUT,
    WP_OP_TIN,
    WP_OP_COUNT
} wp_op;

typedef enum { WP_BUF_W = 0, WP_BUF_GW, WP_BUF_A, WP_BUF_GA, WP_BUF_T, WP_BUF_KINDS } wp_buf_kind;

/* Lanes of W: the forward stream's copy and the backward stream's copy. Lanes of GW: the rank's
 * own gradient, a travelling partial sum of a reduce-scatter, and a step sum (held in fp32). */
enum { WP_LANE_F = 0, WP_LANE_B = 1 };
enum { WP_LANE_OWN = 0, WP_LANE_PART = 1, WP_LANE_SUM = 2 };
/* Lanes of T (tied word embeddings, tie.c): the head's gradient on its way to the embedding's
 * accumulator, and the embedding's updated fp32 master on its way to the head's. */
enum { WP_TIE_GRAD = 0, WP_TIE_WEIGHT = 1 };

/* Channels; the numbers agree with ring/transport.h's conventional ones (static_assert in
 * src/runtime/xfer.c, the first layer that sees both). */
enum {
    WP_SCH_WFWD = 0,   /* forward weights, r -> r+1 */
    WP_SCH_WBWD = 1,   /* backward weights */
    WP_SCH_GRAD = 2,   /* travelling gradients */
    WP_SCH_ACT = 3,    /* A: activations, r -> r+1 (1F1B) */
    WP_SCH_ACTGRAD = 4, /* GA: their gradients, r -> r-1 (1F1B) */
    WP_SCH_GRADRET = 5, /* gradients returning to their owner against the ring, r -> r-1 */
    WP_SCH_XNODE = 6,   /* weipipe-hier's once-per-step gather and gradient drain (gen_hier.c) */
    WP_SCH_TIE = 7,     /* tied embeddings: head gradient to the embedding, embedding to the head (tie.c) */
    WP_SCH_COUNT = 8
};

typedef struct {
    uint8_t kind;  /* wp_buf_kind */
    uint8_t lane;  /* W: WP_LANE_*; 0 for the others */
    int16_t chunk;
    int32_t idx;   /* W: version relative to the step; A, GA: micro-batch; GW: 0 */
    uint16_t nslices; /* 0: the whole buffer; else this is slice `slice` of nslices (W, GW) */
    uint16_t slice;
} wp_buf;

typedef struct {
    uint8_t op;        /* wp_op */
    uint8_t channel;   /* SEND, RECV */
    uint8_t to_master; /* W, BW: add gW to the owner's fp32 accumulator instead of GW[c] */
    uint8_t pad_;
    int16_t chunk;     /* compute, ACC, UPDATE (and the chunk of buf where there is one) */
    int16_t peer;      /* SEND: destination, RECV: source */
    int32_t mb;        /* compute */
    int32_t turn;      /* the generator's round this action belongs to: for reading, not semantics */
    wp_buf buf;        /* SEND, RECV, LOAD, ZERO, FREE: the buffer; F, B, BW: the weights read */
} wp_action;

typedef struct {
    int n, cap;
    wp_action *a;
    int n_carry, cap_carry;
    wp_buf *carry; /* held when the step begins, named relative to it */
} wp_rank_prog;

typedef struct {
    wp_strategy strategy;
    int nranks;      /* N */
    int nmb;         /* M micro-batches per step */
    int nchunks;     /* C */
    bool split;      /* B and W are separate actions (else fused BW) */
    int owner[WP_MAX_CHUNKS];
    int nslices;     /* 0: owner[c] holds chunk c's whole master; n: slice k of every chunk's
                        master on rank k (ZeRO-3), owner[] then only names rank 0 */
    int nseg;        /* 0 or 1: whole sequences; k >= 2: units of k sequence segments (above) */
    bool tied;       /* schedule_tie added the tied-embedding pieces (T buffers, TOUT/TIN) */
    wp_rank_prog *rank; /* [nranks] */
} wp_schedule;

/* Names. */
const char *op_name(wp_op op);
const char *channel_name(int ch);
/* "W[3]@0", "W[3]@0.b", "GW[3]", "A[2][5]", "GA[2][5]" */
char *buf_name(wp_buf b, char *out, size_t len);
/* One action as text, e.g. "F(2,5)", "SEND W[3]@0 ->1", "ACC(3)". */
char *action_text(const wp_action *a, char *out, size_t len);

wp_buf buf_w(int chunk, int version, int lane);
wp_buf buf_gw(int chunk);
wp_buf buf_a(int chunk, int mb);
wp_buf buf_ga(int chunk, int mb);
/* Inline: the simulator compares and slices names in its innermost loops. */
static inline bool buf_eq(wp_buf x, wp_buf y) {
    return x.kind == y.kind && x.lane == y.lane && x.chunk == y.chunk && x.idx == y.idx && x.nslices == y.nslices &&
           x.slice == y.slice;
}
/* Slice k of n of a whole W or GW buffer. */
static inline wp_buf buf_slice(wp_buf whole, int k, int n) {
    whole.nslices = (uint16_t)n;
    whole.slice = (uint16_t)k;
    return whole;
}
/* Elements [*off, *off + *len) of E that slice k of n covers (0 <= k < n; the sizes differ by at
 * most one element). */
void slice_range(size_t E, int k, int n, size_t *off, size_t *len);
/* Whether `rank` owns slice `slice` of chunk c's master (slice -1: every slice of it). */
bool sched_owns(const wp_schedule *s, int rank, int chunk, int slice);

/* T buffers (tied word embeddings): the name of piece (k, j) of n slices (n = 0: the whole
 * tensor, k = j = 0), and its elements [*off, *off + *len) of the tied tensor (V*h): those that
 * slice k of the last chunk (head) and slice j of chunk 0 (embedding) share; *len 0 for none.
 * tie_offsets: where the embedding starts in chunk 0 and the head in the last chunk; false when
 * the layout is not tied. */
wp_buf buf_tie(int lane, int k, int j);
int tie_piece_k(wp_buf b);
int tie_piece_j(wp_buf b);
bool tie_offsets(const wp_layout *L, size_t *emb_off, size_t *head_off, size_t *numel);
void tie_piece(const wp_layout *L, int n, int k, int j, size_t *off, size_t *len);

/* Bytes of a buffer for a model layout: W in the weight dtype, GW in the grad dtype, A and GA
 * (b*s*h values) in the activation dtype, T in fp32 (its piece of n = nslices slices). */
size_t buf_bytes(const wp_layout *L, wp_buf b);
size_t buf_bytes_n(const wp_layout *L, int nslices, wp_buf b);

/* Building and freeing. sched_init, sched_push (append an action to a rank's list) and
 * sched_push_carry (add a buffer the rank holds when the step begins) return 0, or 1 with
 * "schedule: out of memory" in err. */
wp_result sched_init(wp_schedule *s, wp_strategy strategy, int nranks, int nmb, int nchunks, char *err, size_t errlen);
void sched_free(wp_schedule *s);
wp_result sched_push(wp_schedule *s, int rank, wp_action a, char *err, size_t errlen);
wp_result sched_push_carry(wp_schedule *s, int rank, wp_buf b, char *err, size_t errlen);
/* Insert at position i (0..n) or delete position i of a rank's list: for the mutation tests.
 * sched_insert returns 0; 2 with a reason when i is outside 0..n; 1 when memory runs out. */
wp_result sched_insert(wp_schedule *s, int rank, int i, wp_action a, char *err, size_t errlen);
void sched_delete(wp_schedule *s, int rank, int i);

/* Action constructors. */
wp_action act_compute(wp_op op, int chunk, int mb, int lane, bool to_master, int turn);
wp_action act_xfer(wp_op op, wp_buf b, int peer, int channel, int turn);
wp_action act_buf(wp_op op, wp_buf b, int turn); /* LOAD, ZERO, FREE */
wp_action act_chunk(wp_op op, int chunk, int turn); /* ACC, UPDATE, REDUCE (chunk ignored) */

static inline bool op_is_compute(int op) { return op <= WP_OP_BW; }

#endif
