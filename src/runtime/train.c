/* `weipipe train`, shared part: the job every rank runs (model, schedule, memory check) and the
 * per-rank loop around rt_step (progress, metrics, checkpoints, stop requests). */
#include "adapters.h"
#include "train.h"

#include "autotune.h"
#include "calibrate.h"
#include "print.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evaluate.h"
#include "executor.h"
#include "nonfinite.h"
#include "stall.h"
#include "checkpoint.h"
#include "gguf.h"
#include "hf.h"
#include "loader.h"
#include "stop.h"
#include "log.h"
#include "memlimit.h"
#include "model.h"
#include "peak.h"
#include "report.h"
#include "sample_run.h"
#include "bootstrap.h"
#include "clock.h"
#include "device_tp.h"
#include "seq_split.h"
#include "shard.h"
#include "streams.h"
#include "tb_events.h"
#include "tokenizer.h"


/* ---- the job ---- */

static wp_result prepare_model(train_job *j, bool apply_hf, char *err, size_t errlen) {
    wp_model_cfg cfg;
    if (apply_hf && j->o.init_from[0]) {
        /* a llama.cpp file (told by its magic) is parsed here, once: its tokenizer and every
         * rank's masters are read from j->init_gguf */
        hf_config c;
        WP_TRY(gguf_open_if(j->o.init_from, &j->init_gguf, err, errlen));
        WP_TRY(j->init_gguf ? gguf_read_config(j->init_gguf, &c, err, errlen) : hf_read_config(j->o.init_from, &c, err, errlen));
        WP_TRY(hf_config_apply(&c, &j->o, err, errlen));
    }
    /* --num-chunks 0: the strategy's default (two per rank for interleaved-1f1b); auto: the
     * provisional strategy's default is not written into the flags the pick reads */
    if (!j->o.num_chunks && !chunk_layers_listed(&j->o) && !j->auto_strategy && j->strategy < WP_STRAT_COUNT)
        j->o.num_chunks = strategy_default_chunks(j->strategy, j->nranks, (int)j->o.ranks_per_node);
    int rc = model_cfg_from_opts(&j->o, j->nranks, &cfg, err, errlen);
    if (rc == 0) rc = layout_build(&cfg, &j->L, err, errlen);
    if (rc) return rc;
    j->have_layout = true;
    return 0;
}

static wp_result prepare_schedule(train_job *j, char *err, size_t errlen) {
    const wp_strategy st = j->strategy;
    if (st == (wp_strategy)WP_STRAT_ALL)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--strategy: all is for simulate; train runs one strategy (or auto: the fastest "
                    "on this machine)");
    wp_gen_opts go;
    int rc = gen_opts_from_opts(&j->o, st, &go, err, errlen);
    if (rc) return rc;
    rc = schedule_generate(st, j->nranks, j->nmb, j->L.cfg.n_chunks, &go, &j->s, err, errlen);
    if (rc) return rc;
    j->have_sched = true;
    if (schedule_tie(&j->s, &j->L, err, errlen)) return 1; /* tied embeddings: the pieces as data (tie.c) */
    wp_sizes sz;
    sizes_from_layout(&sz, &j->L, j->s.split);
    char why[512];
    rc = engine_run(&j->s, &sz, NULL, 2, false, &j->run, why, sizeof why);
    j->have_run = rc == 0;
    if (rc) return wp_fail(WP_FAILED, err, errlen, "schedule %s does not validate: %s", strategy_name(st), why);
    return 0;
}

/* Which shards train and validate, each opened once (every token checked) before anything is
 * printed or started, so a missing or damaged one fails with its one-line reason alone (each
 * rank opens its own loaders later from the same lists). Validation never reads training data
 * unnoticed: --eval-every without validation shards is refused, and --val-data naming
 * training shards is allowed with a warning. */
static wp_result resolve_val(train_job *j, char *err, size_t errlen) {
    const wp_opts *o = &j->o;
    if (o->val_data[0]) return shard_list_resolve(&j->val, o->val_data, WP_SPLIT_VAL, "--val-data", false, err, errlen);
    if (o->eval_every == 0) return 0;
    bool dir = fs_is_dir(o->data);
    int rc = dir ? shard_list_resolve(&j->val, o->data, WP_SPLIT_VAL, "--data", true, err, errlen) : 0;
    if (rc || j->val.n > 0) return rc;
    bool file = !dir && fs_exists(o->data);
    return wp_fail(WP_BAD_INPUT, err, errlen,
                "--eval-every %" PRId64 ": no validation data: %s%s%s; give validation shards with --val-data (or --val-data "
                "'%s%s' to validate on the training data on purpose)",
                o->eval_every, dir ? "" : "--data ", o->data,
                dir ? " has no *val*.bin shard" : file ? " is one file, read for training" : " is a pattern of training shards",
                o->data, dir ? "/*train*.bin" : "");
}

static wp_result check_val(train_job *j, const wp_loader *train, char *err, size_t errlen) {
    const wp_opts *o = &j->o;
    const wp_layout *L = &j->L;
    const char *flag = o->val_data[0] ? "--val-data" : "--data";
    wp_loader_cfg lc = {.b = L->cfg.micro_batch, .s = L->cfg.seq, .vocab = L->cfg.vocab, .micro_batches = 1, .seed = (uint64_t)o->seed};
    wp_loader *probe;
    int rc = loader_open_list(&probe, &j->val, flag, &lc, err, errlen);
    if (rc) return rc;
    if (loader_shard_version(probe) != loader_shard_version(train))
        rc = wp_fail(WP_BAD_INPUT, err, errlen,
                  "%s: %s is version %d (%s tokens), but the training shard %s is version %d (%s tokens): the shards of one "
                  "dataset share one format",
                  flag, loader_shard_path(probe, 0), loader_shard_version(probe), shard_token_type(loader_shard_version(probe)),
                  loader_shard_path(train, 0), loader_shard_version(train), shard_token_type(loader_shard_version(train)));
    else if (o->eval_every > 0 && loader_windows(probe) < o->eval_batches * L->cfg.micro_batch)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "--eval-batches: %" PRId64 " micro-batches of %d sequences asked, the validation shards (%s) hold %" PRId64,
                  o->eval_batches, L->cfg.micro_batch, flag, loader_windows(probe));
    loader_close(probe);
    int first, common;
    if (rc == 0 && shard_list_overlap(&j->val, &j->data, &first, &common))
        snprintf(j->val_warning, sizeof j->val_warning,
                 "--val-data: %s%s is also read for training (--data): the validation loss is not held out", j->val.paths[first],
                 common > 1 ? " (and more shards)" : "");
    return rc;
}

static wp_result check_data(train_job *j, char *err, size_t errlen) {
    const wp_layout *L = &j->L;
    wp_loader_cfg lc = {.b = L->cfg.micro_batch, .s = L->cfg.seq, .vocab = L->cfg.vocab, .micro_batches = j->nmb,
                        .seed = (uint64_t)j->o.seed};
    int rc = shard_list_resolve(&j->data, j->o.data, WP_SPLIT_TRAIN, "--data", false, err, errlen);
    if (rc == 0) rc = resolve_val(j, err, errlen);
    if (rc) return rc;
    if ((rc = loader_open_list(&j->data_probe, &j->data, "--data", &lc, err, errlen)) != 0) return rc;
    if (j->val.n > 0) rc = check_val(j, j->data_probe, err, errlen);
    return rc; /* the probe stays open for measure_attn_share */
}

/* The windows of --data whose documents the FLOP counts' attention is measured on. */
#define ATTN_SHARE_WINDOWS 64

/* --doc-mask without --doc-length-mean: the FLOP counts (pacing, MFU, --strategy auto's ranking)
 * charge attention for the query-key pairs the data's documents keep, the mean share over the
 * first windows in reading order (every rank reads the same: the same result everywhere). */
static wp_result measure_attn_share(train_job *j, char *err, size_t errlen) {
    wp_loader *l = j->data_probe;
    if (!l || !j->L.cfg.doc_mask || j->o.doc_length_mean > 0) return 0;
    const int s = j->L.cfg.seq;
    int32_t *in = malloc(2 * (size_t)s * sizeof *in);
    if (!in) return wp_fail(WP_FAILED, err, errlen, "out of memory for %d tokens", 2 * s);
    int64_t n = loader_windows(l) < ATTN_SHARE_WINDOWS ? loader_windows(l) : ATTN_SHARE_WINDOWS;
    double sum = 0;
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        rc = loader_sequential(l, i, in, in + s);
        if (rc == 0) sum += attn_pairs_docs(in, s, j->L.cfg.doc_boundary) / attn_pairs_causal(s);
    }
    free(in);
    if (rc) return wp_fail((wp_result)rc, err, errlen, "--data: %s", loader_error(l));
    if (n > 0) j->o.attn_share_data = j->L.cfg.attn_share = sum / (double)n;
    return 0;
}

/* The run's tokenizer: --tokenizer, else the one beside the training shards (the directory of
 * the first one: a --data directory's own). Opened to check it is one and that its vocabulary
 * fits the model's; kept in every checkpoint (checkpoint.h). None (bytes or ids only) is fine. */
/* tokenizer_config.json and generation_config.json beside the tokenizer file (an --init-from
 * directory's, or a checkpoint's that carried them): special tokens, chat template and the eos
 * list go into every checkpoint, and from there into exports (transformers' AutoTokenizer needs
 * them to add no tokens of its own). */
static wp_result read_side_files(train_job *j, const char *tokenizer, char *err, size_t errlen) {
    char path[WP_PATH_MAX], why[WP_PATH_MAX + 256];
    const char *slash = strrchr(tokenizer, '/');
    int dirlen = slash ? (int)(slash - tokenizer) : 1, rc = 0;
    for (int i = 0; rc == 0 && i < CKPT_SIDE_FILES; i++) {
        if (snprintf(path, sizeof path, "%.*s/%s", dirlen, slash ? tokenizer : ".", ckpt_side_files[i]) >= (int)sizeof path)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", tokenizer);
        if (!fs_exists(path)) continue;
        rc = fs_read_small(path, (size_t)1 << 26, &j->side_data[i], &j->side_size[i], why, sizeof why);
        if (rc) rc = wp_fail((wp_result)rc, err, errlen, "%s", why);
    }
    return rc;
}

static wp_result resolve_tokenizer(train_job *j, char *err, size_t errlen) {
    const wp_opts *o = &j->o;
    char path[WP_PATH_MAX] = "", why[WP_PATH_MAX + 512];
    const char *flag = "--tokenizer";
    if (o->tokenizer[0]) {
        if (tokenizer_is_bytes(o)) return 0;
        snprintf(path, sizeof path, "%s", o->tokenizer);
    } else if (j->data.n > 0) {
        char dir[WP_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", j->data.paths[0]);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
        int rc = tok_find_in_dir(dir, path, sizeof path, why, sizeof why);
        if (rc) return wp_fail((wp_result)rc, err, errlen, "--data: %s", why);
        flag = "--data's tokenizer";
    }
    if (!path[0] && o->init_from[0] && !o->tokenizer[0] && j->init_gguf) {
        /* a llama.cpp file carries its tokenizer: the checkpoints keep it as tokenizer.json */
        int rc = gguf_tokenizer_json(j->init_gguf, &j->tokenizer_data, &j->tokenizer_size, why, sizeof why);
        if (rc) return wp_fail((wp_result)rc, err, errlen, "--init-from %s", why);
        if (!j->tokenizer_data) return 0;
        /* opened by the C encoder now, as a file would be: refused before training if it cannot
         * encode or is larger than the model; --sample-every decodes with it */
        wp_tokenizer *t;
        rc = tok_open_mem(j->tokenizer_data, j->tokenizer_size, o->init_from, &t, why, sizeof why);
        if (rc) return wp_fail((wp_result)rc, err, errlen, "--init-from %s", why);
        if (tok_vocab_size(t) > j->L.cfg.vocab) {
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "--init-from %s: its tokenizer's vocabulary of %" PRId64 " tokens exceeds the model's %" PRId64,
                      o->init_from, tok_vocab_size(t), (int64_t)j->L.cfg.vocab);
            tok_close(t);
            return rc;
        }
        snprintf(j->tokenizer_name, sizeof j->tokenizer_name, "%s", TOK_FILE_HF);
        j->tok = t;
        return 0;
    }
    if (!path[0] && o->init_from[0]) { /* a pretrained model's own tokenizer, kept with its checkpoints */
        int rc = tok_find_in_dir(o->init_from, path, sizeof path, why, sizeof why);
        if (rc) return wp_fail((wp_result)rc, err, errlen, "--init-from: %s", why);
        flag = "--init-from's tokenizer";
    }
    if (!path[0]) return 0;
    wp_tokenizer *t;
    int rc = gguf_tok_open(path, &t, NULL, why, sizeof why);
    if (rc) return wp_fail((wp_result)rc, err, errlen, "%s %s", flag, why);
    if (tok_vocab_size(t) > j->L.cfg.vocab)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s %s: its vocabulary of %" PRId64 " tokens exceeds the model's --vocab-size %" PRId64, flag,
                  path, tok_vocab_size(t), (int64_t)j->L.cfg.vocab);
    if (rc == 0 && tok_file_name(t)) {
        snprintf(j->tokenizer, sizeof j->tokenizer, "%s", path);
        snprintf(j->tokenizer_name, sizeof j->tokenizer_name, "%s", tok_file_name(t));
        /* the bytes now: every checkpoint gets the tokenizer the run was checked with */
        size_t size = 0;
        const char *bytes = tok_bytes(t, &size); /* a GGUF's: the tokenizer.json it converts to */
        if (!(j->tokenizer_data = malloc(size + 1))) rc = wp_fail(WP_FAILED, err, errlen, "%s %s: out of memory", flag, path);
        if (rc == 0) memcpy(j->tokenizer_data, bytes, size), j->tokenizer_data[size] = '\0', j->tokenizer_size = size;
        if (rc == 0) rc = read_side_files(j, path, err, errlen);
    }
    if (rc == 0) j->tok = t; /* kept for --sample-every (decode only reads it) */
    else tok_close(t);
    return rc;
}

void train_mem_cfg(const train_job *j, wp_mem_cfg *mc) {
    char from[128];
    mem_cfg_from_opts(&j->o, &j->L, j->nranks, mc);
    mc->cpu = j->o.backend == WP_BACKEND_CPU; /* train runs on the backend it names, the default too */
    mc->compute = mc->cpu ? WP_F32 : precision_act_dtype(j->L.cfg.precision);
    mc->threads = boot_threads_per_rank_environ((int)j->o.threads, boot_launched() ? 1 : j->nranks,
                                                sysconf(_SC_NPROCESSORS_ONLN), from, sizeof from); /* what train runs with */
}

void train_mem_predict(const train_job *j, int r, double terms[WP_MEM_TERMS]) {
    wp_mem_cfg mc;
    train_mem_cfg(j, &mc);
    mem_predict(&j->s, &j->L, &j->run.rank[r], r, &mc, terms);
}

/* Predicted peak per rank, plus the stated margin (memlimit.h), against what the ranks may use:
 * --device-memory each; on the CPU what this host may still give (--host-memory when given,
 * else the cgroup's room, else MemAvailable), shared by the ranks on it (all of them, or
 * --ranks-per-node). A GPU's free memory is known only once the backend is open:
 * --device-memory is the check there, and the host side of --optimizer-memory host is checked
 * against the host's memory as on the CPU. --host-memory takes the place of what the host says
 * it may give, not a second limit beside it: a user who names the host's memory (a share of a
 * box, a kit run capping itself) means that figure. */
/* The ranks of this job on this host: all of them, or --ranks-per-node. */
static int ranks_here(const train_job *j) {
    return j->o.ranks_per_node > 0 && j->o.ranks_per_node < j->nranks ? (int)j->o.ranks_per_node : j->nranks;
}

/* What each rank on this host may use of its memory: --host-memory when given, else what the host
 * may still give (memlimit_available), shared by ranks_here; src names the source. */
static double host_room(const train_job *j, char *src, size_t len) {
    double room;
    if (j->o.host_memory > 0) {
        snprintf(src, len, "--host-memory");
        room = (double)j->o.host_memory;
    } else {
        room = memlimit_available(src, len);
    }
    return room / ranks_here(j);
}

static wp_result check_memory(train_job *j, bool quiet, char *err, size_t errlen) {
    double limit = (double)j->o.device_memory;
    char what[1400] = "--device-memory";
    const int here = ranks_here(j);
    if (limit <= 0 && j->o.backend == WP_BACKEND_CPU) {
        char src[1300];
        limit = host_room(j, src, sizeof src);
        snprintf(what, sizeof what, "%s / %d rank%s on this host", src, here, here == 1 ? "" : "s");
    }
    bool show = !quiet && !j->o.quiet && !boot_launched(); /* a launched job's launcher showed it already */
    const bool cpu = j->o.backend == WP_BACKEND_CPU;
    wp_mem_cfg mc;
    train_mem_cfg(j, &mc);
    double host_most = 0; /* --optimizer-memory host: the largest host side of a rank */
    for (int r = 0; r < j->nranks; r++) {
        double terms[WP_MEM_TERMS];
        wp_mem_host h;
        train_mem_predict(j, r, terms);
        mem_predict_host(&j->s, &j->L, &j->run.rank[r], r, &mc, &h);
        /* on the CPU backend the device is this host: its share holds both sides; on a GPU the
         * device also holds what the program does not allocate itself (memory.h) */
        wp_mem_device dev;
        mem_predict_device(&j->L, &mc, j->nranks, &dev);
        double need = mem_total(terms) + (cpu ? mem_host_total(&h) : dev.context + dev.cudnn + dev.sibling);
        double with = need * (1 + MEMLIMIT_MARGIN) + MEMLIMIT_FIXED_MIB * 1048576.0;
        if (mem_host_total(&h) > host_most) host_most = mem_host_total(&h);
        char big[256];
        mem_largest(terms, 3, big, sizeof big);
        if (!cpu) {
            size_t at = strlen(big);
            snprintf(big + at, sizeof big - at, ", CUDA context %.0f MiB and cuDNN workspace %.1f MiB (estimates)",
                     dev.context / 1048576.0, (dev.cudnn + dev.sibling) / 1048576.0);
        }
        if (cpu && mem_host_total(&h) > 0) {
            size_t at = strlen(big);
            snprintf(big + at, sizeof big - at, ", optimizer state in host memory %.1f MiB, pinned staging %.1f MiB",
                     h.optim / 1048576.0, (h.staging_up + h.staging_down) / 1048576.0);
        }
        if (show && r == 0) fprintf(stderr, "predicted peak memory per rank (docs/memory.md):\n");
        if (show) fprintf(stderr, "  rank %d: %.1f MiB (%s)\n", r, need / 1048576.0, big);
        if (show && !cpu && mem_host_total(&h) > 0)
            fprintf(stderr, "    host: %.1f MiB (optimizer state %.1f MiB, pinned staging %.1f MiB)\n",
                    mem_host_total(&h) / 1048576.0, h.optim / 1048576.0, (h.staging_up + h.staging_down) / 1048576.0);
        if (limit > 0 && with > limit)
            return wp_fail(WP_BAD_INPUT, err, errlen,
                        "rank %d needs about %.1f MiB (%s), %.1f MiB with the %.0f%% + %.0f MiB margin, more than %s (%.1f MiB)",
                        r, need / 1048576.0, big, with / 1048576.0, MEMLIMIT_MARGIN * 100, MEMLIMIT_FIXED_MIB, what,
                        limit / 1048576.0);
    }
    if (!cpu && host_most > 0) { /* the GPU's ranks on this host share its memory for their optimizer state */
        char who[64], parts[128];
        snprintf(who, sizeof who, "the host side of %d rank%s on this host", here, here == 1 ? "" : "s");
        snprintf(parts, sizeof parts, "%.1f MiB of fp32 masters, AdamW moments, accumulator and pinned staging per rank",
                 host_most / 1048576.0);
        WP_TRY(memlimit_check(who, "--optimizer-memory host", host_most * here, parts, (double)j->o.host_memory,
                              "--host-memory", true, err, errlen));
    }
    return 0;
}

static wp_result prepare_resume(train_job *j, char *err, size_t errlen) {
    j->resume_dir[0] = 0;
    j->start_step = 0;
    if (!j->o.resume[0]) return 0;
    int rc = ckpt_resolve(j->o.resume, j->o.save, j->resume_dir, sizeof j->resume_dir, err, errlen);
    if (rc == 0 && err[0]) wp_warn("--resume %s", err); /* resumed other than through latest: say from where */
    if (rc || !j->resume_dir[0]) return rc;
    wp_ckpt *c;
    if ((rc = ckpt_open(&c, j->resume_dir, err, errlen)) != 0) return rc;
    rc = ckpt_check_model(c, &j->L.cfg, err, errlen);
    j->start_step = ckpt_info(c)->step;
    /* what only an export reads is kept from the checkpoint unless given again */
    const wp_model_cfg *k = &ckpt_info(c)->cfg;
    if (!j->o.set[FLAG_bos_token_id]) j->L.cfg.has_bos = k->has_bos, j->L.cfg.bos_id = k->bos_id;
    if (!j->o.set[FLAG_eos_token_id]) j->L.cfg.has_eos = k->has_eos, j->L.cfg.eos_id = k->eos_id;
    if (!j->o.set[FLAG_max_position_embeddings]) j->L.cfg.max_pos = k->max_pos;
    if (rc == 0 && ckpt_info(c)->seed != j->o.seed)
        wp_warn("--resume: checkpoint was trained with --seed %" PRId64 ", continuing with %" PRId64 " (other data order)",
                ckpt_info(c)->seed, j->o.seed);
    if (rc == 0 && ckpt_info(c)->micro_batches != j->nmb)
        wp_warn("--resume: checkpoint was trained with %" PRId64 " micro-batches per step, continuing with %d (other data order)",
                ckpt_info(c)->micro_batches, j->nmb);
    ckpt_close(c);
    return rc;
}

/* Under a launcher the world size is the launcher's (WORLD_SIZE, SLURM_NTASKS,
 * OMPI_COMM_WORLD_SIZE), read now: the schedule is built before the rendezvous. --nranks, if
 * given, must agree. */
static wp_result launcher_world(train_job *j, char *err, size_t errlen) {
    int world;
    const char *launcher;
    char why[256];
    int rc = boot_world_from_environ(&world, &launcher, why, sizeof why);
    if (rc == 1) return 0;
    if (rc != 0) return wp_fail(WP_BAD_INPUT, err, errlen, "%s", why);
    if (j->o.set[FLAG_nranks] && j->o.nranks != world)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--nranks %" PRId64 " but the launcher (%s) started %d ranks", j->o.nranks, launcher, world);
    j->o.nranks = world;
    return 0;
}

static wp_result check_flags(train_job *j, char *err, size_t errlen) {
    if (launcher_world(j, err, errlen)) return 2;
    const wp_opts *o = &j->o;
    if (o->nranks < 1 || o->nranks > 4096) return wp_fail(WP_BAD_INPUT, err, errlen, "--nranks: %" PRId64 " must be 1..4096", o->nranks);
    if (o->num_microbatches < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "--num-microbatches: must be 0 (= N) or more");
    if (o->steps < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "--steps: %" PRId64 " must be at least 1", o->steps);
    if (!o->data[0] && !o->calibrate[0])
        return wp_fail(WP_BAD_INPUT, err, errlen, "--data: train needs token shards (a file, a directory or a glob pattern)");
    if (o->save_every < 0 || o->keep_last < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "--save-every/--keep-last: must be 0 or more");
    if (o->save_every > 0 && !o->save[0]) return wp_fail(WP_BAD_INPUT, err, errlen, "--save-every: needs --save DIR");
    if (o->save[0] && fs_exists(o->save) && !fs_is_dir(o->save)) return wp_fail(WP_BAD_INPUT, err, errlen, "--save %s: exists and is not a directory", o->save);
    char why[WP_PATH_MAX + 128];
    /* a read-only or full --save was found only at the first save, perhaps hours in */
    if (o->save[0] && fs_probe_writable(o->save, why, sizeof why)) return wp_fail(WP_BAD_INPUT, err, errlen, "--save %s", why);
    if (o->tensorboard[0] && !tb_supported())
        return wp_fail(WP_BAD_INPUT, err, errlen, "--tensorboard: this build lacks it (built without protobuf-c and ISA-L: "
                       "scripts/setup.sh installs them, then meson setup --reconfigure build)");
    if (o->tensorboard[0] && fs_exists(o->tensorboard) && !fs_is_dir(o->tensorboard))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--tensorboard %s: exists and is not a directory", o->tensorboard);
    if (o->tensorboard[0] && fs_probe_writable(o->tensorboard, why, sizeof why)) return wp_fail(WP_BAD_INPUT, err, errlen, "--tensorboard %s", why);
    if (o->max_skipped_steps < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "--max-skipped-steps: must be 0 (no bound) or more");
    if (o->resume[0] && o->init_from[0]) return wp_fail(WP_BAD_INPUT, err, errlen, "--resume and --init-from: give one of them");
    if (!(o->device_tflops >= 0)) return wp_fail(WP_BAD_INPUT, err, errlen, "--device-tflops: %g must be 0 (unpaced) or more", o->device_tflops);
    if (o->eval_every < 0 || o->eval_batches < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "--eval-every/--eval-batches: must be 0+ and 1+");
    if (o->sample_every < 0 || o->sample_tokens < 1 || o->sample_tokens > INT32_MAX)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--sample-every/--sample-tokens: must be 0+ and 1+");
    j->nranks = (int)o->nranks;
    j->nmb = o->num_microbatches ? (int)o->num_microbatches : j->nranks;
    return 0;
}

wp_result train_job_prepare(train_job *j, const wp_opts *o, char *err, size_t errlen) {
    memset(j, 0, sizeof *j);
    j->o = *o;
    j->t_origin = wp_now();
    j->auto_strategy = o->strategy == (wp_strategy)WP_STRAT_AUTO;
    j->strategy = j->auto_strategy ? WP_STRAT_1F1B : o->strategy; /* auto: provisional, train_rank picks */
    j->calibrating = j->auto_strategy || o->calibrate[0];
    const bool train = !o->calibrate[0]; /* --calibrate reads no data and trains nothing */
    int rc = check_flags(j, err, errlen);
    if (!rc) rc = prepare_model(j, true, err, errlen);
    if (!rc) rc = lr_schedule_from_opts(&j->o, &j->lr, err, errlen);
    if (!rc) rc = adamw_hparams_from_opts(&j->o, &j->hp, err, errlen);
    if (!rc) rc = job_cfg_from_opts(&j->o, &j->job, err, errlen);
    if (!rc && !j->auto_strategy) rc = prepare_schedule(j, err, errlen); /* auto: the pick's, in train_rank */
    if (!rc && train) rc = check_data(j, err, errlen);
    if (!rc && train) rc = resolve_tokenizer(j, err, errlen);
    /* --doc-mask without --doc-boundary-id (-1, also as a --resume inherits it): documents start
     * where prepare put its boundary, the tokenizer's BOS, or its EOS where it has none
     * (src/io/data/prepare.c); the run's flags take it too, so that a layout rebuilt from them
     * (--strategy auto's pick) and the manifest have it */
    if (!rc && train && j->tok && o->doc_boundary_id < 0 && (tok_bos(j->tok) >= 0 || tok_eos(j->tok) >= 0))
        j->o.doc_boundary_id = j->L.cfg.doc_boundary = tok_bos(j->tok) >= 0 ? tok_bos(j->tok) : tok_eos(j->tok);
    if (!rc && train) rc = measure_attn_share(j, err, errlen);
    if (j->data_probe) loader_close(j->data_probe), j->data_probe = NULL;
    if (!rc && train) rc = prepare_resume(j, err, errlen);
    if (!rc && !j->auto_strategy) rc = check_memory(j, false, err, errlen); /* auto: checked on the pick */
    if (!rc && train && j->start_step >= o->steps)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "--steps: %" PRId64 " already done by the checkpoint in %s (step %" PRId64 ")", o->steps,
                  j->resume_dir, j->start_step);
    return rc;
}

void train_job_free(train_job *j) {
    gguf_close(j->init_gguf);
    free(j->tokenizer_data);
    for (int i = 0; i < CKPT_SIDE_FILES; i++) free(j->side_data[i]);
    tok_close(j->tok);
    if (j->data_probe) loader_close(j->data_probe);
    shard_list_free(&j->data);
    shard_list_free(&j->val);
    if (j->have_run) run_free(&j->run);
    if (j->have_sched) sched_free(&j->s);
    if (j->have_layout) layout_free(&j->L);
    memset(j, 0, sizeof *j);
}

/* ---- one rank ---- */

typedef struct {
    train_job *j;
    int rank;
    wp_transport *t;
    wp_control *ctl;
    wp_kern *k;
    wp_model *m;
    wp_optim *o;
    wp_loader *data, *val;
    wp_rt *rt;
    rt_eval *ev;
    rt_sample *sm;       /* --sample-every */
    int32_t *sample_ids; /* [--sample-tokens] */
    FILE *metrics;
    wp_tb *tb;           /* --tensorboard (rank 0) */
    int64_t saved_step;  /* the last step this run saved (0: none): a stop there saves nothing again */
    int64_t *written;    /* rank 0: the steps this run committed, the only ones its pruning may delete */
    int n_written;
    double t_begin;
    int64_t tokens_done;
    train_totals tot;
    int threads; /* CPU threads of this rank's kernels (and of a host-placed optimizer's) */
} rank_state;

static wp_result open_backend(rank_state *r, int local_rank, char *err, size_t errlen) {
    const wp_opts *o = &r->j->o;
    char from[128];
    int threads = boot_threads_per_rank_environ((int)o->threads, boot_launched() ? 1 : r->j->nranks,
                                                sysconf(_SC_NPROCESSORS_ONLN), from, sizeof from);
    r->threads = threads;
    if (r->rank == 0 && !o->quiet && o->backend == WP_BACKEND_CPU)
        fprintf(stderr, "rank 0: %d CPU thread%s per rank (%s)\n", threads, threads == 1 ? "" : "s", from);
    wp_kern_opts ko;
    char why[512];
    if (kern_opts_from_opts(o, precision_act_dtype(r->j->L.cfg.precision), threads, local_rank, &ko, why, sizeof why))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s", why);
    r->k = kern_create(&ko, why, sizeof why);
    if (!r->k) return wp_fail(WP_FAILED, err, errlen, "--backend %s: %s", cli_enum_name(FLAG_backend, o->backend), why);
    if (r->rank == 0) { /* the rank that reports; MFU's peak, never the pacing --device-tflops */
        const char *source = "";
        r->j->peak_tflops = peak_tflops(r->k, o->peak_tflops, &source);
        if (!o->quiet && !boot_launched())
            fprintf(stderr, "rank 0: MFU against %.4g TFLOPS per rank (%s%s%s)\n", r->j->peak_tflops, source,
                    kern_kind(r->k) == WP_BACKEND_CUDA ? ": " : "", kern_kind(r->k) == WP_BACKEND_CUDA ? kern_device_name(r->k) : "");
    }
    r->m = model_create(&r->j->L, r->k, why, sizeof why);
    if (!r->m) return wp_fail(WP_FAILED, err, errlen, "model: %s", why);
    return 0;
}

static wp_result open_optim(rank_state *r, wp_loss_scaler *scaler, char *err, size_t errlen) {
    train_job *j = r->j;
    int owned[WP_MAX_CHUNKS], n = 0;
    for (int c = 0; c < j->s.nchunks; c++)
        if (sched_owns(&j->s, r->rank, c, j->s.nslices ? r->rank : -1)) owned[n++] = c;
    /* a sliced schedule: rank k holds slice k of every chunk (ir.h) */
    wp_optim_place place;
    optim_place_from_opts(&j->o, r->threads, &place);
    wp_mem_term was = kern_mem_term(r->k, WP_MEM_OPTIM);
    r->o = optim_create_slices(layout_optim_model(&j->L), r->k, owned, n, r->rank, j->s.nslices, &j->hp, &place, err,
                               errlen);
    kern_mem_term(r->k, was);
    if (!r->o) return 1;
    *scaler = loss_scaler_init(j->L.cfg.precision == WP_PREC_MIXED, j->o.loss_scale, j->o.loss_scale_window);
    if (j->o.init_from[0])
        return j->init_gguf ? gguf_load_masters(j->init_gguf, r->o, err, errlen) : hf_load_masters(j->o.init_from, r->o, err, errlen);
    if (!j->resume_dir[0]) return optim_init_from_seed(r->o, (uint64_t)j->o.seed) ? wp_fail(WP_FAILED, err, errlen, "init: %s", optim_error(r->o)) : 0;
    wp_ckpt *c;
    int rc = ckpt_open(&c, j->resume_dir, err, errlen);
    if (rc) return rc;
    rc = ckpt_load_optim(c, r->o, err, errlen);
    scaler->scale = ckpt_info(c)->loss_scale;
    scaler->clean_steps = ckpt_info(c)->loss_scale_clean_steps;
    ckpt_close(c);
    return rc;
}

static wp_result open_data(rank_state *r, char *err, size_t errlen) {
    const train_job *j = r->j;
    const wp_layout *L = &j->L;
    wp_loader_cfg lc = {.b = L->cfg.micro_batch, .s = L->cfg.seq, .vocab = L->cfg.vocab, .micro_batches = j->nmb,
                        .seed = (uint64_t)j->o.seed};
    int rc = loader_open_list(&r->data, &j->data, "--data", &lc, err, errlen);
    if (rc || j->o.eval_every == 0) return rc;
    if (r->rank == 0 && j->val_warning[0]) wp_warn("%s", j->val_warning);
    lc.micro_batches = 1;
    if ((rc = loader_open_list(&r->val, &j->val, j->o.val_data[0] ? "--val-data" : "--data", &lc, err, errlen)) != 0) return rc;
    wp_mem_term was = kern_mem_term(r->k, WP_MEM_EVAL);
    rc = eval_create(&r->ev, &j->s, r->rank, r->m, r->o, r->t, r->ctl, r->val, (int)j->o.eval_batches, j->o.timeout, err,
                     errlen);
    kern_mem_term(r->k, was);
    return rc;
}

/* --sample-every K: samples of up to --sample-tokens ids, as many as the model has positions. */
static wp_result open_sampler(rank_state *r, char *err, size_t errlen) {
    const train_job *j = r->j;
    if (j->o.sample_every == 0) return 0;
    int tokens = (int)(j->o.sample_tokens < j->L.cfg.seq ? j->o.sample_tokens : j->L.cfg.seq);
    r->sample_ids = malloc((size_t)tokens * sizeof *r->sample_ids);
    if (!r->sample_ids) return wp_fail(WP_FAILED, err, errlen, "--sample-tokens: out of memory");
    /* a sample starts at the tokenizer's BOS (token 0 without one, the byte shards' document
     * boundary) and stops at its EOS */
    int32_t bos = j->tok && tok_bos(j->tok) >= 0 ? tok_bos(j->tok) : 0, eos = j->tok ? tok_eos(j->tok) : -1;
    wp_mem_term was = kern_mem_term(r->k, WP_MEM_SAMPLE);
    int rc = sample_create(&r->sm, &j->s, r->rank, &j->L, r->k, r->o, j->nranks > 1 ? r->t : NULL, r->ctl, tokens, bos,
                           eos, j->o.timeout, err, errlen);
    kern_mem_term(r->k, was);
    return rc;
}

/* A greedy sample from the weights after this step; rank 0 reports it. */
static wp_result sample(rank_state *r, int64_t step, char *err, size_t errlen) {
    int n;
    wp_transport_stats s0 = {0}, s1 = {0};
    if (r->t && r->j->nranks > 1) tp_stats(r->t, &s0);
    wp_mem_term was = kern_mem_term(r->k, WP_MEM_SAMPLE);
    int rc = sample_run(r->sm, r->sample_ids, &n, err, errlen);
    kern_mem_term(r->k, was);
    if (rc) return 1;
    if (r->t && r->j->nranks > 1) tp_stats(r->t, &s1);
    r->tot.eval_sent += s1.payload_sent - s0.payload_sent; /* traffic outside the schedule's count */
    if (r->rank == 0) report_sample(r->j, step, r->sample_ids, n, r->metrics);
    return 0;
}

/* On a GPU, the prediction and its margin against the device's free memory once the context is
 * open (train_job_prepare could not ask it); --device-memory was checked already. */
static wp_result check_device_memory(rank_state *r, char *err, size_t errlen) {
    size_t free_b, total_b;
    if (kern_device_free(r->k, &free_b, &total_b) != 0) return 0;
    double terms[WP_MEM_TERMS];
    size_t now, peak;
    train_mem_predict(r->j, r->rank, terms);
    kern_memory(r->k, &now, &peak); /* the model's scratch is taken already: it is in the prediction */
    /* beyond the program's allocations: cuDNN's workspace and the transfer context's cuBLAS
     * workspace (not the CUDA context: it is open, and its memory is no longer free) */
    wp_mem_cfg mc;
    wp_mem_device dev;
    train_mem_cfg(r->j, &mc);
    mem_predict_device(&r->j->L, &mc, r->j->nranks, &dev);
    double need = mem_total(terms) + dev.cudnn + dev.sibling, with = need * (1 + MEMLIMIT_MARGIN) + MEMLIMIT_FIXED_MIB * 1048576.0;
    if (with <= (double)free_b + (double)now) return 0;
    char big[256];
    mem_largest(terms, 3, big, sizeof big);
    return wp_fail(WP_BAD_INPUT, err, errlen, "rank %d needs about %.1f MiB on its GPU (%s), %.1f MiB with the margin, more than the %.1f MiB free of %.1f MiB",
                r->rank, need / 1048576.0, big, with / 1048576.0, ((double)free_b + (double)now) / 1048576.0,
                (double)total_b / 1048576.0);
}

/* The GPU's memory in use now (total - free, as the driver counts it) into the run's high-water;
 * false where the backend has no device to ask. */
static bool sample_device(rank_state *r, double *used) {
    size_t free_b, total_b;
    if (kern_device_free(r->k, &free_b, &total_b) != 0) return false;
    *used = (double)total_b - (double)free_b;
    if (*used > r->tot.dev_peak) r->tot.dev_peak = *used;
    return true;
}

static wp_result open_rank(rank_state *r, int local_rank, char *err, size_t errlen) {
    wp_loss_scaler scaler;
    int rc = open_backend(r, local_rank, err, errlen);
    r->tot.dev_open = r->tot.dev_peak = -1;
    r->tot.dev_ordinal = -1;
    if (!rc && sample_device(r, &r->tot.dev_open)) r->tot.dev_ordinal = kern_device(r->k);
    if (!rc) rc = check_device_memory(r, err, errlen);
    /* buffers in GPU memory travel through a staged or NCCL transport (ring/device_tp.h) */
    if (!rc && r->j->nranks > 1) rc = tp_device_open(r->t, r->ctl, r->k, r->j->job.transport, &r->j->job.net, &r->t, err, errlen);
    if (!rc) rc = open_optim(r, &scaler, err, errlen);
    if (!rc) rc = open_data(r, err, errlen);
    if (!rc) rc = open_sampler(r, err, errlen);
    if (rc) return rc;
    rt_config rc_cfg = {.rank = r->rank, .s = &r->j->s, .L = &r->j->L, .m = r->m, .o = r->o,
                        .t = r->j->nranks > 1 ? r->t : NULL, .ctl = r->ctl, .data = r->data,
                        .timeout = r->j->o.timeout, .clip = r->j->o.clip_grad, .scaler = scaler,
                        .record = r->j->o.trace[0] != 0, .t_origin = r->tot.clock.zero,
                        .device_tflops = r->j->o.device_tflops, .graphs = r->j->o.graphs};
    if (rt_create(&r->rt, &rc_cfg, err, errlen)) return 1;
    if (r->rank == 0 && r->j->o.metrics[0]) {
        r->metrics = fopen(r->j->o.metrics, "a");
        if (!r->metrics) return wp_fail(WP_FAILED, err, errlen, "--metrics %s: cannot open for appending", r->j->o.metrics);
        report_run_line(r->j, r->metrics);
    }
    /* the first event's step is the next step's number: TensorBoard drops what an earlier file
     * in the directory has from there on (tb_events.h) */
    if (r->rank == 0 && r->j->o.tensorboard[0]) WP_TRY(tb_open(&r->tb, r->j->o.tensorboard, r->j->start_step + 1, err, errlen));
    return rt_load_carry(r->rt, err, errlen);
}

static void close_rank(rank_state *r) {
    if (r->metrics) fclose(r->metrics);
    tb_close(r->tb);
    tp_device_close(r->t); /* first: its copies write into the buffers freed below */
    rt_destroy(r->rt);
    eval_destroy(r->ev);
    sample_destroy(r->sm);
    free(r->sample_ids);
    free(r->written);
    loader_close(r->val);
    loader_close(r->data);
    optim_destroy(r->o);
    model_destroy(r->m);
    kern_destroy(r->k);
}

/* After a collective step that failed on some rank: every rank gets the message of the lowest
 * failing rank (was: only that rank named the cause, the others "a rank failed"). */
static wp_result first_cause(rank_state *r, bool failed, char *why, size_t whylen, int *who, char *err, size_t errlen) {
    double v = failed ? r->rank : (double)INT32_MAX;
    *who = -1;
    if (r->j->nranks > 1 && ctl_allreduce(r->ctl, CTL_MIN, &v, 1, err, errlen)) return 1;
    if (v == (double)INT32_MAX) return 0;
    *who = (int)v;
    if (!failed) why[0] = '\0';
    if (r->j->nranks > 1 && ctl_broadcast(r->ctl, *who, why, whylen, err, errlen)) return 1;
    why[whylen - 1] = '\0';
    return 0;
}

static wp_result commit_checkpoint(rank_state *r, int64_t steps_done, int64_t opt_step, char *why, size_t whylen) {
    train_job *j = r->j;
    wp_loss_scaler sc = rt_scaler(r->rt);
    wp_ckpt_info info = {.step = steps_done, .optimizer_step = opt_step, .loss_scale = sc.scale,
                         .loss_scale_clean_steps = sc.clean_steps, .seed = j->o.seed, .micro_batches = j->nmb,
                         .nranks = j->nranks, .cfg = j->L.cfg, .tokenizer_data = j->tokenizer_data,
                         .tokenizer_size = j->tokenizer_size};
    for (int i = 0; i < CKPT_SIDE_FILES; i++) info.side_data[i] = j->side_data[i], info.side_size[i] = j->side_size[i];
    snprintf(info.tokenizer_name, sizeof info.tokenizer_name, "%s", j->tokenizer_name);
    int64_t *more = realloc(r->written, (size_t)(r->n_written + 1) * sizeof *more);
    char *flags = NULL;
    size_t flags_len = 0;
    FILE *f = more ? open_memstream(&flags, &flags_len) : NULL; /* the schedule a --resume inherits (opts_resume.c) */
    if (f) cli_write_json(f, &j->o, C_TRAIN);
    if (!f || fclose(f) != 0) {
        free(flags);
        if (more) r->written = more;
        snprintf(why, whylen, "out of memory");
        return 1;
    }
    info.run_flags = flags;
    r->written = more;
    wp_ckpt_keep keep = {.keep_last = (int)j->o.keep_last, .resumed_from = j->resume_dir[0] ? j->start_step : -1,
                         .written = r->written, .n_written = r->n_written};
    int rc = ckpt_commit(j->o.save, steps_done, j->nranks, &info, &keep, why, whylen);
    free(flags);
    if (rc == 0) r->written[r->n_written++] = steps_done;
    return rc;
}

/* Every owner writes its shard; after a barrier rank 0 commits; everyone learns the outcome. */
static wp_result save_checkpoint(rank_state *r, int64_t steps_done, char *err, size_t errlen) {
    train_job *j = r->j;
    if (steps_done == r->saved_step) return 0; /* every rank knows it: no collective skipped by one */
    double v[2] = {0, (double)optim_steps(r->o)};
    char why[512] = "";
    int who;
    double t0 = wp_now();
    bool failed = ckpt_write_shard(j->o.save, steps_done, r->rank, r->o, why, sizeof why) != 0;
    rt_save_event(r->rt, t0, wp_now());
    if (first_cause(r, failed, why, sizeof why, &who, err, errlen)) return 1;
    if (who >= 0) return wp_fail(WP_FAILED, err, errlen, "checkpoint step %" PRId64 ": rank %d: %s", steps_done, who, why);
    if (ctl_allreduce(r->ctl, CTL_MAX, v, 2, err, errlen)) return 1;
    failed = r->rank == 0 && commit_checkpoint(r, steps_done, (int64_t)v[1], why, sizeof why) != 0;
    if (first_cause(r, failed, why, sizeof why, &who, err, errlen)) return 1;
    if (who >= 0) return wp_fail(WP_FAILED, err, errlen, "checkpoint step %" PRId64 ": rank 0's commit: %s", steps_done, why);
    if (r->rank == 0 && !j->o.quiet) fprintf(stderr, "\nsaved %s/step-%" PRId64 "\n", j->o.save, steps_done);
    r->saved_step = steps_done;
    return 0;
}

/* Validation loss with the masters after this step; rank 0 reports it. */
static wp_result evaluate(rank_state *r, int64_t step, char *err, size_t errlen) {
    double loss;
    wp_transport_stats s0 = {0}, s1 = {0};
    if (r->t && r->j->nranks > 1) tp_stats(r->t, &s0);
    wp_mem_term was = kern_mem_term(r->k, WP_MEM_EVAL);
    int rc = eval_run(r->ev, &loss, err, errlen);
    kern_mem_term(r->k, was);
    if (rc) return 1;
    if (r->t && r->j->nranks > 1) tp_stats(r->t, &s1);
    r->tot.eval_sent += s1.payload_sent - s0.payload_sent;
    if (r->rank != 0) return 0;
    if (!r->j->o.quiet) fprintf(stderr, "%sstep %" PRId64 "  val loss %.4f\n", isatty(STDERR_FILENO) ? "\n" : "", step + 1, loss);
    report_val_line(r->metrics, r->tb, step, loss);
    return 0;
}

/* A stop request anywhere stops every rank at the same step boundary. */
static wp_result stop_agreed(rank_state *r, bool *stop, char *err, size_t errlen) {
    double v = stop_requested() ? 1 : 0;
    if (r->j->nranks > 1 && ctl_allreduce(r->ctl, CTL_MAX, &v, 1, err, errlen)) return 1;
    *stop = v != 0;
    return 0;
}

/* Each metrics line out now, and any failed write an error (was: a full disk cut the file
 * short, with exit 0 and no word); the same for the TensorBoard file, flushed as written. */
static wp_result metrics_flush(rank_state *r, char *err, size_t errlen) {
    if (tb_status(r->tb, err, errlen)) return 1;
    if (!r->metrics) return 0;
    /* errno as the failed write left it (report.c may have flushed already) */
    if (fflush(r->metrics) != 0 || ferror(r->metrics))
        return wp_fail(WP_FAILED, err, errlen, "--metrics %s: write failed: %s", r->j->o.metrics, errno ? strerror(errno) : "I/O error");
    return 0;
}

static wp_result train_loop(rank_state *r, char *err, size_t errlen) {
    train_job *j = r->j;
    r->t_begin = wp_now();
    if (r->t && j->nranks > 1) {
        tp_stats(r->t, &r->tot.start);
        r->tot.have_start = true;
    }
    int64_t skipped_in_row = 0;
    for (int64_t step = j->start_step; step < j->o.steps; step++) {
        bool stop;
        if (stop_agreed(r, &stop, err, errlen)) return 1;
        if (stop) {
            if (r->rank == 0)
                fprintf(stderr, "\nstop requested: %s at step %" PRId64 "\n",
                        step == r->saved_step ? "saved already" : "saving", step);
            return j->o.save[0] && step > j->start_step ? save_checkpoint(r, step, err, errlen) : 0;
        }
        rt_step_stats st;
        double lr = lr_at(&j->lr, step);
        if (rt_step(r->rt, step, lr, &st, err, errlen)) return 1;
        double used; /* at the step's end: the device's own high-water, beside kern_memory's count */
        if (r->tot.dev_ordinal >= 0 && !sample_device(r, &used))
            return wp_fail(WP_FAILED, err, errlen, "rank %d: the device's free memory: %s", r->rank,
                           kern_error(r->k) ? kern_error(r->k) : "unknown error");
        report_step(j, r->rank, step, lr, &st, r->t_begin, &r->tot, r->metrics, r->tb);
        if (metrics_flush(r, err, errlen)) return 1;
        /* after the first step every kernel has run once: what the backend chose (e.g. which
         * attention and why), said once by rank 0 */
        if (step == j->start_step && r->rank == 0 && !j->o.quiet && kern_notes(r->k)[0])
            fprintf(stderr, "%s%s\n", isatty(STDERR_FILENO) ? "\n" : "", kern_notes(r->k));
        if (nonfinite_bound(&skipped_in_row, st.d.skip, j->o.max_skipped_steps, step, rt_scaler(r->rt).scale, err, errlen)) return 1;
        if (r->ev && (step + 1) % j->o.eval_every == 0 && evaluate(r, step, err, errlen)) return 1;
        if (r->sm && (step + 1) % j->o.sample_every == 0 && sample(r, step, err, errlen)) return 1;
        bool save_now = j->o.save[0] && ((j->o.save_every > 0 && (step + 1) % j->o.save_every == 0) || step + 1 == j->o.steps);
        if (save_now && save_checkpoint(r, step + 1, err, errlen)) return 1;
    }
    return 0;
}

/* ---- --calibrate and --strategy auto (train.h) ---- */

/* The layout and validated schedule of the pick, in place of the provisional ones (the same
 * checks as train_job_prepare's: the schedule validates, the memory fits). */
static wp_result auto_rebuild(train_job *j, const wp_tuned *pick, char *err, size_t errlen) {
    autotune_apply(&j->o, &pick->k); /* the run's flags are now the pick's, as if given */
    j->strategy = pick->k.st;
    int rc;
    if (j->have_run) run_free(&j->run), j->have_run = false;
    if (j->have_sched) sched_free(&j->s), j->have_sched = false;
    if (j->have_layout) layout_free(&j->L), j->have_layout = false;
    j->auto_strategy = false; /* from here on a strategy like any other */
    rc = prepare_model(j, false, err, errlen);
    if (!rc) rc = prepare_schedule(j, err, errlen);
    if (!rc) rc = prepare_resume(j, err, errlen); /* the checkpoint against the pick's chunks */
    if (!rc) rc = check_memory(j, true, err, errlen);
    j->auto_predicted = pick->tokens_s;
    return rc;
}

/* A rate the run is held to: the measured one, or a pacing flag's (train paces to it) when
 * that is slower. 0 = unlimited / not measured. */
static double slower(double given, double measured) {
    if (given <= 0) return measured;
    return measured > 0 && measured < given ? measured : given;
}

/* Rank 0 ranks every configuration on the calibrated machine; every rank gets its pick. */
typedef struct {
    int rc, rows;
    wp_tuned pick;
    char why[1024];
} auto_msg;

static void auto_search(const train_job *j, const wp_calib *cal, auto_msg *m) {
    wp_opts *a = malloc(sizeof *a);
    if (!a) {
        m->rc = 1, snprintf(m->why, sizeof m->why, "--strategy auto: out of memory");
        return;
    }
    *a = j->o;
    /* b and M stay (the data each step reads, hence the single-rank weights); the model is the
     * one given (never raised to more layers for more chunks) */
    a->set[FLAG_backend] = true; /* the pick runs on this backend (mem_cfg_from_opts) */
    a->micro_batch_size = j->L.cfg.micro_batch;
    a->num_microbatches = j->nmb;
    a->num_layers = j->L.cfg.n_layers;
    a->set[FLAG_micro_batch_size] = a->set[FLAG_num_microbatches] = a->set[FLAG_num_layers] = true;
    a->device_tflops = slower(a->device_tflops > 0 ? a->device_tflops : 0, cal->tflops);
    if (cal->hops_link) {
        a->link_bandwidth = slower(a->link_bandwidth, cal->link_bw);
        a->link_latency = a->link_latency > cal->link_lat ? a->link_latency : cal->link_lat;
    }
    if (cal->hops_node) {
        a->node_link_bandwidth = slower(a->node_link_bandwidth, cal->node_bw);
        a->node_link_latency = a->node_link_latency > cal->node_lat ? a->node_link_latency : cal->node_lat;
    }
    if (a->device_memory <= 0 && a->backend == WP_BACKEND_CPU) { /* as check_memory: this host's room, shared */
        char src[1300];
        double room = host_room(j, src, sizeof src);
        if (room > 0) a->device_memory = (int64_t)((room - MEMLIMIT_FIXED_MIB * 1048576.0) / (1 + MEMLIMIT_MARGIN));
    }
    /* --host-memory is per host; train's ranks without --ranks-per-node are all on this one,
     * where simulate's are one per host: each rank's share is its host then */
    if (a->host_memory > 0 && a->ranks_per_node <= 0) a->host_memory /= ranks_here(j);
    wp_tuned *rows = NULL;
    int n = 0;
    m->rc = autotune_held(a, &rows, &n, m->why, sizeof m->why);
    m->rows = n;
    if (!m->rc && (n == 0 || !rows[0].fits))
        m->rc = 2, snprintf(m->why, sizeof m->why, "--strategy auto: none of %d configurations fits in %.1f MiB per rank%s", n,
                            (double)a->device_memory / 1048576.0,
                            a->host_memory > 0 && n > 0 && (rows[0].over & WP_OVER_HOST) ? " and --host-memory" : "");
    if (!m->rc) m->pick = rows[0];
    free(rows);
    free(a);
}

static wp_result auto_pick(train_job *j, int rank, wp_transport *t, wp_control *ctl, const wp_calib *cal, char *err,
                     size_t errlen) {
    auto_msg mine; /* rank 0's search, then (broadcast) every rank's */
    memset(&mine, 0, sizeof mine);
    if (rank == 0) auto_search(j, cal, &mine);
    if (ctl_broadcast(ctl, 0, &mine, sizeof mine, err, errlen)) return 1;
    if (mine.rc) return wp_fail((wp_result)mine.rc, err, errlen, "%s", mine.why);
    /* every rank is done with the provisional layout (calibration read it) before it changes;
     * ranks that are threads of one process share the job: its first rank rebuilds it */
    if (ctl_barrier(ctl, err, errlen)) return 1;
    const bool owner = !(t && j->nranks > 1 && tp_one_process(t)) || rank == 0;
    char why[1024] = "";
    double bad = owner ? (double)auto_rebuild(j, &mine.pick, why, sizeof why) : 0;
    if (ctl_allreduce(ctl, CTL_MAX, &bad, 1, err, errlen)) return 1;
    if (bad != 0)
        return why[0] ? wp_fail((wp_result)bad, err, errlen, "--strategy auto: %s %s: %s", strategy_name(mine.pick.k.st), mine.pick.knobs, why)
                      : wp_fail((wp_result)bad, err, errlen, "--strategy auto: another process could not set up the pick");
    if (rank == 0) {
        char bw[32], lat[32];
        printf("auto: %s %s: predicted %.0f tokens/s (fastest of %d configurations on the calibrated machine: %.3g TFLOP/s",
               strategy_name(mine.pick.k.st), mine.pick.knobs, mine.pick.tokens_s, mine.rows, cal->tflops);
        if (cal->hops_link || cal->hops_node)
            printf(", link %s/s %s", fmt_bytes(bw, sizeof bw, cal->hops_link ? cal->link_bw : cal->node_bw),
                   fmt_seconds(lat, sizeof lat, cal->hops_link ? cal->link_lat : cal->node_lat));
        printf(")\n");
        fflush(stdout);
    }
    return 0;
}

/* --calibrate or --strategy auto: measure on every rank, then write the fragment or pick. */
static wp_result calibrate_ranks(train_job *j, int rank, int local_rank, wp_transport *t, wp_control *ctl, char *err,
                           size_t errlen) {
    const wp_opts *o = &j->o;
    char from[128];
    int threads = boot_threads_per_rank_environ((int)o->threads, boot_launched() ? 1 : j->nranks,
                                                sysconf(_SC_NPROCESSORS_ONLN), from, sizeof from);
    if (rank == 0 && !o->quiet) fprintf(stderr, "calibrating on %d rank%s (%d thread%s per rank)...\n", j->nranks,
                                        j->nranks == 1 ? "" : "s", threads, threads == 1 ? "" : "s");
    wp_calib cal;
    wp_kern_opts ko;
    char why0[512];
    if (kern_opts_from_opts(o, precision_act_dtype(j->L.cfg.precision), threads, local_rank, &ko, why0, sizeof why0))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s", why0);
    int rc = calib_run(&j->L, j->nranks, (int)o->ranks_per_node, rank, &ko, (uint64_t)o->seed,
                       o->timeout, j->nranks > 1 ? t : NULL, ctl, &cal, err, errlen);
    if (rc) return rc;
    if (!o->calibrate[0]) return auto_pick(j, rank, t, ctl, &cal, err, errlen);
    char why[1024] = "";
    double bad = rank == 0 ? (double)calib_write_ini(&cal, &j->L, j->nranks, (int)o->ranks_per_node,
                                                     cli_enum_name(FLAG_transport, o->transport),
                                                     cli_enum_name(FLAG_backend, o->backend), o->calibrate, why, sizeof why) : 0;
    if (ctl_allreduce(ctl, CTL_MAX, &bad, 1, err, errlen)) return 1;
    if (bad != 0) return rank == 0 ? wp_fail(WP_FAILED, err, errlen, "%s", why) : wp_fail(WP_FAILED, err, errlen, "--calibrate %s: rank 0 could not write it", o->calibrate);
    if (rank == 0 && !o->quiet)
        fprintf(stderr, "calibrated in %.2f s: %.4g TFLOP/s effective; wrote %s (simulate --config %s ...)\n", cal.seconds,
                cal.tflops, o->calibrate, o->calibrate);
    return 0;
}

wp_result train_rank(train_job *j, int rank, int local_rank, wp_transport *t, wp_control *ctl, char *err, size_t errlen) {
    if (j->calibrating) {
        int rc = calibrate_ranks(j, rank, local_rank, t, ctl, err, errlen);
        if (rc || j->o.calibrate[0]) return rc;
    }
    rank_state r = {.j = j, .rank = rank, .t = t, .ctl = ctl};
    /* --trace: one clock for every rank's events (clock_sync.h); without it, this process's
     * start (the trace is then one process's view anyway) */
    r.tot.clock.zero = j->t_origin;
    int rc = j->o.trace[0] ? clock_sync_run(ctl, CLOCK_SYNC_ROUNDS, &r.tot.clock, err, errlen) : 0;
    if (!rc) rc = open_rank(&r, local_rank, err, errlen);
    stall_watch *stall = NULL;
    if (!rc && j->nranks > 1 && !(stall = stall_start(ctl, j->o.timeout, err, errlen))) rc = 1;
    if (!rc) rc = train_loop(&r, err, errlen);
    stall_stop(stall);
    if (!rc) {
        size_t now;
        size_t own[WP_MEM_TERMS];
        kern_memory(r.k, &now, &r.tot.mem_peak);
        kern_memory_terms(r.k, r.tot.mem_terms, own);
        r.tot.mem_resident = memlimit_vmhwm();
        r.tot.metrics = r.metrics;
        r.tot.tb = r.tb;
        rc = report_final(j, rank, ctl, r.t, r.rt, &r.tot, err, errlen);
    }
    close_rank(&r);
    return rc;
}
