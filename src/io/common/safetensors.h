/* safetensors files (the Hugging Face format, used for exports and checkpoint shards):
 *   8-byte little-endian header length n, n bytes of JSON
 *     {"__metadata__": {"k": "v", ...}, "<name>": {"dtype": "F32", "shape": [r, c],
 *      "data_offsets": [begin, end]}, ...}
 *   padded with spaces so the data starts 8-byte aligned, then the tensors' bytes back to back
 *   (offsets relative to the data start, contiguous, in the order written). */
#ifndef WP_IO_SAFETENSORS_H
#define WP_IO_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fsutil.h"
#include "kernels.h"
#include "result.h"

#define WP_ST_NAME_MAX 128
#define WP_ST_MAX_DIMS 8

/* ---- writing ---- */

typedef struct {
    char name[WP_ST_NAME_MAX];
    wp_dtype dtype;
    int ndim; /* 1 or 2 */
    int64_t shape[2];
} st_desc;

typedef struct st_writer st_writer;

/* Writes the header for these tensors to "<path>.tmp"; their bytes must then be given with
 * st_writer_put in the same order. meta: n_meta key/value string pairs for __metadata__. */
wp_result st_writer_open(st_writer **out, const char *path, const st_desc *tensors, int n, const char *const *meta_keys,
                   const char *const *meta_values, int n_meta, char *err, size_t errlen);
wp_result st_writer_put(st_writer *w, const void *data, size_t bytes, char *err, size_t errlen);
/* Threads a put of `bytes` runs on: 2 from 1 MiB where OpenMP has more than one (the write, and
 * the CRC computed beside it), else 1. weipipe bench reports it beside the save. */
int st_writer_threads(size_t bytes);
/* Checks that every byte was given, fsyncs, renames "<path>.tmp" to path (and fsyncs the
 * directory); returns the file's size and CRC-32. Frees w. */
wp_result st_writer_finish(st_writer *w, uint64_t *size, uint32_t *crc, char *err, size_t errlen);
/* Closes, removes the temp file and frees w (any state, NULL allowed). */
void st_writer_abort(st_writer *w);

/* ---- reading ---- */

typedef struct {
    const char *name;
    char dtype_name[16]; /* as in the file: F32, F16, BF16, F64, I64, ... */
    bool known;          /* dtype is one of F32, F16, BF16 (then `dtype` holds it) */
    wp_dtype dtype;
    int ndim;
    int64_t shape[WP_ST_MAX_DIMS];
    uint64_t numel;
    const void *data; /* into the mapping; not aligned beyond what the file gives */
    size_t nbytes;
} st_tensor;

typedef struct st_file st_file;

/* Maps and validates the file (header length, JSON, every tensor's dtype, shape and offsets
 * inside the data and consistent with its size). Returns 0, 2 (bad file, message names the file
 * and the tensor or field) or 1. */
wp_result st_open(st_file **out, const char *path, char *err, size_t errlen);
void st_close(st_file *f);
const char *st_path(const st_file *f);
int st_count(const st_file *f);
const st_tensor *st_at(const st_file *f, int i);          /* sorted by name */
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key);   /* __metadata__ value or NULL */

/* The tensor's values as fp32 (from F32, F16 or BF16); 2 naming the file and tensor otherwise. */
wp_result st_to_f32(const st_file *f, const st_tensor *t, float *dst, char *err, size_t errlen);

/* Elements [first, first + n) of it as fp32 (1 when the range is outside it). */
wp_result st_to_f32_range(const st_file *f, const st_tensor *t, uint64_t first, uint64_t n, float *dst, char *err, size_t errlen);

/* Drops the mapped pages wholly inside elements [first, first + n) of the tensor from memory
 * (read again from the file if touched): a reader that converts piece by piece then holds one
 * piece of the file at a time, not the whole file (`weipipe sample` on a Hugging Face directory). */
void st_release(const st_file *f, const st_tensor *t, uint64_t first, uint64_t n);

/* Its shape is [rows, cols], or [rows] when cols == 1 (norm weights are 1-D in Hugging Face).
 * 2 with a message naming the file, tensor and both shapes otherwise. */
wp_result st_check_shape(const st_file *f, const st_tensor *t, int64_t rows, int64_t cols, char *err, size_t errlen);

const char *st_dtype_name(wp_dtype t); /* "F32", "F16", "BF16" */

#endif
