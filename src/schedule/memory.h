/* The memory a rank of a run will hold at its peak, per term (kernels.h's wp_mem_term): the one
 * prediction that train's start-up check, its end-of-run table, `simulate` and --strategy auto
 * all use (docs/memory.md says how each term is counted and what was measured). */
#ifndef WP_SCHEDULE_MEMORY_H
#define WP_SCHEDULE_MEMORY_H

#include <stdbool.h>

#include "engine.h"
#include "kernels.h"

/* What the run adds to its schedule's buffers. */
typedef struct {
    wp_dtype compute;   /* the backend's compute dtype (the CPU backend: fp32) */
    bool cpu;           /* the CPU backend: host staging copies count too */
    int threads;        /* CPU threads per rank (the GEMM's packing buffers) */
    bool eval;          /* --eval-every */
    bool sample;        /* --sample-every */
    int sample_tokens;  /* positions a sample decodes */
} wp_mem_cfg;

/* Rank r's predicted peak, per term, from its validated run (engine_run with sizes). */
void mem_predict(const wp_schedule *s, const wp_layout *L, const wp_rank_report *rr, int r, const wp_mem_cfg *mc,
                 double terms[WP_MEM_TERMS]);
double mem_total(const double terms[WP_MEM_TERMS]);
/* "optimizer 120.0 MiB, weights 80.0 MiB, ..." : the n largest terms, largest first. */
void mem_largest(const double terms[WP_MEM_TERMS], int n, char *out, size_t len);

#endif
