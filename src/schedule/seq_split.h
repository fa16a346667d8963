/* Sequence segments of a schedule (ir.h: wp_schedule.nseg; Seq1F1B, Sun et al.). With nseg =
 * k >= 2 every micro-batch is cut along the sequence into k segments and the lists name units
 * u = sample * k + j (segment j of micro-batch `sample`). Where segment j starts and ends is a
 * function of the model (seqsplit_bounds): a computation-wise split, so the validator, the simulator
 * and the runtime, which all hold the layout, agree on the boundaries without storing them twice.
 *
 * Computation-wise split (the paper's): a segment's cost is linear in its tokens for the matrix
 * products but its attention grows with the keys before it (query i scores i+1 keys), so equal
 * token counts would make later segments slower. The boundaries are chosen so that every segment
 * carries about 1/k of the F + B + W FLOPs of the whole model (layout_chunk_flops' counts), with
 * at least one token each; later segments come out shorter. */
#ifndef WP_SCHEDULE_SEQ_SPLIT_H
#define WP_SCHEDULE_SEQ_SPLIT_H

#include "ir.h"
#include "result.h"

#define WP_MAX_SEGMENTS 64

/* Segments per micro-batch (1 when the schedule has none) and micro-batches per step. */
static inline int sched_nseg(const wp_schedule *s) { return s->nseg > 1 ? s->nseg : 1; }
static inline int sched_samples(const wp_schedule *s) { return s->nmb / sched_nseg(s); }

/* bounds[0..k]: 0 = t_0 < t_1 < ... < t_k = seq, the computation-wise split of L's sequence.
 * L == NULL (no model): k segments of one nominal token each. 0, or 2 with a reason (k out of
 * [1, WP_MAX_SEGMENTS], or fewer tokens than segments). */
wp_result seqsplit_bounds(const wp_layout *L, int k, int *bounds, char *err, size_t errlen);

/* Share of chunk c's whole-sequence cost of op (F, B, W, BW) that segment [t0, t1) of a
 * sequence of `seq` tokens takes: linear in its tokens for the matrix products, in its
 * query-key pairs for attention. L == NULL: its share of the tokens. */
double seqsplit_cost_share(const wp_layout *L, int chunk, int op, int t0, int t1, int seq);

/* buf_bytes for a schedule: an A or GA of a segmented schedule holds its segment's tokens only.
 * bounds as seqsplit_bounds gives them (ignored without segments). */
size_t sched_buf_bytes(const wp_schedule *s, const int *bounds, const wp_layout *L, wp_buf b);

#endif
