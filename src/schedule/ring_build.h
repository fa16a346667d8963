/* The builder shared by the weight-passing strategies (weipipe-naive, weipipe-interleave, wzb1,
 * wzb2). A generator only says which compute each rank runs in each turn; the builder derives
 * every transfer, load, drain and free from the positions of three streams on the ring.
 *
 * Streams. Every stream moves one hop r -> r+1 per turn:
 *   forward weights (lane F):  chunk c is at rank (t - c) mod N in turn t   (channel wfwd)
 *   backward weights (lane B): chunk c is at rank (t + c + 1) mod N         (channel wbwd)
 *   gradients GW[c]: at the positions of lane F or of lane B (gw_lane)      (channel grad)
 * so in turn t rank w holds forward chunk (t - w) and backward chunk (w - t - 1) mod N: the
 * paper's circle with the two weight orders on opposite sides (figures 1 and 2). Those are the
 * defaults; a generator may place each stream's chunks at other positions (ring_plan.offset), and
 * one position may then carry several chunks, each its own buffer moving with it (WZB1: backward
 * weights two positions apart, each gradient one position behind its weights).
 *
 * Segments. A stream element exists only while someone needs it. A weights segment starts at
 * the chunk's owner by LOAD from its master (the latest turn at or before the first need when
 * the stream passes the owner) and ends after the last need before the stream would pass the
 * owner again: the owner never receives its own chunk, it re-creates it. A gradient segment
 * starts by ZERO at its first contributor and collects the W-passes of the ranks it passes until
 * it would reach the owner; then it goes to the owner, forwards along the ring or backwards on
 * channel gradret, whichever is fewer hops, and the owner drains it (ACC). The owner's own
 * W-passes go straight into its fp32 accumulator (to_master).
 *
 * Turn layout of rank w's actions in turn t (the runtime's prefetch depth is one turn):
 *   1 RECV of what arrives for turn t+1     5 the computes, each followed by FREE of the A/GA it
 *   2 LOAD of weights created here           consumed (A/GA never leave the rank)
 *   3 SEND of weights moving on              6 ACC of a gradient that reached its owner
 *   4 ZERO of gradients created here         7 SEND of gradients moving on (after the W-pass)
 *                                            8 FREE: weights of this turn; gradients sent in turn
 *                                              t-1 (a turn later, so the rank never waits for it)
 *                                            9 RECV of gradients coming back against the ring (after
 *                                              8: the rank may have sent that gradient forward at t-1)
 * After the last turn: REDUCE, the owners' UPDATEs and, when staging, the LOADs of the next
 * version of the forward weights that the following step starts with (carried buffers).
 * With ring_plan.held the owner holds weights and a step sum instead of a master (below). */
#ifndef WP_RING_BUILD_H
#define WP_RING_BUILD_H

#include "ir.h"
#include "result.h"

typedef struct {
    int rank, turn, seq;
    uint8_t op;
    int16_t chunk;
    int32_t mb;
} rb_op;

/* The three streams, for ring_plan.offset. */
enum { WP_RING_WF = 0, WP_RING_WB = 1, WP_RING_GW = 2 };

typedef struct {
    wp_schedule *s;
    int gw_lane; /* WP_LANE_F or WP_LANE_B: whose positions the gradients share */
    /* Stream st holds chunk c at rank (t + offset[st][c]) mod N in turn t. ring_plan_init sets
     * the lanes of ring_pos (gradients on gw_lane's positions); a generator may place chunks
     * otherwise, several in one position included (each is its own buffer). */
    int offset[3][WP_MAX_CHUNKS];
    bool stage;  /* carry the updated forward weights into the next step */
    /* The owner keeps its chunk's weights for the whole step instead of owning a master: both
     * weight streams start from that copy (lane F is there when the lists begin, lane B is made
     * by DUP at its first use; neither is LOADed or freed here), the owner's W-passes add into
     * the travelling gradient like anyone's, a gradient that reaches the owner is FOLDed into the
     * step sum GW[c].s (which the caller ZEROs), and no REDUCE or UPDATE is emitted: the caller
     * (gen_hier.c) gathers, drains and updates around the lists. */
    bool held;
    int n_ops, cap_ops;
    rb_op *ops;
} ring_plan;

void ring_plan_init(ring_plan *p, wp_schedule *s, int gw_lane, bool stage);
/* Rank `rank` runs op on (chunk, mb) in `turn`; ops of one turn run in the order added. 0, or 1
 * with "schedule: out of memory" in err (the plan keeps the ops added before). */
wp_result ring_add(ring_plan *p, int rank, int turn, wp_op op, int chunk, int mb, char *err, size_t errlen);
/* Emit every rank's list into p->s. 0, or 1 with a reason (out of memory, or an op placed where
 * its stream is not). Frees the plan either way. */
wp_result ring_build(ring_plan *p, char *err, size_t errlen);

/* WeiPipe-Interleave's computes on the plan's ring (gen_interleave.c; owners as it sets them):
 * 0, or 1 with a reason. */
wp_result interleave_place(ring_plan *p, char *err, size_t errlen);

/* Where a stream holds chunk c in turn t. */
int ring_pos(int lane, int nranks, int chunk, int turn);

#endif
