/* Text files -> byte-level token shards (vocabulary 256: token = byte value).
 *
 * Each input file is one document. Its head goes to training and its tail (a share
 * val_fraction of its bytes, rounded) to validation, so validation samples every source. Each
 * part that is not empty starts with token 0 (a NUL byte never occurs in text), the
 * document boundary, as llm.c's GPT-2 shards start every document with <|endoftext|>.
 * Parts are appended in input order to OUT/train_000.bin, OUT/train_001.bin, ... (a new shard
 * every shard_tokens tokens) and likewise val_NNN.bin; no val shard when val_fraction is 0.
 *
 * All shards are written to temp files and renamed only when every one is complete, so an
 * error leaves no output file; shards of an earlier, larger run beyond the new count are
 * deleted, so a directory never mixes two runs. */
#ifndef WP_IO_PREPARE_H
#define WP_IO_PREPARE_H

#include <stdint.h>

#include "fsutil.h"

#define WP_PREPARE_SHARD_TOKENS 100000000 /* llm.c's shard size */

typedef struct {
    int64_t train_tokens, val_tokens;
    int train_shards, val_shards;
} wp_prepare_stats;

/* Returns 0, 2 (an input missing or unreadable, a bad argument: named) or 1 (write failure). */
int prepare_shards(const char *const *inputs, int n_inputs, const char *out_dir, double val_fraction, int64_t shard_tokens,
                   wp_prepare_stats *stats, char *err, size_t errlen);

#endif
