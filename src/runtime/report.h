/* What train tells the user: a progress line and a JSON metrics line per step (rank 0), the
 * same numbers as TensorBoard scalars (--tensorboard, tb_events.h), and at
 * the end the measured bubble of every rank next to the simulator's prediction for the same
 * lists with the measured op times, and the payload bytes per step next to the validator's. */
#ifndef WP_RUNTIME_REPORT_H
#define WP_RUNTIME_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "clock_sync.h"
#include "executor.h"
#include "train.h"
#include "result.h"
#include "tb_events.h"

typedef struct {
    int64_t steps;              /* steps run by this process */
    double compute_s, step_s, wait_s; /* summed over the steps after the first (warm-up excluded) */
    double issue_s, device_s;         /* the same steps' rt_step_stats.issue_s, device_s, summed */
    int64_t steady_steps;
    wp_transport_stats start;   /* transport counters when training began */
    bool have_start;
    uint64_t eval_sent;         /* payload bytes of --eval-every traffic (not the schedule's) */
    int64_t tokens_seen;        /* since step 0 (what the metrics lines report) */
    wp_clock_sync clock;        /* --trace: this rank's offset to the job's common clock */
    size_t mem_peak;            /* the backend's peak bytes (kern_memory), set before report_final */
    size_t mem_terms[WP_MEM_TERMS]; /* its terms at that peak (kern_memory_terms) */
    double mem_resident;        /* the process's VmHWM (threads as ranks: the process's, shared) */
    /* the GPU's own figure (kern_device_free: total - free, everything on the device, this
     * process's context and other processes included), when the rank's backend opened and the
     * most at any step's end; -1: no device to ask (the CPU backend) */
    double dev_open, dev_peak;
    int dev_ordinal;
    FILE *metrics;              /* rank 0's --metrics (NULL: none): the memory line */
    wp_tb *tb;                  /* rank 0's --tensorboard (NULL: none): the memory scalars */
} train_totals;

/* --metrics (JSON lines, rank 0; docs/runtime.md): the first line of a run, {"run": {...}}
 * (time, version, commit, ranks, micro-batches, model FLOPs per step, peak, every train flag),
 * and a validation line (with --tensorboard also the scalar val/loss). Non-finite numbers are
 * written as null (TensorBoard: as they are). */
void report_run_line(const train_job *j, FILE *f);
void report_val_line(FILE *f, wp_tb *tb, int64_t step, double loss);
/* The model's FLOPs of one optimizer step (layout_chunk_flops over every chunk and micro-batch). */
double report_step_flops(const train_job *j);

/* Adds st to the totals; on rank 0 prints the progress line and appends the metrics line, and
 * its numbers as the scalars train/<key> of one TensorBoard event. */
void report_step(const train_job *j, int rank, int64_t step, double lr, const rt_step_stats *st, double t_begin,
                 train_totals *tot, FILE *metrics, wp_tb *tb);

/* Collective (every rank calls it): gathers each rank's bubble and bytes, rank 0 prints the
 * summary (and the trace when --trace is set, see train.h). Returns 0 or 1. */
wp_result report_final(train_job *j, int rank, wp_control *ctl, wp_transport *t, wp_rt *rt, const train_totals *tot,
                 char *err, size_t errlen);

/* Rank 0: a --sample-every sample after step (ids from token 0) on stderr and as a metrics line
 * {"step": K, "sample": "..."} (the bytes as text with the byte vocabulary, else the ids). */
/* The memory table (rank 0): per rank the allocator's high-water and its terms at that moment
 * beside the prediction's, and the resident set; also one {"memory": [...]} --metrics line and
 * the same numbers as TensorBoard scalars memory/rank<r>/<key> at the run's last step.
 * v: per rank (stride values apart) the peak, the resident high-water, the WP_MEM_TERMS terms. */
/* dev: the device's figures of rank 0 (at open, peak, ordinal + 1; report.c's RV_DEV), the
 * same stride. */
void report_memory(const train_job *j, const double *v, const double *dev, int stride, FILE *metrics, wp_tb *tb,
                   int64_t step);
void report_sample(const train_job *j, int64_t step, const int32_t *ids, int n, FILE *metrics);

#endif
