/* The builder shared by the activation-passing strategies (gpipe, interleaved-1f1b, zb-h1,
 * zb-h2, zb-v). A generator only says in which order each rank runs its computes; the builder
 * derives every activation transfer, load, free, the REDUCE and the UPDATEs.
 *
 * Placement: chunk c lives on rank s->owner[c] and that rank owns it (fp32 master, AdamW state),
 * so weights never move: LOAD of each held chunk when the step begins, FREE before REDUCE, UPDATE
 * after it. act_plan_init places chunk c on rank c mod N: with C = vN a rank holds chunks r, r+N,
 * ..., r+(v-1)N (Megatron's looped stages), and the output of chunk c goes to rank (c+1) mod N:
 * with v > 1 rank N-1 feeds rank 0 (the wrap). A generator that places chunks otherwise sets
 * s->owner[] after act_plan_init (zb-v: the V, chunk c and chunk 2N-1-c on one rank); the owner
 * is already the IR's placement (ir.h), which the validator, the simulator and the runtime read,
 * so nothing else needs to know.
 *
 * Transfers (channels act and actgrad of ir.h):
 *   - F(c,mb) with c < C-1 writes A[c][mb]: SEND to the holder of c+1 right after the F;
 *     B(c,mb) or BW(c,mb) with c > 0 writes GA[c-1][mb]: SEND to the holder of c-1.
 *   - A sent buffer is freed after the sender's next compute (so the sender never waits for its
 *     own send), or at the end of the list.
 *   - The consumer frees what it read right after the compute that read it.
 *   - Receives: for each (source, channel) the k-th RECV must name the k-th buffer the source
 *     sends (FIFO matching, ir.h). The k-th RECV is posted right after the compute that consumed
 *     item k-1 of that FIFO (the first at the start of the list): one item prefetched per stream,
 *     as gen_1f1b does. But it is posted earlier when the source sends item k sooner, timed with
 *     unit computes (F = B = W = 1, BW = 2, free links): after the last compute that has ended by
 *     then. Otherwise a looped schedule deadlocks: breadth-first, rank N-1 sends its chunk's
 *     outputs long before rank 0 finishes its own chunk and reads them, the sender's FREE waits
 *     for the receive, and the receiver's next receive waits behind its own FREE. With the timed
 *     rule no sender waits on a FREE in the unit timing, so the lists cannot deadlock (whether
 *     they do does not depend on timing, engine.h); the receiver holds the backlog instead, which
 *     is the memory such an order really needs. Never later than one compute before any item from
 *     k on is read, never before the RECV of item k-1.
 *   - With one rank (N = 1) nothing moves: A and GA are written and read on the same rank.
 * W(c,mb) and BW(c,mb) add straight into the owner's fp32 accumulator (the holder owns). */
#ifndef WP_ACT_BUILD_H
#define WP_ACT_BUILD_H

#include "ir.h"
#include "result.h"

typedef struct {
    uint8_t op;
    int16_t chunk;
    int32_t mb;
} ab_op;

typedef struct {
    wp_schedule *s;
    ab_op *ops[WP_MAX_CHUNKS]; /* per rank, in run order */
    int n[WP_MAX_CHUNKS], cap[WP_MAX_CHUNKS];
    bool oom;
} act_plan;

/* Sets owner[c] = c mod N (the looped layout above; a generator may overwrite owner[] next). */
void act_plan_init(act_plan *p, wp_schedule *s);
/* Rank runs op (F, B, W or BW) on (chunk, mb) after everything added to it before. */
void act_add(act_plan *p, int rank, wp_op op, int chunk, int mb);
/* Emit every rank's list into p->s. 0, or 1 with a reason (out of memory, a compute placed on a
 * rank that does not hold its chunk, or a consumer that reads before its producer wrote the
 * buffer on one rank). Frees the plan either way. */
wp_result act_build(act_plan *p, char *err, size_t errlen);

/* The rank that holds chunk c: its owner. */
static inline int act_holder(const wp_schedule *s, int chunk) { return s->owner[chunk]; }

#endif
