/* Target masks: which tokens of a shard carry a loss, in a file beside it (train_000.bin ->
 * train_000.mask), written by prepare --chat and read by the loader. The shard itself keeps
 * llm.c's layout unchanged.
 *   header: 256 little-endian int32 — [0] magic 20261128, [1] version 1, [2] token count (the
 *           shard's), [3] target count (bytes that are 1), [4] CRC-32 (zlib) of the bytes, the
 *           rest 0;
 *   then one byte per token of the shard: 1 when the token is a target (the loss of predicting
 *   it from the tokens before it counts), 0 when not.
 * A reader checks everything up front: magic, version, size against the count, the count
 * against the shard's, every byte 0 or 1, the target count and the checksum, naming the file
 * and field of the first problem. */
#ifndef WP_IO_MASK_H
#define WP_IO_MASK_H

#include <stdint.h>

#include "fsutil.h"
#include "result.h"

#define WP_MASK_MAGIC 20261128
#define WP_MASK_VERSION 1
#define WP_MASK_HEADER_BYTES 1024
#define WP_MASK_SUFFIX ".mask"

/* The mask file of a shard path: its ".bin" replaced by ".mask" (appended when the name has
 * no ".bin"). 0, or 1 when it does not fit. */
wp_result mask_path_of(const char *shard_path, char *out, size_t outlen, char *err, size_t errlen);

typedef struct {
    char path[WP_PATH_MAX];
    int64_t n_tokens, n_targets;
    const uint8_t *bits; /* into the mapping: n_tokens bytes of 0 or 1 */
    fs_map map;
} wp_mask;

/* Open and validate; n_tokens is the shard's count. 0, 2 (bad file: named), 1. */
wp_result mask_open(wp_mask *m, const char *path, int64_t n_tokens, char *err, size_t errlen);
void mask_close(wp_mask *m);

/* Writer as the shard writer (shard.h): bytes go to "<path>.tmp", close writes the header and
 * fsyncs, commit renames into place, abort removes the temp file. */
typedef struct {
    char path[WP_PATH_MAX];
    char tmp[WP_PATH_MAX];
    int fd;
    int64_t n_tokens, n_targets;
    uint32_t crc;
} wp_mask_writer;

wp_result mask_writer_open(wp_mask_writer *w, const char *path, char *err, size_t errlen);
wp_result mask_writer_append(wp_mask_writer *w, const uint8_t *bits, size_t n, char *err, size_t errlen);
wp_result mask_writer_close(wp_mask_writer *w, char *err, size_t errlen);
wp_result mask_writer_commit(wp_mask_writer *w, char *err, size_t errlen);
void mask_writer_abort(wp_mask_writer *w);

#endif
