/* Sequence segments in the executor (ir.h: nseg; Seq1F1B). The lists name units u = sample*k + j;
 * these helpers turn a unit into what the model and the loader need, so that executor.c runs
 * segmented lists with no strategy branch:
 *   - the activation state of a unit is a model segment state [t_j, t_{j+1}) linked to the same
 *     chunk's state of unit u-1 (model_acts_create_segment / model_acts_relink);
 *   - F of a unit reads its slice of the sample's tokens and targets;
 *   - a step's tokens (the loss mean) count samples, not units.
 * Without segments every helper reduces to the whole micro-batch. */
#ifndef WP_RUNTIME_UNITS_H
#define WP_RUNTIME_UNITS_H

#include "rt_impl.h"
#include "result.h"

/* Boundaries from the model (seqsplit_bounds) and buffer sizes for the pool. 0, or 1 with a reason. */
wp_result rt_seg_init(wp_rt *rt, char *err, size_t errlen);
/* Whether a state made for unit a can be reused for unit b (same segment, same sizes). */
bool rt_seg_same_shape(const wp_rt *rt, int a, int b);
/* A new activation state for unit mb of chunk (not yet linked). NULL with a kern error. */
wp_acts *rt_seg_acts_create(wp_rt *rt, int chunk, int mb);
/* Link a state taken for unit mb to prev, the state of unit mb-1 (NULL for a first segment). */
wp_result rt_seg_link(wp_rt *rt, wp_acts *a, int mb, wp_acts *prev, char *err, size_t errlen);
/* Whether unit mb has a segment before it in its sample. */
bool rt_seg_has_prev(const wp_rt *rt, int mb);
/* The loader's micro-batch of unit mb. */
int rt_seg_sample(const wp_rt *rt, int mb);
/* Upload unit mb's slice of the host tokens and targets of its sample (rt->h_tok, rt->h_tgt). */
void rt_seg_upload(wp_rt *rt, int mb, int32_t *d_tok, int32_t *d_tgt);
/* The share of a whole micro-batch's cost that action x does (seq_split.h's seqsplit_cost_share for a
 * compute on a segment; 1 otherwise): pacing and measured op times are per whole micro-batch. */
double rt_seg_share(const wp_rt *rt, const wp_action *x);
/* Targets of unit mb (b * its segment length; with target masks, those of its slice of
 * rt->h_tgt that are not -1), and of the whole step (all ranks' samples: the loader counts
 * them, so every rank knows the step's count before its first backward). */
int64_t rt_seg_tokens(const wp_rt *rt, int mb);
double rt_seg_step_tokens(const wp_rt *rt);

#endif
