/* Checkpoints: the owners' fp32 masters and AdamW moments, indexed by Hugging Face tensor name
 * so that any N or chunking can load what any other wrote. (src/io sits on src/model only:
 * docs/architecture.md.)
 *
 *   SAVE/step-K.tmp/rank-RRRRR.safetensors  one per rank: for each tensor of its chunks <name>,
 *                                           <name>.exp_avg, <name>.exp_avg_sq (F32); a rank
 *                                           holding a slice of a chunk (ZeRO-3, schedule/ir.h)
 *                                           writes the tensors it covers partly as parts
 *                                           <name>#<a>-<b>: row-major elements [a, b), 1-D.
 *                                           Readers reassemble a tensor from its parts, so
 *                                           any N, chunking or slicing loads any other's
 *   SAVE/step-K.tmp/tokenizer.model        the run's tokenizer (or tokenizer.json), when it had one
 *   SAVE/step-K.tmp/manifest.json           written last, by rank 0: every file's size and CRC-32,
 *                                           step, optimizer step, loss scale, seed, data position,
 *                                           model shape and precision
 *   SAVE/step-K/                            the .tmp directory renamed once the manifest is in
 *   SAVE/latest                             "step-K", replaced atomically
 *
 * A crash leaves at worst a step-K.tmp directory, which is never loaded. Protocol for N ranks
 * sharing SAVE: every rank calls ckpt_write_shard; barrier; rank 0 calls ckpt_commit. */
#ifndef WP_IO_CHECKPOINT_H
#define WP_IO_CHECKPOINT_H

#include <stdint.h>

#include "fsutil.h"
#include "layout.h"
#include "optim.h"
#include "result.h"

#define WP_CKPT_FORMAT "weipipe-checkpoint"
/* 2: the manifest carries its own CRC-32 ("checksum", manifest.h); 1 (without) is still read */
#define WP_CKPT_VERSION 2

#define CKPT_SIDE_FILES 2
extern const char *const ckpt_side_files[CKPT_SIDE_FILES]; /* "tokenizer_config.json", "generation_config.json" */

typedef struct {
    int64_t step;                   /* optimizer steps done: training continues with this step */
    int64_t optimizer_step;         /* AdamW t (skipped steps do not count) */
    double loss_scale;
    int64_t loss_scale_clean_steps;
    int64_t seed;
    int64_t micro_batches;          /* M of the data order; with seed and step: the next tokens */
    int nranks;                     /* shard files */
    wp_model_cfg cfg;               /* shape, seq, micro-batch, precision, the writers' chunking */
    /* The run's tokenizer, kept with the checkpoint under tokenizer_name (tokenizer.model or
     * tokenizer.json, src/io/tokenizer/tokenizer.h; "" when the run had none) and listed in the manifest
     * with its size and CRC-32. ckpt_commit writes the file's bytes, tokenizer_data (read
     * when the run started, so a file replaced meanwhile cannot slip in); readers get
     * tokenizer_name and ckpt_tokenizer(). */
    const void *tokenizer_data;
    size_t tokenizer_size;
    char tokenizer_name[32];
    /* The run's train flags as one JSON object {"lr": ..., "lr-decay-style": ...} (NULL: none),
     * kept as the manifest's "flags" so a --resume need not restate them (src/cli/opts_resume.c).
     * Written only; readers of the manifest take it from manifest.json themselves. */
    const char *run_flags;
    /* Hugging Face files found beside the tokenizer (an --init-from directory's, or a checkpoint's
     * that carried them), ckpt_side_files[i]'s bytes or NULL: tokenizer_config.json (special
     * tokens, chat template: what transformers' tokenizer reads beside tokenizer.json) and
     * generation_config.json (the eos list). Written beside the tokenizer and carried to exports;
     * not listed in the manifest: nothing here reads them but the export. */
    const void *side_data[CKPT_SIDE_FILES];
    size_t side_size[CKPT_SIDE_FILES];
} wp_ckpt_info;

/* Rank `rank` writes its owned chunks (from o) into SAVE/step-K.tmp/, creating it if needed.
 * Several ranks may call this at the same time. Returns 0 or 1. */
wp_result ckpt_write_shard(const char *save_dir, int64_t step, int rank, wp_optim *o, char *err, size_t errlen);

/* Which finished checkpoints a commit may delete: never one this run did not write (a fresh
 * run beside an older run's checkpoints pruned them: issue 31), except those at or before the
 * one it resumed from (its own history). */
typedef struct {
    int keep_last;          /* newest checkpoints kept among those it may delete; 0 keeps all */
    int64_t resumed_from;   /* step of the checkpoint the run resumed from, -1 for a fresh run */
    const int64_t *written; /* steps this run committed before; NULL: any step may go (tools, tests) */
    int n_written;
} wp_ckpt_keep;

/* After every rank's ckpt_write_shard returned: checks the nranks shard files, writes the
 * manifest, renames step-K.tmp to step-K, points latest at it, and deletes the oldest step-*
 * directories beyond keep->keep_last (NULL keeps all) and stale step-*.tmp ones. Returns 0 or 1. */
wp_result ckpt_commit(const char *save_dir, int64_t step, int nranks, const wp_ckpt_info *info, const wp_ckpt_keep *keep,
                char *err, size_t errlen);

/* --resume value -> step directory: a step directory itself, a save directory (its latest), or
 * "auto" (latest in save_dir; without a readable latest naming a finished checkpoint, the
 * newest step-K whose manifest verifies, returning 0 with a note in err for the caller to
 * show). For "auto" with nothing saved yet (no latest, no step-K), step_dir is set to "" and
 * 0 returned (start fresh); with no usable checkpoint beside other remains, 2 naming save_dir. Otherwise 2 naming the path when nothing loadable is there (the
 * caller prefixes the flag it came from, e.g. "--resume: "). */
wp_result ckpt_resolve(const char *resume, const char *save_dir, char *step_dir, size_t len, char *err, size_t errlen);

typedef struct wp_ckpt wp_ckpt;

/* Opens a finished checkpoint: refuses .tmp directories, a missing or malformed manifest, and
 * any file whose size or CRC-32 differs from the manifest (2, naming the file and the field). */
wp_result ckpt_open(wp_ckpt **out, const char *step_dir, char *err, size_t errlen);
void ckpt_close(wp_ckpt *c);
const wp_ckpt_info *ckpt_info(const wp_ckpt *c);
const char *ckpt_dir(const wp_ckpt *c);
/* The checkpoint's tokenizer file (its size and CRC checked by ckpt_open), NULL when none. */
const char *ckpt_tokenizer(const wp_ckpt *c);

/* 2 naming the first model key (as its flag) where cfg differs from the checkpoint's shape
 * (layers, widths, heads, vocabulary, RoPE theta, norm epsilon). */
wp_result ckpt_check_model(const wp_ckpt *c, const wp_model_cfg *cfg, char *err, size_t errlen);

/* Fills the owned chunks' masters and moments by tensor name (whatever chunking wrote them)
 * and sets the AdamW step count. The optimizer's layout must have the checkpoint's shape. */
wp_result ckpt_load_optim(const wp_ckpt *c, wp_optim *o, char *err, size_t errlen);

/* The fp32 master of one tensor (rows*cols floats), for export and evaluation. */
wp_result ckpt_read_master(const wp_ckpt *c, const wp_param *p, float *dst, char *err, size_t errlen);

#endif
