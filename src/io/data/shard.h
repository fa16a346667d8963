/* Token shards in llm.c's two layouts, so its shards read as they are:
 *   header: 256 little-endian int32 — [0] magic, [1] version, [2] token count, the rest 0
 *   version 1: magic 20240520, then count uint16 tokens (GPT-2 shards, vocabulary 50257)
 *   version 7: magic 20240801, then count uint32 tokens (Llama-3 shards, vocabulary 128256)
 * Readers map the file and validate everything up front (magic, version, size against the
 * count, every token below the vocabulary), naming the file and field of the first problem. */
#ifndef WP_IO_SHARD_H
#define WP_IO_SHARD_H

#include <stdint.h>

#include "fsutil.h"
#include "result.h"

#define WP_SHARD_MAGIC 20240520 /* version 1: uint16 tokens */
#define WP_SHARD_VERSION 1
#define WP_SHARD_MAGIC_U32 20240801 /* version 7: uint32 tokens */
#define WP_SHARD_VERSION_U32 7
#define WP_SHARD_HEADER_INTS 256
#define WP_SHARD_HEADER_BYTES (WP_SHARD_HEADER_INTS * 4)
/* the count is an int32 in the header */
#define WP_SHARD_MAX_TOKENS INT32_MAX
/* the largest vocabulary whose tokens fit version 1's uint16 */
#define WP_SHARD_U16_VOCAB 65536

typedef struct {
    char path[WP_PATH_MAX];
    int version;        /* 1 or 7 */
    int token_bytes;    /* 2 (version 1) or 4 (version 7) */
    int64_t n_tokens;
    const void *tokens; /* into the mapping: uint16_t or uint32_t, see token_bytes */
    fs_map map;
} wp_shard;

/* Token i of an open shard (0 <= i < n_tokens). */
static inline uint32_t shard_token(const wp_shard *s, int64_t i) {
    return s->token_bytes == 2 ? ((const uint16_t *)s->tokens)[i] : ((const uint32_t *)s->tokens)[i];
}

/* "uint16" or "uint32": a version's token type, for messages. */
const char *shard_token_type(int version);

/* The version a vocabulary is written in: 1 when its tokens fit uint16, else 7. */
int shard_version_for_vocab(int64_t vocab);

/* Open and validate; vocab (1 .. 2^31-1) bounds the tokens. Returns 0, 2 (bad file, message
 * names the field) or 1. */
wp_result shard_open(wp_shard *s, const char *path, int vocab, char *err, size_t errlen);
void shard_close(wp_shard *s);

/* Writer that never leaves a partial shard under its final name: tokens go to "<path>.tmp";
 * shard_writer_close fills in the header and fsyncs; shard_writer_commit renames it into place
 * (a caller writing several shards closes all of them before committing any). version is
 * WP_SHARD_VERSION (uint16 tokens) or WP_SHARD_VERSION_U32 (uint32 tokens). */
typedef struct {
    char path[WP_PATH_MAX];
    char tmp[WP_PATH_MAX];
    int fd;
    int version;
    int64_t n_tokens;
} wp_shard_writer;

wp_result shard_writer_open(wp_shard_writer *w, const char *path, int version, char *err, size_t errlen);
/* Appends tokens in the shard's width; a token that does not fit version 1's uint16 is
 * refused (2) naming it. */
wp_result shard_writer_append(wp_shard_writer *w, const uint32_t *tokens, size_t n, char *err, size_t errlen);
wp_result shard_writer_close(wp_shard_writer *w, char *err, size_t errlen);
wp_result shard_writer_commit(wp_shard_writer *w, char *err, size_t errlen);
/* Closes if open and removes the temp file; safe to call in any state. */
void shard_writer_abort(wp_shard_writer *w);

/* A whole shard in one call (open, append, close, commit). */
wp_result shard_write(const char *path, int version, const uint32_t *tokens, int64_t n, char *err, size_t errlen);

#endif
