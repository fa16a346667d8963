/* The strategies' rows as data (strategy.h); the generators are dispatched by generate.c. */
#include "strategy.h"

#include <assert.h>
#include <string.h>

typedef struct {
    const char *name;
    wp_chunk_rule chunks;
    unsigned traits;
} row;

#define ROW_(id, name, gen, check, chunks, traits, knobs) {name, chunks, traits},
static const row rows[] = {WP_STRATEGIES(ROW_)};
#undef ROW_
static_assert(sizeof rows / sizeof rows[0] == WP_STRAT_COUNT, "one row per wp_strategy");

const char *strategy_name(wp_strategy s) { return s < WP_STRAT_COUNT ? rows[s].name : "?"; }

bool strategy_parse(const char *name, wp_strategy *s) {
    for (int i = 0; i < WP_STRAT_COUNT; i++)
        if (strcmp(name, rows[i].name) == 0) {
            *s = (wp_strategy)i;
            return true;
        }
    return false;
}

bool strategy_has(wp_strategy s, unsigned traits) { return s < WP_STRAT_COUNT && (rows[s].traits & traits) == traits; }

wp_chunk_rule strategy_chunk_rule(wp_strategy s) { return s < WP_STRAT_COUNT ? rows[s].chunks : WP_CHUNKS_ONE_PER_RANK; }

wp_strategy strategy_baseline(void) {
    int i = 0;
    while (i < WP_STRAT_COUNT - 1 && !(rows[i].traits & WP_TRAIT_BASELINE)) i++;
    return (wp_strategy)i;
}

int strategy_default_chunks(wp_strategy s, int nranks, int ranks_per_node) {
    switch (strategy_chunk_rule(s)) {
    case WP_CHUNKS_V_PER_RANK: return 2 * nranks;
    case WP_CHUNKS_NODE: return ranks_per_node > 0 && ranks_per_node < nranks ? ranks_per_node : nranks;
    case WP_CHUNKS_ONE_PER_RANK:
    case WP_CHUNKS_ANY: break;
    }
    return nranks;
}
