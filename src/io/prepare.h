/* Text files -> byte-level token shards (token = byte value, so tokens are below 256).
 *
 * Each input file is one document. Its head goes to training and its tail (a share
 * val_fraction of its bytes, rounded) to validation, so validation samples every source. Each
 * part that is not empty starts with token 0 (a NUL byte never occurs in text), the
 * document boundary, as llm.c's GPT-2 shards start every document with <|endoftext|>.
 * Parts are appended in input order to OUT/train_000.bin, OUT/train_001.bin, ... (a new shard
 * every shard_tokens tokens) and likewise val_NNN.bin; no val shard when val_fraction is 0.
 * The shards are written for a vocabulary V (256 for the bytes alone, more when the model's
 * vocabulary is larger): llm.c's version 1 (uint16 tokens) when V <= 65536, else its version 7
 * (uint32 tokens, as its Llama-3 shards).
 *
 * All shards are written to temp files and renamed only when every one is complete, so an
 * error leaves no output file; shards of an earlier, larger run beyond the new count are
 * deleted, so a directory never mixes two runs. */
#ifndef WP_IO_PREPARE_H
#define WP_IO_PREPARE_H

#include <stdint.h>

#include "fsutil.h"

#define WP_PREPARE_SHARD_TOKENS 100000000 /* llm.c's shard size */
#define WP_PREPARE_BYTE_VOCAB 256           /* byte tokens need at least this vocabulary */

typedef struct {
    int64_t train_tokens, val_tokens;
    int train_shards, val_shards;
    int version; /* the shard version written: 1 (uint16) or 7 (uint32) */
} wp_prepare_stats;

/* vocab: the vocabulary the shards are for (256 .. 2^31-1); it picks the shard version.
 * Returns 0, 2 (an input missing or unreadable, a bad argument: named) or 1 (write failure). */
int prepare_shards(const char *const *inputs, int n_inputs, const char *out_dir, double val_fraction, int64_t vocab,
                   int64_t shard_tokens, wp_prepare_stats *stats, char *err, size_t errlen);

#endif
