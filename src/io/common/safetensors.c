/* safetensors: streaming writer (checksummed while writing) and validating mapped reader. */
#include "safetensors.h"
#include "json_in.h"

#include "progress.h"

#include <sys/mman.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* a header larger than this is not one of ours, nor any sane model file's */
#define ST_MAX_HEADER ((uint64_t)256 << 20)

const char *st_dtype_name(wp_dtype t) { return t == WP_F16 ? "F16" : t == WP_BF16 ? "BF16" : "F32"; }

/* ---- writing ---- */

struct st_writer {
    char path[WP_PATH_MAX];
    char tmp[WP_PATH_MAX];
    int fd;
    uint64_t expected; /* data bytes the header announced */
    uint64_t written;  /* data bytes put so far */
    uint64_t size;     /* file bytes so far */
    uint32_t crc;
};

static json_t *header_json(const st_desc *t, int n, const char *const *keys, const char *const *values, int n_meta,
                           uint64_t *data_bytes) {
    json_t *root = json_object(), *meta = json_object();
    for (int i = 0; i < n_meta; i++) json_object_set_new(meta, keys[i], json_string(values[i]));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = wp_dtype_size(t[i].dtype);
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) {
            json_array_append_new(shape, json_integer(t[i].shape[d]));
            bytes *= (uint64_t)t[i].shape[d];
        }
        json_t *offsets = json_pack("[II]", (json_int_t)off, (json_int_t)(off + bytes));
        json_object_set_new(root, t[i].name, json_pack("{s:s, s:o, s:o}", "dtype", st_dtype_name(t[i].dtype), "shape", shape,
                                                       "data_offsets", offsets));
        off += bytes;
    }
    *data_bytes = off;
    return root;
}

/* zlib's crc32 runs at 1.2-2.5 GB/s a core, no faster than a write into the page cache: one
 * after the other on one thread they made a save up to 1.9x the plain write it is measured
 * against (docs/performance-cpu.md). A large piece's CRC is therefore computed in parts on two
 * threads, the second starting while the first writes, and the parts' sums combined: the same
 * CRC as one pass. */
enum { CRC_BESIDE_MIN = 1 << 20, CRC_PARTS = 64 };

int st_writer_threads(size_t bytes) { return bytes >= CRC_BESIDE_MIN && omp_get_max_threads() > 1 ? 2 : 1; }

static wp_result put_bytes(st_writer *w, const void *data, size_t n, char *err, size_t errlen) {
    if (st_writer_threads(n) == 1) {
        WP_TRY(fs_write_all(w->fd, data, n, w->tmp, err, errlen));
        w->crc = fs_crc32(w->crc, data, n);
        w->size += n;
        return 0;
    }
    wp_result rc = WP_OK;
    uint32_t part[CRC_PARTS];
    size_t len[CRC_PARTS];
    const size_t each = (n + CRC_PARTS - 1) / CRC_PARTS;
#pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 0) rc = fs_write_all(w->fd, data, n, w->tmp, err, errlen);
        /* dynamic: the other thread takes parts while this one writes */
#pragma omp for schedule(dynamic)
        for (int i = 0; i < CRC_PARTS; i++) {
            size_t a = (size_t)i * each < n ? (size_t)i * each : n;
            len[i] = a + each < n ? each : n - a;
            part[i] = fs_crc32(0, (const char *)data + a, len[i]);
        }
    }
    if (rc) return rc;
    for (int i = 0; i < CRC_PARTS; i++) w->crc = fs_crc32_combine(w->crc, part[i], len[i]);
    w->size += n;
    return 0;
}

static wp_result write_header(st_writer *w, const char *json, char *err, size_t errlen) {
    size_t len = strlen(json), padded = (len + 7) / 8 * 8; /* 8 + padded is a multiple of 8 */
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    wp_result rc = put_bytes(w, prefix, sizeof prefix, err, errlen);
    if (rc == 0) rc = put_bytes(w, json, len, err, errlen);
    if (rc == 0 && padded > len) rc = put_bytes(w, "        ", padded - len, err, errlen);
    return rc;
}

wp_result st_writer_open(st_writer **out, const char *path, const st_desc *tensors, int n, const char *const *meta_keys,
                   const char *const *meta_values, int n_meta, char *err, size_t errlen) {
    *out = NULL;
    st_writer *w = calloc(1, sizeof *w);
    if (!w) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", path);
    w->fd = -1;
    if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path) {
        free(w);
        return wp_fail(WP_FAILED, err, errlen, "%s: path too long", path);
    }
    json_t *root = header_json(tensors, n, meta_keys, meta_values, n_meta, &w->expected);
    char *json = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!json) {
        free(w);
        return wp_fail(WP_FAILED, err, errlen, "%s: cannot build the header (out of memory?)", path);
    }
    wp_result rc = fs_create_beside(path, ".tmp", false, w->tmp, sizeof w->tmp, &w->fd, err, errlen);
    if (rc == 0) rc = write_header(w, json, err, errlen);
    free(json);
    if (rc) {
        st_writer_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

wp_result st_writer_put(st_writer *w, const void *data, size_t bytes, char *err, size_t errlen) {
    if (w->written + bytes > w->expected)
        return wp_fail(WP_FAILED, err, errlen, "%s: %llu data bytes given, the header announced %llu", w->path,
                       (unsigned long long)(w->written + bytes), (unsigned long long)w->expected);
    wp_result rc = put_bytes(w, data, bytes, err, errlen);
    if (rc == 0) w->written += bytes;
    if (rc == 0) io_progress_add(bytes); /* an export's or a checkpoint's meter, when one runs */
    return rc;
}

wp_result st_writer_finish(st_writer *w, uint64_t *size, uint32_t *crc, char *err, size_t errlen) {
    wp_result rc = WP_OK;
    if (w->written != w->expected)
        rc = wp_fail(WP_FAILED, err, errlen, "%s: %llu data bytes given, the header announced %llu", w->path,
                     (unsigned long long)w->written, (unsigned long long)w->expected);
    if (rc == 0 && fsync(w->fd) != 0) rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: fsync failed", w->tmp);
    if (rc == 0) {
        int fd = w->fd;
        w->fd = -1;
        if (close(fd) != 0) rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: close failed", w->tmp);
    }
    if (rc == 0) rc = fs_rename_durable(w->tmp, w->path, err, errlen);
    if (rc) {
        st_writer_abort(w);
        return rc;
    }
    if (size) *size = w->size;
    if (crc) *crc = w->crc;
    free(w);
    return 0;
}

void st_writer_abort(st_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp[0]) unlink(w->tmp); /* only a file fs_create_beside made */
    free(w);
}

/* ---- reading ---- */

struct st_file {
    char path[WP_PATH_MAX];
    fs_map map;
    json_t *header;
    const unsigned char *data; /* start of the tensor bytes */
    uint64_t data_size;
    int n;
    st_tensor *tensors;
};

static int dtype_bytes(const char *name, bool *known, wp_dtype *t) {
    static const struct {
        const char *name;
        int bytes;
    } table[] = {{"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2},
                 {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    *known = true;
    if (strcmp(name, "F32") == 0) return *t = WP_F32, 4;
    if (strcmp(name, "F16") == 0) return *t = WP_F16, 2;
    if (strcmp(name, "BF16") == 0) return *t = WP_BF16, 2;
    *known = false;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(name, table[i].name) == 0) return table[i].bytes;
    return 0;
}

static wp_result parse_shape(const st_file *f, const char *name, json_t *shape, st_tensor *t, char *err, size_t errlen) {
    if (!json_is_array(shape) || json_array_size(shape) > WP_ST_MAX_DIMS)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: shape is not an array of at most %d sizes", f->path, name, WP_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > ((json_int_t)1 << 40))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: shape entry %d is not a size", f->path, name, d);
        t->shape[d] = json_integer_value(v);
        /* checked before it can wrap: [2^32, 2^32, 4] was 0 elements mod 2^64 and passed */
        if (__builtin_mul_overflow(t->numel, (uint64_t)t->shape[d], &t->numel) || t->numel > ((uint64_t)1 << 48))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: shape too large (more than 2^48 elements)", f->path, name);
    }
    return 0;
}

static wp_result parse_tensor(const st_file *f, const char *name, json_t *desc, st_tensor *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->name = name;
    json_t *dtype = json_object_get(desc, "dtype"), *offsets = json_object_get(desc, "data_offsets");
    if (!json_is_string(dtype) || strlen(json_string_value(dtype)) >= sizeof t->dtype_name)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: dtype missing or not a string", f->path, name);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", json_string_value(dtype));
    int elem = dtype_bytes(t->dtype_name, &t->known, &t->dtype);
    if (elem == 0) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: unknown dtype %s", f->path, name, t->dtype_name);
    WP_TRY(parse_shape(f, name, json_object_get(desc, "shape"), t, err, errlen));
    json_t *b = json_array_get(offsets, 0), *e = json_array_get(offsets, 1);
    if (!json_is_array(offsets) || json_array_size(offsets) != 2 || !json_is_integer(b) || !json_is_integer(e))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: data_offsets is not [begin, end]", f->path, name);
    json_int_t begin = json_integer_value(b), end = json_integer_value(e);
    if (begin < 0 || end < begin || (uint64_t)end > f->data_size)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: data_offsets [%lld, %lld] outside the %llu data bytes (truncated?)",
                       f->path, name, (long long)begin, (long long)end, (unsigned long long)f->data_size);
    if ((uint64_t)(end - begin) != t->numel * (uint64_t)elem)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: data_offsets span %lld bytes, its shape and dtype need %llu", f->path,
                       name, (long long)(end - begin), (unsigned long long)(t->numel * (uint64_t)elem));
    t->data = f->data + begin;
    t->nbytes = (size_t)(end - begin);
    return 0;
}

static int by_begin(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    const unsigned char *p = x->data, *q = y->data;
    return p < q ? -1 : p > q;
}

/* Two tensors sharing bytes would alias: a write through one (or a crafted file) changes the
 * other. Refused, as the safetensors format itself does. Empty tensors take no bytes. */
static wp_result check_overlaps(st_file *f, char *err, size_t errlen) {
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, by_begin);
    const st_tensor *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->tensors[i];
        if (t->nbytes == 0) continue;
        const unsigned char *at = t->data, *pat = prev ? prev->data : NULL;
        if (prev && at < pat + prev->nbytes)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensors %s and %s overlap (data_offsets from %lld and %lld)", f->path, prev->name,
                           t->name, (long long)(pat - f->data), (long long)(at - f->data));
        prev = t;
    }
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name); }

static wp_result parse_header(st_file *f, char *err, size_t errlen) {
    if (f->map.size < 8) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: truncated: %zu bytes, no header length", f->path, f->map.size);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)f->map.data[i] << (8 * i);
    if (n > ST_MAX_HEADER || n > f->map.size - 8)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header length %llu does not fit the %zu-byte file (truncated or not safetensors)",
                       f->path, (unsigned long long)n, f->map.size);
    json_error_t jerr;
    f->header = json_in_loadb((const char *)f->map.data + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(f->header))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header is not a JSON object (%s)", f->path, f->header ? "wrong type" : jerr.text);
    f->data = f->map.data + 8 + n;
    f->data_size = f->map.size - 8 - n;
    json_t *meta = json_object_get(f->header, "__metadata__");
    if (meta && !json_is_object(meta)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: __metadata__ is not an object", f->path);
    f->tensors = calloc(json_object_size(f->header) + 1, sizeof *f->tensors);
    if (!f->tensors) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", f->path);
    const char *name;
    json_t *desc;
    json_object_foreach(f->header, name, desc) {
        if (strcmp(name, "__metadata__") == 0) continue;
        if (!json_is_object(desc)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: entry is not an object", f->path, name);
        WP_TRY(parse_tensor(f, name, desc, &f->tensors[f->n], err, errlen));
        f->n++;
    }
    WP_TRY(check_overlaps(f, err, errlen));
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, by_name);
    return 0;
}

wp_result st_open(st_file **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", path);
    wp_result rc = WP_OK;
    if (snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", path);
    if (rc == 0) rc = fs_map_file(path, &f->map, err, errlen);
    if (rc == 0) rc = parse_header(f, err, errlen);
    if (rc) {
        st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

void st_close(st_file *f) {
    if (!f) return;
    free(f->tensors);
    json_decref(f->header);
    fs_unmap(&f->map);
    free(f);
}

const char *st_path(const st_file *f) { return f->path; }
int st_count(const st_file *f) { return f->n; }
const st_tensor *st_at(const st_file *f, int i) { return &f->tensors[i]; }

const st_tensor *st_find(const st_file *f, const char *name) {
    st_tensor key = {.name = name};
    return bsearch(&key, f->tensors, (size_t)f->n, sizeof *f->tensors, by_name);
}

const char *st_meta(const st_file *f, const char *key) {
    json_t *v = json_object_get(json_object_get(f->header, "__metadata__"), key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

wp_result st_to_f32(const st_file *f, const st_tensor *t, float *dst, char *err, size_t errlen) {
    return st_to_f32_range(f, t, 0, t->numel, dst, err, errlen);
}

wp_result st_to_f32_range(const st_file *f, const st_tensor *t, uint64_t first, uint64_t n, float *dst, char *err, size_t errlen) {
    if (!t->known) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: dtype %s cannot be read as weights (F32, F16, BF16)", f->path, t->name, t->dtype_name);
    if (first > t->numel || n > t->numel - first)
        return wp_fail(WP_FAILED, err, errlen, "%s: tensor %s: elements %llu..+%llu past its %llu", f->path, t->name,
                       (unsigned long long)first, (unsigned long long)n, (unsigned long long)t->numel);
    const unsigned char *p = (const unsigned char *)t->data + first * (t->dtype == WP_F32 ? 4 : 2);
    for (uint64_t i = 0; i < n; i++) {
        /* memcpy: the file gives no alignment guarantee beyond its own layout */
        if (t->dtype == WP_F32) {
            memcpy(&dst[i], p + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = t->dtype == WP_F16 ? wp_f16_to_f32(h) : wp_bf16_to_f32(h);
        }
        /* every reader of weights and moments comes through here: a NaN or Inf in a file would
         * run and give NaN losses with exit 0 (a run's own values are finite: its non-finite
         * steps are skipped) */
        if (!isfinite(dst[i]))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: element %llu is %g, not a finite number", f->path, t->name,
                           (unsigned long long)(first + i), dst[i]);
    }
    return 0;
}

void st_release(const st_file *f, const st_tensor *t, uint64_t first, uint64_t n) {
    (void)f;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || t->numel == 0 || first >= t->numel) return;
    if (n > t->numel - first) n = t->numel - first;
    size_t es = t->nbytes / t->numel;
    uintptr_t start = (uintptr_t)t->data + first * es;
    uintptr_t a = (start + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t b = (start + n * es) & ~((uintptr_t)page - 1);
    /* advice only: a failure leaves the pages resident, which costs memory, not correctness */
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

wp_result st_check_shape(const st_file *f, const st_tensor *t, int64_t rows, int64_t cols, char *err, size_t errlen) {
    bool ok = (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols) || (cols == 1 && t->ndim == 1 && t->shape[0] == rows);
    if (ok) return 0;
    char got[128] = "[";
    for (int d = 0; d < t->ndim; d++) {
        size_t len = strlen(got);
        snprintf(got + len, sizeof got - len, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    }
    strncat(got, "]", sizeof got - strlen(got) - 1);
    if (cols == 1) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s has shape %s, expected [%lld]", f->path, t->name, got, (long long)rows);
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s has shape %s, expected [%lld, %lld]", f->path, t->name, got, (long long)rows,
                   (long long)cols);
}
