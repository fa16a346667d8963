/* Token shards in llm.c's layout, so its GPT-2 shards (vocabulary 50257) read as they are:
 *   header: 256 little-endian int32 — [0] magic 20240520, [1] version 1, [2] token count, rest 0
 *   then token count uint16 tokens.
 * Readers map the file and validate everything up front (magic, version, size against the
 * count, every token below the vocabulary), naming the file and field of the first problem. */
#ifndef WP_IO_SHARD_H
#define WP_IO_SHARD_H

#include <stdint.h>

#include "fsutil.h"

#define WP_SHARD_MAGIC 20240520
#define WP_SHARD_VERSION 1
#define WP_SHARD_HEADER_INTS 256
#define WP_SHARD_HEADER_BYTES (WP_SHARD_HEADER_INTS * 4)
/* the count is an int32 in the header */
#define WP_SHARD_MAX_TOKENS INT32_MAX

typedef struct {
    char path[WP_PATH_MAX];
    int64_t n_tokens;
    const uint16_t *tokens; /* into the mapping */
    fs_map map;
} wp_shard;

/* Open and validate; vocab bounds the tokens. Returns 0, 2 (bad file, message names the
 * field) or 1. */
int shard_open(wp_shard *s, const char *path, int vocab, char *err, size_t errlen);
void shard_close(wp_shard *s);

/* Writer that never leaves a partial shard under its final name: tokens go to "<path>.tmp";
 * shard_writer_close fills in the header and fsyncs; shard_writer_commit renames it into place
 * (a caller writing several shards closes all of them before committing any). */
typedef struct {
    char path[WP_PATH_MAX];
    char tmp[WP_PATH_MAX];
    int fd;
    int64_t n_tokens;
} wp_shard_writer;

int shard_writer_open(wp_shard_writer *w, const char *path, char *err, size_t errlen);
int shard_writer_append(wp_shard_writer *w, const uint16_t *tokens, size_t n, char *err, size_t errlen);
int shard_writer_close(wp_shard_writer *w, char *err, size_t errlen);
int shard_writer_commit(wp_shard_writer *w, char *err, size_t errlen);
/* Closes if open and removes the temp file; safe to call in any state. */
void shard_writer_abort(wp_shard_writer *w);

/* A whole shard in one call (open, append, close, commit). */
int shard_write(const char *path, const uint16_t *tokens, int64_t n, char *err, size_t errlen);

#endif
