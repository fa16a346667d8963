/* `weipipe train`: what every rank shares (model layout, validated schedule, hyper-parameters,
 * where to resume from) and the per-rank training loop around the executor.
 * src/runtime is the top library: it uses every layer below (docs/architecture.md). */
#ifndef WP_RUNTIME_TRAIN_H
#define WP_RUNTIME_TRAIN_H

#include <stdint.h>

#include "checkpoint.h"
#include "cli.h"
#include "decision.h"
#include "fsutil.h"
#include "gguf.h"
#include "loader.h"
#include "lr_schedule.h"
#include "optim.h"
#include "control.h"
#include "transport.h"
#include "job.h"
#include "engine.h"
#include "memory.h"
#include "schedule.h"
#include "trace.h"
#include "tokenizer.h"

typedef struct {
    wp_opts o;                  /* a copy: --init-from may fill model flags from config.json */
    gguf_file *init_gguf;       /* --init-from FILE.gguf, parsed once (the config, the tokenizer, each rank's masters) */
    int nranks, nmb;
    wp_layout L;
    wp_schedule s;
    bool have_layout, have_sched;
    wp_lr_schedule lr;
    wp_adamw_hparams hp;
    wp_job_cfg job;             /* transport, ranks and network (ring/job.h) */
    char resume_dir[WP_PATH_MAX]; /* "" = fresh start */
    int64_t start_step;
    wp_shard_list data;         /* --data's training shards */
    wp_loader *data_probe;      /* their loader while train_job_prepare checks and measures them */
    wp_shard_list val;          /* validation shards: --val-data, else a --data directory's *val*.bin; may be empty */
    char val_warning[640];      /* one line rank 0 prints: validation reads training shards (on purpose) */
    wp_run run;                 /* the validator's report (peaks and bytes per rank) */
    bool have_run;
    wp_trace *trace;            /* --trace: every rank of this process writes its actions */
    double t_origin;            /* wp_now() at the start (a --trace counts from the job's common clock instead, clock_sync.h) */
    char tokenizer[WP_PATH_MAX]; /* the run's tokenizer file; "" = none */
    char tokenizer_name[32];    /* its name in each checkpoint: tokenizer.model or tokenizer.json */
    char *tokenizer_data;       /* its bytes, read once at the start, written into each checkpoint */
    wp_tokenizer *tok;          /* the tokenizer opened (NULL: none): --sample-every's BOS, EOS and text */
    size_t tokenizer_size;
    char *side_data[CKPT_SIDE_FILES]; /* checkpoint.h's side files found beside the tokenizer, or NULL */
    size_t side_size[CKPT_SIDE_FILES];
    bool calibrating;           /* --calibrate or --strategy auto: train_rank measures the machine first */
    bool auto_strategy;         /* --strategy auto: the layout and schedule are rebuilt from the pick */
    wp_strategy strategy;       /* the one that runs: --strategy's, or auto's pick (1f1b until the pick, while
                                 * o says auto: the flags every rank hashes) */
    double auto_predicted;      /* the pick's predicted tokens/s (set by the pick) */
    double peak_tflops;         /* per rank, for MFU (peak.h; set by rank 0 when its backend opens; 0: unknown) */
} train_job;

/* Everything checked before any rank starts: model, schedule (validated), memory, flags.
 * Returns 0, 2 (bad usage or input, reason in err) or 1. */
wp_result train_job_prepare(train_job *j, const wp_opts *o, char *err, size_t errlen);
void train_job_free(train_job *j);

/* --strategy auto: the job is prepared without a schedule (a provisional 1f1b names the
 * strategy; flags, model, data, tokenizer and resume are checked as usual); train_rank then
 * calibrates on the real ranks, rank 0 ranks every strategy and knob setting with the measured
 * machine (autotune_held: b, M and every knob flag the user set are kept) and broadcasts the
 * pick, and each process rebuilds the layout and validated schedule from it before training.
 * The job's flags (the handshake's hash) carry "auto" itself, so every rank agrees on them.
 * --calibrate FILE: train_rank calibrates, rank 0 writes FILE, and no training runs. */

/* The whole training run of one rank. Returns 0
 * or 1 with one line in err (2 for bad input found late, e.g. a checkpoint of another shape).
 * local_rank: the rank's index on its host; its device is --device, else local_rank modulo the
 * visible devices. */
wp_result train_rank(train_job *j, int rank, int local_rank, wp_transport *t, wp_control *ctl, char *err, size_t errlen);

/* The run's memory prediction for rank r, per term (schedule/memory.h with this job's backend,
 * threads, --eval-every and --sample-every): the start-up check's and the end table's. */
void train_mem_cfg(const train_job *j, wp_mem_cfg *mc);
void train_mem_predict(const train_job *j, int r, double terms[WP_MEM_TERMS]);

#endif
