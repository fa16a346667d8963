/* Flags into the plain config structs of the layers below (the one place where a wp_opts is
 * read on their behalf): the libraries under src/cli (kernels, optim, ring, model, io,
 * schedule, faults) take these structs and never see a flag. Each adapter checks its flags and
 * returns 0, or 2 with a one-line reason naming the flag; hf_config_apply and layout_from_opts
 * also return 1 with a reason when reading config.json or memory fails. */
#ifndef WP_CLI_ADAPTERS_H
#define WP_CLI_ADAPTERS_H

#include <stdbool.h>
#include <stddef.h>

#include "cli.h"
#include "decision.h"
#include "hf.h"
#include "job.h"
#include "kernels.h"
#include "layout.h"
#include "memory.h"
#include "lr_schedule.h"
#include "optim.h"
#include "schedule.h"
#include "sim.h"

/* ---- model (opts_model.c) ---- */
/* The model; nranks gives the default chunk count (one per rank). --chunk-layers auto: that
 * many chunks, balanced by FLOPs (model_cfg_balanced_chunks). */
wp_result model_cfg_from_opts(const wp_opts *o, int nranks, wp_model_cfg *cfg, char *err, size_t errlen);
/* How the layers are cut into chunks: as --chunk-layers says, or (a configuration of --strategy
 * auto, autotune.h) even or balanced by FLOPs whatever it says. */
typedef enum { WP_SPLIT_FLAGS, WP_SPLIT_EVEN, WP_SPLIT_BALANCED } wp_chunk_split;
wp_result model_cfg_split_from_opts(const wp_opts *o, int nranks, wp_chunk_split split, wp_model_cfg *cfg, char *err,
                              size_t errlen);
/* --chunk-layers names the layers per chunk (not empty, auto or even: then --num-chunks or the
 * strategy's default decides how many chunks; auto balances their FLOPs, even is the default). */
bool chunk_layers_listed(const wp_opts *o);
/* --precision when given, else def (a checkpoint's or config.json's own). */
wp_precision precision_from_opts(const wp_opts *o, wp_precision def);
/* --tokenizer bytes: the byte vocabulary, no tokenizer file. */
bool tokenizer_is_bytes(const wp_opts *o);
/* --init-from DIR or FILE.gguf: every model flag the user did not set is filled from the config
 * that hf_read_config or gguf_read_config read (which refuse what the model does not implement),
 * a set one must agree (2 naming the flag and the key). */
wp_result hf_config_apply(const hf_config *c, wp_opts *o, char *err, size_t errlen);

/* ---- kernels (opts_model.c) ---- */
/* --backend, --attention and --device (else local_rank modulo the visible CUDA devices:
 * kern_pick_device), with the compute dtype and CPU threads the caller chose: the one place a
 * flag becomes a kernel option. 2 for a --device this machine does not have. */
/* The run's memory as schedule/memory.h predicts it: --backend cpu given (the CPU computes in
 * fp32 and its host copies count; without it, a GPU computing in the precision's dtype), --threads (0: the machine's cores shared by nranks), --eval-every,
 * --sample-every and --sample-tokens. */
void mem_cfg_from_opts(const wp_opts *o, const wp_layout *L, int nranks, wp_mem_cfg *mc);
wp_result kern_opts_from_opts(const wp_opts *o, wp_dtype compute, int threads, int local_rank, wp_kern_opts *ko, char *err,
                        size_t errlen);

/* ---- optimizer (opts_optim.c) ---- */
/* --adam-beta1/2, --adam-eps, --weight-decay. */
wp_result adamw_hparams_from_opts(const wp_opts *o, wp_adamw_hparams *hp, char *err, size_t errlen);
/* --optimizer-memory; threads: the rank's CPU threads (the host update uses as many). */
void optim_place_from_opts(const wp_opts *o, int threads, wp_optim_place *p);
/* --lr, --min-lr, --warmup-steps, --lr-decay-style, --steps. */
wp_result lr_schedule_from_opts(const wp_opts *o, wp_lr_schedule *s, char *err, size_t errlen);
/* --resume: the model shape, vocabulary, schedule (and, not given, sequence, micro-batch,
 * precision, seed, steps, tokenizer) from the checkpoint's manifest into o, as if given; flags
 * given that disagree are all listed in one refusal (2). No --resume, or auto with nothing
 * saved: 0, o untouched. opts_resume.c. */
wp_result resume_opts_from_manifest(wp_opts *o, char *err, size_t errlen);

/* ---- ring (opts_ring.c) ---- */
/* --tcp-streams, --bind, --connect-timeout, --timeout, --link-*, --ranks-per-node, --node-link-*. */
wp_result net_cfg_from_opts(const wp_opts *o, wp_net_opts *n, char *err, size_t errlen);
/* --ib-device, --ib-port, --ib-gid-index. */
wp_result ib_dev_cfg_from_opts(const wp_opts *o, ib_dev_cfg *dev, char *err, size_t errlen);
/* --transport (a built row of the table), --nranks, the network and device flags, --backend;
 * the process hooks are left NULL for the command to fill. */
wp_result job_cfg_from_opts(const wp_opts *o, wp_job_cfg *cfg, char *err, size_t errlen);

/* ---- schedule (opts_schedule.c): what `weipipe schedule` and `simulate` share ---- */
typedef struct {
    int nranks, nmb;
    wp_gen_opts gen;
} wp_pipe_shape;

/* --nranks, --num-microbatches and the generator options of --strategy (gen_opts_from_opts). */
wp_result pipe_shape_from_opts(const wp_opts *o, wp_pipe_shape *p, char *err, size_t errlen);
/* The generator options (--wzb2-owner, --i1f1b-order, --seq-segments, checked against
 * --seq-length where strategy st, or all, cuts sequences, --ranks-per-node, --warmup-extra):
 * the one place a wp_gen_opts is made from flags (simulate, schedule, autotune and train). */
wp_result gen_opts_from_opts(const wp_opts *o, wp_strategy st, wp_gen_opts *g, char *err, size_t errlen);
/* --warmup-extra: a count, or auto (from --ranks-per-node and the link flags). */
wp_result warmup_extra_from_opts(const wp_opts *o, int *extra, bool *is_auto, char *err, size_t errlen);

/* The model and its layout with default_chunks chunks (strategy_default_chunks) unless
 * --num-chunks/--chunk-layers say otherwise. When the model's size was left at its default (no
 * --num-layers, --chunk-layers or config file line) and has fewer layers than chunks, the layers
 * are raised to one per chunk and *raised says so; a model given explicitly is never changed.
 * Caller frees with layout_free. */
wp_result layout_from_opts(const wp_opts *o, int nranks, int default_chunks, wp_layout *L, bool *raised, char *err,
                     size_t errlen);
/* The same with the chunks cut as split says (model_cfg_split_from_opts). */
wp_result layout_split_from_opts(const wp_opts *o, int nranks, int default_chunks, wp_chunk_split split, wp_layout *L,
                           bool *raised, char *err, size_t errlen);

/* Links, device speed and memory bandwidth. */
wp_result machine_from_opts(const wp_opts *o, wp_machine *m, char *err, size_t errlen);

#endif
