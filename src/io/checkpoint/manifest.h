/* A checkpoint's manifest.json (private to src/io): the checkpoint info plus every shard
 * file's size and CRC-32. Model keys are spelled as the flags (num-layers, hidden-size, ...),
 * so the manifest reads like a config file.
 *
 * {"format": "weipipe-checkpoint", "version": 1, "step": K, "optimizer_step": t,
 *  "loss_scale": x, "loss_scale_clean_steps": n, "seed": s,
 *  "data": {"next_step": K, "micro_batches": M, "micro_batch_size": b, "seq_length": s},
 *  "precision": "mixed", "nranks": N,
 *  "model": {"num-layers": L, "hidden-size": h, ..., "chunk-layers": "2,2"},
 *  "files": [{"name": "rank-00000.safetensors", "size": bytes, "crc32": "8 hex digits"}, ...],
 *  "tokenizer": {"name": "tokenizer.model", "size": bytes, "crc32": "8 hex digits"}}
 * "tokenizer" only when the run had one (older checkpoints have none).
 * Version 2 ends with "checksum": "8 hex digits", the last key: the CRC-32 of every byte of
 * the file before the "," that precedes it, so a manifest edited or damaged anywhere is
 * refused (2) rather than trusted. Version 1 manifests (written before the checksum) are
 * still read: their shard files are verified by CRC as before; only the manifest's own
 * numbers go unchecked, within the ranges every reader applies. */
#ifndef WP_IO_MANIFEST_H
#define WP_IO_MANIFEST_H

#include <stdint.h>

#include "checkpoint.h"
#include "result.h"

typedef struct {
    char name[64];
    uint64_t size;
    uint32_t crc;
} wp_manifest_file;

typedef struct {
    wp_ckpt_info info;
    int n_files;
    wp_manifest_file *files;
    wp_manifest_file tokenizer; /* name "" when none; info.tokenizer_name is the same name */
} wp_manifest;

/* Written atomically (temp file, fsync, rename). tokenizer: NULL or the tokenizer file's entry. */
wp_result manifest_write(const char *path, const wp_ckpt_info *info, const wp_manifest_file *files, int n_files,
                   const wp_manifest_file *tokenizer, char *err, size_t errlen);
/* Missing: 2 "not a finished checkpoint"; malformed: 2 naming the key. */
wp_result manifest_read(const char *path, wp_manifest *m, char *err, size_t errlen);
void manifest_free(wp_manifest *m);

/* Shard file name of a rank. */
void manifest_shard_name(int rank, char *out, size_t len);

#endif
