/* Breaking a schedule on purpose, one invariant at a time, to prove that the validator catches
 * each kind of mistake (tests/schedule, and the WEIPIPE_SCHEDULE_BREAK hook of `weipipe
 * schedule` that tests its exit code 1). */
#ifndef WP_SCHEDULE_MUTATE_H
#define WP_SCHEDULE_MUTATE_H

#include "ir.h"
#include "result.h"

typedef enum {
    WP_MUT_DROP_SEND = 0, /* delete a SEND: its receiver waits forever */
    WP_MUT_SWAP_VERSION,  /* a compute reads W[c]@1 instead of @0 */
    WP_MUT_DOUBLE_GW,     /* a W-pass (or BW) runs twice: a doubled gW contribution */
    WP_MUT_REORDER_RECV,  /* two receives from one peer on one channel swap places */
    WP_MUT_FREE_EARLY,    /* a weights buffer is freed right before the compute that reads it */
    WP_MUT_DROP_ACC,      /* an owner never drains a travelling gradient */
    WP_MUT_UPDATE_EARLY,  /* an UPDATE moves before its rank's REDUCE */
    WP_MUT_COUNT
} wp_mutation;

const char *mutation_name(wp_mutation m);
/* Whether name is a mutation (then *m is set). A question, not a fallible call: it has no err
 * because its caller (the WEIPIPE_SCHEDULE_BREAK hook) lists the names in its own refusal. */
bool mutation_parse(const char *name, wp_mutation *m);
/* Phrases, separated by '|', one of which the validator's message contains when it catches this
 * mutation (a dropped send shows as the next send pairing with the wrong receive, or as a
 * deadlock, depending on what follows it). */
const char *mutation_expect(wp_mutation m);
/* Apply m at its first opportunity (lowest rank, earliest action). 0; 2 with a reason naming m
 * and the strategy when the schedule offers none (e.g. no SEND with one rank, no ACC in 1f1b);
 * 1 with a reason when memory runs out. */
wp_result sched_mutate(wp_schedule *s, wp_mutation m, char *err, size_t errlen);

#endif
