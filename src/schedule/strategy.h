/* What a strategy is, as data (strategies.def): its name, how many chunks it takes, its traits.
 * Callers ask these questions instead of comparing strategies. */
#ifndef WP_SCHEDULE_STRATEGY_H
#define WP_SCHEDULE_STRATEGY_H

#include <stdbool.h>

/* How many chunks C a strategy takes on N ranks (G ranks per node). */
typedef enum {
    WP_CHUNKS_ONE_PER_RANK, /* C = N */
    WP_CHUNKS_V_PER_RANK,   /* C = vN (interleaving), v >= 1; 2N by default, the smallest interleaving */
    WP_CHUNKS_ANY,          /* any C >= 1 (fsdp: the unit one all-gather moves); N by default */
    WP_CHUNKS_NODE,         /* C = G, one per rank of a node (its own rule checks G); G by default */
} wp_chunk_rule;

/* Traits, as bits. */
enum {
    /* activation passing that runs every micro-batch on every rank: any M (else M is a multiple
     * of N, each rank running M/N whole micro-batches) */
    WP_TRAIT_ANY_M = 1 << 0,
    /* takes --warmup-extra: extra warm-up forwards before a slow hop (schedule.h) */
    WP_TRAIT_WARMUP = 1 << 1,
    /* ... but only an explicit count: --warmup-extra auto gives it none (gen_common.c says why) */
    WP_TRAIT_WARMUP_EXPLICIT = 1 << 2,
    /* splits sequences into --seq-segments units (seq_split.h) */
    WP_TRAIT_SEGMENTS = 1 << 3,
    /* the strategy every other is compared to (simulate's vs_1f1b column) */
    WP_TRAIT_BASELINE = 1 << 4,
};

#define WP_STRAT_ENUM_(id, name, gen, check, chunks, traits, knobs) WP_STRAT_##id,
#define WP_STRAT_CHOICE_(id, name, gen, check, chunks, traits, knobs) name "|"
#include "strategies.def"

typedef enum { WP_STRATEGIES(WP_STRAT_ENUM_) WP_STRAT_COUNT } wp_strategy;

/* "1f1b|weipipe-naive|...|tawpipe|": the names in table order, each followed by a bar (the
 * --strategy flag's choices, flags.def). */
#define WP_STRATEGY_CHOICES WP_STRATEGIES(WP_STRAT_CHOICE_)

const char *strategy_name(wp_strategy s);
/* Whether name is a strategy (then *s is set). A question, not a fallible call: it has no err
 * because each caller words the refusal for its own command (schedule: "all is for simulate"). */
bool strategy_parse(const char *name, wp_strategy *s);
/* Whether s has every trait in the bits `traits` (WP_TRAIT_*). */
bool strategy_has(wp_strategy s, unsigned traits);
wp_chunk_rule strategy_chunk_rule(wp_strategy s);
/* The strategy with WP_TRAIT_BASELINE. */
wp_strategy strategy_baseline(void);

/* Chunks a strategy uses when --num-chunks is 0 (its wp_chunk_rule's default; ranks_per_node 0
 * = all ranks on one node). */
int strategy_default_chunks(wp_strategy s, int nranks, int ranks_per_node);

#endif
