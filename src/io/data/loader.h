/* Deterministic data loader over llm.c token shards (versions 1 and 7), and which shards a
 * --data or --val-data value names.
 *
 * The data is cut into windows of s+1 tokens, window j of a shard holding tokens
 * [j*s, j*s + s] (consecutive windows share one token, as in llm.c), never past a shard's end.
 * All windows of all shards form one list. Row r of global micro-batch g of optimizer step k is
 * sequence q = (k*M + g)*b + r of an endless stream; q falls in epoch q / W (W windows in all)
 * and takes window perm_epoch(q mod W), where perm_epoch is a keyed bijection of [0, W) derived
 * from (seed, epoch) by a counter-based hash. So every window is read once per epoch, shuffled
 * across shards, and the tokens of (step, g) depend only on (seed, M, b, s, step, g): never on
 * the rank that reads them, on N or on the strategy. A run resumed under another N reads the
 * same data. */
#ifndef WP_IO_LOADER_H
#define WP_IO_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "fsutil.h"
#include "result.h"

typedef enum { WP_SPLIT_TRAIN = 0, WP_SPLIT_VAL = 1 } wp_split;

/* The shard files that a --data or --val-data value names, in name order:
 *   an existing file: that file (for either split);
 *   an existing directory: its plain files named *train*.bin (split TRAIN) or *val*.bin (split
 *     VAL), directly inside, in name order (strcmp) — today's train_000.bin and llm.c's
 *     fineweb_train_000001.bin or tiny_shakespeare_val.bin alike; a name matching both
 *     patterns is refused;
 *   anything else holding a glob(3) character (* ? [): the files the pattern matches, in
 *     name order (quote it so that the shell passes it on).
 * flag ("--data") names the value in messages. A directory without a shard of the split
 * gives 2, or an empty list with none_ok. Returns 0, 2 (bad input, named) or 1. */
typedef struct {
    int n;
    char **paths;
} wp_shard_list;

wp_result shard_list_resolve(wp_shard_list *l, const char *spec, wp_split split, const char *flag, bool none_ok, char *err,
                       size_t errlen);
void shard_list_free(wp_shard_list *l);
/* Whether a file of a is also one of b (the same device and inode): *first is the index in a
 * of the first such file, *common how many files of a are in b. */
bool shard_list_overlap(const wp_shard_list *a, const wp_shard_list *b, int *first, int *common);

typedef struct {
    int b;             /* sequences per micro-batch */
    int s;             /* tokens per sequence (inputs); each window holds s+1 */
    int vocab;         /* every token must be below this (1 .. 2^31-1) */
    int micro_batches; /* M: global micro-batches per optimizer step */
    uint64_t seed;
} wp_loader_cfg;

typedef struct wp_loader wp_loader;

/* The shards of a list, every one validated; they must share one version (one dataset, one
 * token type). flag names the list in messages. Returns 0, 2 (bad input: message names the
 * file) or 1. */
wp_result loader_open_list(wp_loader **out, const wp_shard_list *list, const char *flag, const wp_loader_cfg *cfg, char *err,
                     size_t errlen);
/* shard_list_resolve(path, split, "--data") then loader_open_list. */
wp_result loader_open(wp_loader **out, const char *path, wp_split split, const wp_loader_cfg *cfg, char *err, size_t errlen);
void loader_close(wp_loader *l);

/* Target masks (mask.h): when the shards have them (every shard of the list, else none: 2
 * naming the odd one), a target whose token's mask byte is 0 reads as -1, a position without
 * a loss (kernels.h's lmhead_ce convention); without them every target counts. */

/* Global micro-batch g (0 <= g < M) of optimizer step `step`: b rows of s inputs and the s
 * targets shifted by one ([b*s] int32 each, host memory; -1 where masked). Returns 0, or 2
 * for arguments out of range (loader_error says which). */
wp_result loader_get(wp_loader *l, int64_t step, int global_mb, int32_t *inputs, int32_t *targets);

/* Sequence i in reading order, for evaluation: window i of the list (for one shard, tokens
 * [i*s, (i+1)*s] from its start). One row: s inputs and s targets. 0, or 2 past the end. */
wp_result loader_sequential(wp_loader *l, int64_t i, int32_t *inputs, int32_t *targets);

bool loader_masked(const wp_loader *l);
/* The targets (non-negative targets) of all M micro-batches of a step: M*b*s without masks. */
int64_t loader_step_targets(const wp_loader *l, int64_t step);

int64_t loader_windows(const wp_loader *l);   /* W */
int64_t loader_tokens(const wp_loader *l);    /* tokens in all shards */
int loader_shards(const wp_loader *l);
const char *loader_shard_path(const wp_loader *l, int i);
int loader_shard_version(const wp_loader *l); /* 1 (uint16 tokens) or 7 (uint32), shared by all shards */
const char *loader_error(const wp_loader *l);

/* The window that sequence q of the stream reads (exposed for tests and tools). */
int64_t loader_window_of(const wp_loader *l, int64_t q);

#endif
