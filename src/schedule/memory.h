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
    bool host_optim;    /* --optimizer-memory host: the owner's state lives in host memory */
} wp_mem_cfg;

/* What a rank holds in host memory for its optimizer with --optimizer-memory host (all zero
 * otherwise): the owner state that left the device (fp32 master, m, v, accumulator: the 16
 * bytes/param of the optimizer term) and the pinned staging buffers between them, two of the
 * largest piece it owns in the weight dtype (copies up) and two in the dtype its ACCs drain
 * (copies down): double-buffered, so one is on the link while the CPU fills or reads the other. */
typedef struct {
    double optim, staging_up, staging_down;
} wp_mem_host;

/* Rank r's predicted peak, per term, from its validated run (engine_run with sizes). */
void mem_predict(const wp_schedule *s, const wp_layout *L, const wp_rank_report *rr, int r, const wp_mem_cfg *mc,
                 double terms[WP_MEM_TERMS]);
/* Rank r's host side (memory.c: mem_predict_host); mem_predict's optimizer term is then only
 * the device's fp32 windows of the rank's to_master W-passes, and device + host is the
 * device-resident total plus the windows and the staging (docs/memory.md). */
void mem_predict_host(const wp_schedule *s, const wp_layout *L, const wp_rank_report *rr, int r, const wp_mem_cfg *mc,
                      wp_mem_host *h);
double mem_host_total(const wp_mem_host *h);

/* What a GPU holds for a run beyond the program's own allocations (kern_memory, which the
 * terms above predict), all zero on the CPU backend. Estimates until a GPU run measures them
 * (docs/memory.md says where each comes from):
 *   context: the CUDA context of a process on a device (the runtime's primary context: ranks
 *            that are threads of one process share it), its module images and the cuBLAS and
 *            cuDNN handles' own allocations;
 *   cudnn:   cuDNN's attention workspace per rank (the backend allocates what the graph's
 *            get_workspace_size asks, outside kern_memory): the fp32 dQ accumulator of the
 *            flash backward, micro-batch x seq x heads x head_dim x 4 bytes;
 *   sibling: a rank of N > 1 opens a transfer context beside its compute context
 *            (streams.h), which has its own cuBLAS workspace. */
typedef struct {
    double context, cudnn, sibling;
} wp_mem_device;
void mem_predict_device(const wp_layout *L, const wp_mem_cfg *mc, int nranks, wp_mem_device *d);
/* The estimate of a CUDA context on a Hopper GPU with CUDA 12/13 and lazy module loading, bytes. */
#define WP_MEM_CUDA_CONTEXT_MIB 500.0
double mem_total(const double terms[WP_MEM_TERMS]);
/* "optimizer 120.0 MiB, weights 80.0 MiB, ..." : the n largest terms, largest first. */
void mem_largest(const double terms[WP_MEM_TERMS], int n, char *out, size_t len);

#endif
