/* Deterministic data loader over llm.c token shards.
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

#include <stdint.h>

#include "fsutil.h"

typedef enum { WP_SPLIT_TRAIN = 0, WP_SPLIT_VAL = 1 } wp_split;

typedef struct {
    int b;             /* sequences per micro-batch */
    int s;             /* tokens per sequence (inputs); each window holds s+1 */
    int vocab;         /* every token must be below this */
    int micro_batches; /* M: global micro-batches per optimizer step */
    uint64_t seed;
} wp_loader_cfg;

typedef struct wp_loader wp_loader;

/* path is a shard file (used for either split), or a directory whose train_*.bin (split
 * TRAIN) or val_*.bin (split VAL) shards are taken in name order. Every shard is validated.
 * Returns 0, 2 (bad input: message names the file) or 1. */
int loader_open(wp_loader **out, const char *path, wp_split split, const wp_loader_cfg *cfg, char *err, size_t errlen);
void loader_close(wp_loader *l);

/* Global micro-batch g (0 <= g < M) of optimizer step `step`: b rows of s inputs and the s
 * targets shifted by one ([b*s] int32 each, host memory). Returns 0, or 2 for arguments out of
 * range (loader_error says which). */
int loader_get(wp_loader *l, int64_t step, int global_mb, int32_t *inputs, int32_t *targets);

/* Sequence i in reading order, for evaluation: window i of the list (for one shard, tokens
 * [i*s, (i+1)*s] from its start). One row: s inputs and s targets. 0, or 2 past the end. */
int loader_sequential(wp_loader *l, int64_t i, int32_t *inputs, int32_t *targets);

int64_t loader_windows(const wp_loader *l);   /* W */
int64_t loader_tokens(const wp_loader *l);    /* tokens in all shards */
int loader_shards(const wp_loader *l);
const char *loader_shard_path(const wp_loader *l, int i);
const char *loader_error(const wp_loader *l);

/* The window that sequence q of the stream reads (exposed for tests and tools). */
int64_t loader_window_of(const wp_loader *l, int64_t q);

#endif
