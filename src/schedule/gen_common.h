/* What the generators share (private to src/schedule): their prototypes and those of their shape
 * rules, made from strategies.def, and the helpers they call. generate.c dispatches to them;
 * this header and gen_common.c never include the dispatcher, so the generators sit below it. */
#ifndef WP_SCHEDULE_GEN_COMMON_H
#define WP_SCHEDULE_GEN_COMMON_H

#include "schedule.h"
#include "result.h"

/* A strategy's generator: fill the rank lists of s (sched_init done, shape checked). 0, 2 (bad
 * input, err says what would be valid) or 1 (out of memory, an internal inconsistency). */
typedef wp_result gen_fn(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen);
/* A strategy's own shape rule beyond schedule_check_shape's: 0, or 2 with a one-line reason. */
typedef wp_result gen_check_fn(int nranks, int nmb, int nchunks, const wp_gen_opts *opt, char *err, size_t errlen);

#define GEN_PROTO_(id, name, gen, check, chunks, traits, knobs) gen_fn gen; gen_check_fn check;
WP_STRATEGIES(GEN_PROTO_)
#undef GEN_PROTO_

/* snprintf into err; returns 2 (bad input). */
wp_result gen_bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* G = opt->ranks_per_node (0: N) ranks per node must divide N (weipipe-hier, tawpipe): 0, or 2
 * naming --ranks-per-node and the strategy `name`. *G gets G. */
wp_result gen_check_nodes(const char *name, int nranks, const wp_gen_opts *opt, int *G, char *err, size_t errlen);

#endif
