/* The validator: runs all ranks' lists symbolically, twice in a row (step k then step k+1, from
 * the state the lists say they carry), under the transfer semantics of ir.h, and checks:
 *   - every action's inputs are on its rank when it runs, weights with the step's version;
 *   - exactly one F, one B and one W-pass (or one BW) per (chunk, micro-batch) and step;
 *     F(c,mb) after F(c-1,mb), B(c,mb) after F(c,mb) on the same rank and after B(c+1,mb),
 *     W after B on the same rank;
 *   - every micro-batch's gW contribution reaches the chunk's owner exactly once (through ACC or
 *     straight into its accumulator) before the owner's REDUCE, and UPDATE comes after REDUCE;
 *     LOAD only by the owner, of the master's current version;
 *   - sends and receives pair up in FIFO order per (src, dst, channel) with identical names (hence
 *     sizes); nothing is left unmatched; no deadlock; no use after FREE, no double FREE, no two
 *     buffers of one name on a rank;
 *   - every buffer is freed by the end of the step, except the carried ones, which must be held
 *     again (one version later) when the step ends.
 * The first broken rule is reported on one line naming rank, action index and what broke.
 * The report (wp_run, engine.h) gives per rank the peak buffers of each kind (slot pool sizes), the
 * peak activation states (count, and bytes via model_acts_bytes), and bytes sent and received per
 * step by kind (W in the weight dtype, GW in the grad dtype, A/GA in the activation dtype). */
#ifndef WP_SCHEDULE_VALIDATE_H
#define WP_SCHEDULE_VALIDATE_H

#include "engine.h"
#include "result.h"

/* L may be NULL (counts without bytes). Returns 0 when valid, or 1 with the reason in err (the
 * first broken rule, or out of memory: engine_run). rep is filled in every case; free it with
 * run_free. */
wp_result sched_validate(const wp_schedule *s, const wp_layout *L, wp_run *rep, char *err, size_t errlen);

#endif
