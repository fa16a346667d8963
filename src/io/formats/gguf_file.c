/* GGUF v2/v3 parsing and checks (gguf_file.h). The file is mapped; a cursor reads it and every
 * field is checked against the bytes that are left before it sizes anything: the key/value and
 * tensor tables grow as entries parse (a lying count runs out of bytes, it never sizes an
 * allocation). Values are little-endian, as llama.cpp writes them on the machines we run on. */
#include "gguf_file.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels.h"

typedef struct {
    const gguf_file *f;
    size_t pos;
    char *err;
    size_t errlen;
} cursor;

static size_t left(const cursor *c) { return c->f->map.size - c->pos; }

/* n bytes at the cursor, or 2 naming the field that the file ends inside. */
static wp_result take(cursor *c, void *dst, size_t n, const char *field) {
    if (left(c) < n)
        return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: file cut short: %s needs %zu bytes at offset %zu, the file has %zu",
                       c->f->path, field, n, c->pos, c->f->map.size);
    if (dst) memcpy(dst, c->f->map.data + c->pos, n);
    c->pos += n;
    return 0;
}

static wp_result take_u32(cursor *c, uint32_t *v, const char *field) { return take(c, v, 4, field); }
static wp_result take_u64(cursor *c, uint64_t *v, const char *field) { return take(c, v, 8, field); }

/* A gguf_string: u64 length, then that many bytes (checked against what is left). */
static wp_result take_str(cursor *c, const char **s, size_t *len, const char *field) {
    uint64_t n = 0;
    WP_TRY(take_u64(c, &n, field));
    if (n > left(c))
        return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: %s: string length %llu at offset %zu runs past the end of the file (%zu bytes)",
                       c->f->path, field, (unsigned long long)n, c->pos - 8, c->f->map.size);
    *s = (const char *)c->f->map.data + c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return 0;
}

static const size_t scalar_size[GGUF_NTYPES] = {
    [GGUF_U8] = 1, [GGUF_I8] = 1, [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4, [GGUF_I32] = 4,
    [GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};

/* One value of kv (its key already read): scalars, strings, arrays of either (not of arrays). */
static wp_result take_value(cursor *c, gguf_kv *kv) {
    char field[96];
    snprintf(field, sizeof field, "value of key '%.*s'", (int)(kv->keylen < 48 ? kv->keylen : 48), kv->key);
    WP_TRY(take_u32(c, &kv->type, field));
    if (kv->type >= GGUF_NTYPES)
        return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: %s: type %u is not a GGUF value type", c->f->path, field, kv->type);
    const char *s;
    size_t len;
    if (kv->type == GGUF_STRING) {
        kv->off = c->pos;
        return take_str(c, &s, &len, field);
    }
    if (kv->type != GGUF_ARRAY) {
        kv->off = c->pos;
        return take(c, NULL, scalar_size[kv->type], field);
    }
    WP_TRY(take_u32(c, &kv->atype, field));
    WP_TRY(take_u64(c, &kv->n, field));
    if (kv->atype >= GGUF_NTYPES || kv->atype == GGUF_ARRAY)
        return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: %s: array element type %u is not supported", c->f->path, field, kv->atype);
    kv->off = c->pos;
    size_t each = kv->atype == GGUF_STRING ? 8 : scalar_size[kv->atype]; /* a string takes 8 bytes at least */
    if (kv->n > left(c) / each)
        return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: %s: array count %llu is more than the %zu bytes left can hold", c->f->path,
                       field, (unsigned long long)kv->n, left(c));
    if (kv->atype != GGUF_STRING) return take(c, NULL, (size_t)kv->n * each, field);
    wp_result rc = WP_OK;
    for (uint64_t i = 0; i < kv->n && rc == 0; i++) rc = take_str(c, &s, &len, field);
    return rc;
}

/* Appends one zeroed element to *arr (of *n, capacity *cap), doubling as entries parse. */
static void *grow(void **arr, size_t *n, size_t *cap, size_t size) {
    if (*n == *cap) {
        size_t want = *cap ? 2 * *cap : 16;
        void *p = realloc(*arr, want * size);
        if (!p) return NULL;
        *arr = p;
        *cap = want;
    }
    void *e = (char *)*arr + (*n)++ * size;
    memset(e, 0, size);
    return e;
}

static wp_result read_kvs(cursor *c, gguf_file *f, uint64_t n_kv) {
    size_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (left(c) < 13) /* key length, type and a one-byte value at least */
            return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: header: kv_count %llu, but the file ends after %llu key/value pairs",
                           f->path, (unsigned long long)n_kv, (unsigned long long)i);
        gguf_kv *kv = grow((void **)&f->kv, &f->n_kv, &cap, sizeof *kv);
        if (!kv) return wp_fail(WP_FAILED, c->err, c->errlen, "%s: out of memory for the key/value table", f->path);
        wp_result rc = take_str(c, &kv->key, &kv->keylen, "key");
        if (rc == 0) rc = take_value(c, kv);
        if (rc) return rc;
    }
    return 0;
}

/* Block size (elements) and its bytes of every ggml type llama.cpp defines: the layout of a
 * tensor weipipe does not dequantize can still be checked. 0: not a type. */
static const struct {
    const char *name;
    unsigned block, bytes;
} types[] = {
    [0] = {"F32", 1, 4},          [1] = {"F16", 1, 2},        [2] = {"Q4_0", 32, 18},     [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},       [7] = {"Q5_1", 32, 24},     [8] = {"Q8_0", 32, 34},     [9] = {"Q8_1", 32, 40},
    [10] = {"Q2_K", 256, 84},     [11] = {"Q3_K", 256, 110},  [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},    [15] = {"Q8_K", 256, 292},  [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},  [19] = {"IQ1_S", 256, 50},  [20] = {"IQ4_NL", 32, 18},  [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},       [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},         [27] = {"I64", 1, 8},       [28] = {"F64", 1, 8},       [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},        [34] = {"TQ1_0", 256, 54},  [35] = {"TQ2_0", 256, 66},  [39] = {"MXFP4", 32, 17},
};
#define N_TYPES (sizeof types / sizeof types[0])

const char *gguf_type_name(uint32_t type) { return type < N_TYPES && types[type].name ? types[type].name : "unknown"; }

/* Dims, type and size of one tensor: positive dims whose product does not overflow, a known
 * type whose block divides the first dim. */
static wp_result check_shape(cursor *c, gguf_tensor *t) {
    const gguf_file *f = c->f;
    int nl = (int)(t->namelen < 64 ? t->namelen : 64);
    t->numel = 1;
    for (uint32_t d = 0; d < t->ndims; d++) {
        if (t->dims[d] == 0 || t->dims[d] > INT64_MAX || __builtin_mul_overflow(t->numel, t->dims[d], &t->numel) ||
            t->numel > INT64_MAX)
            return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: tensor '%.*s': dims[%u] = %llu is zero or overflows the element count",
                           f->path, nl, t->name, d, (unsigned long long)t->dims[d]);
    }
    if (t->type >= N_TYPES || !types[t->type].name)
        return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: tensor '%.*s': type %u is not a ggml type", f->path, nl, t->name, t->type);
    unsigned block = types[t->type].block;
    if (t->dims[0] % block)
        return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: tensor '%.*s': dims[0] = %llu is not a multiple of %s's block of %u",
                       f->path, nl, t->name, (unsigned long long)t->dims[0], types[t->type].name, block);
    t->nbytes = t->numel / block * types[t->type].bytes; /* numel < 2^63, bytes/block <= 10: no overflow */
    return 0;
}

static wp_result read_tensor_infos(cursor *c, gguf_file *f, uint64_t n_tensors) {
    size_t cap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (left(c) < 24) /* name length, n_dims, type and offset at least */
            return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: header: tensor_count %llu, but the file ends after %llu tensor infos",
                           f->path, (unsigned long long)n_tensors, (unsigned long long)i);
        gguf_tensor *t = grow((void **)&f->t, &f->n_tensors, &cap, sizeof *t);
        if (!t) return wp_fail(WP_FAILED, c->err, c->errlen, "%s: out of memory for the tensor table", f->path);
        wp_result rc = take_str(c, &t->name, &t->namelen, "tensor name");
        if (rc == 0 && t->namelen >= 64) /* GGML_MAX_NAME */
            rc = wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: tensor %llu: name of %zu bytes is longer than ggml's 63", f->path,
                         (unsigned long long)i, t->namelen);
        if (rc == 0) rc = take_u32(c, &t->ndims, "tensor n_dims");
        if (rc == 0 && (t->ndims < 1 || t->ndims > GGUF_MAX_DIMS))
            rc = wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: tensor '%.*s': n_dims %u is not between 1 and %d", f->path, (int)t->namelen,
                         t->name, t->ndims, GGUF_MAX_DIMS);
        for (uint32_t d = 0; rc == 0 && d < t->ndims; d++) rc = take_u64(c, &t->dims[d], "tensor dims");
        if (rc == 0) rc = take_u32(c, &t->type, "tensor type");
        if (rc == 0) rc = take_u64(c, &t->off, "tensor offset");
        if (rc == 0) rc = check_shape(c, t);
        if (rc) return rc;
    }
    return 0;
}

static int by_name(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    int c = memcmp(x->name, y->name, x->namelen < y->namelen ? x->namelen : y->namelen);
    return c ? c : (x->namelen > y->namelen) - (x->namelen < y->namelen);
}

static int by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Each tensor's bytes aligned, inside the file, and apart from every other tensor's. */
static wp_result check_data(cursor *c, gguf_file *f) {
    size_t room = f->map.size - f->data;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->t[i];
        if (t->off % f->alignment || t->off > room || t->nbytes > room - t->off)
            return wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: tensor '%.*s': offset %llu (+%llu bytes) is unaligned or past the end of "
                           "the data section (%zu bytes)", f->path, (int)t->namelen, t->name, (unsigned long long)t->off,
                           (unsigned long long)t->nbytes, room);
    }
    const gguf_tensor **order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *order);
    if (!order) return wp_fail(WP_FAILED, c->err, c->errlen, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n_tensors; i++) order[i] = &f->t[i];
    qsort(order, f->n_tensors, sizeof *order, by_offset);
    wp_result rc = WP_OK;
    for (size_t i = 0; rc == 0 && i + 1 < f->n_tensors; i++)
        if (order[i]->off + order[i]->nbytes > order[i + 1]->off)
            rc = wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: tensor '%.*s': data at offset %llu overlaps tensor '%.*s'", f->path,
                         (int)order[i + 1]->namelen, order[i + 1]->name, (unsigned long long)order[i + 1]->off,
                         (int)order[i]->namelen, order[i]->name);
    /* one name, one tensor: a reader that takes the first of two would run what it was not given */
    qsort(order, f->n_tensors, sizeof *order, by_name);
    for (size_t i = 0; rc == 0 && i + 1 < f->n_tensors; i++)
        if (by_name(&order[i], &order[i + 1]) == 0)
            rc = wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s: tensor '%.*s' is given twice", f->path, (int)order[i]->namelen,
                         order[i]->name);
    free(order);
    return rc;
}

static wp_result parse(gguf_file *f, char *err, size_t errlen) {
    cursor c = {.f = f, .err = err, .errlen = errlen};
    uint32_t magic = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    wp_result rc = take_u32(&c, &magic, "header magic");
    if (rc == 0 && memcmp(&magic, "GGUF", 4) != 0) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header: magic is not GGUF", f->path);
    if (rc == 0) rc = take_u32(&c, &f->version, "header version");
    if (rc == 0 && f->version != 2 && f->version != 3)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header: version %u (weipipe reads GGUF 2 and 3)", f->path, f->version);
    if (rc == 0) rc = take_u64(&c, &n_tensors, "header tensor_count");
    if (rc == 0) rc = take_u64(&c, &n_kv, "header kv_count");
    /* the counts against the bytes left first, so that the message names the lying count */
    if (rc == 0 && n_kv > left(&c) / 13)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header: kv_count %llu is more than the file's %zu bytes can hold (a lying count, or a file cut short)", f->path,
                       (unsigned long long)n_kv, f->map.size);
    if (rc == 0) rc = read_kvs(&c, f, n_kv);
    if (rc == 0 && n_tensors > left(&c) / 24)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header: tensor_count %llu is more than the file's %zu bytes can hold (a lying count, or a file cut short)", f->path,
                       (unsigned long long)n_tensors, f->map.size);
    if (rc == 0) rc = read_tensor_infos(&c, f, n_tensors);
    if (rc) return rc;
    uint64_t align = GGUF_DEFAULT_ALIGNMENT;
    bool present;
    WP_TRY(gguf_get_uint(f, "general.alignment", false, &align, &present, err, errlen));
    if (align == 0 || (align & (align - 1)) || align > (1u << 30))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: general.alignment %llu is not a power of two up to 2^30", f->path, (unsigned long long)align);
    f->alignment = align;
    size_t pad = (size_t)((align - c.pos % align) % align);
    if (f->n_tensors && pad > left(&c))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: file cut short: the data section would start at offset %zu, the file has %zu",
                       f->path, c.pos + pad, f->map.size);
    f->data = f->n_tensors ? c.pos + pad : c.pos;
    return check_data(&c, f);
}

/* Mapped once; when only_gguf, a file that does not start with the magic is no error: *out stays
 * NULL. */
static wp_result open_mapped(gguf_file **out, const char *path, bool only_gguf, char *err, size_t errlen) {
    *out = NULL;
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    wp_result rc = fs_map_file(path, &f->map, err, errlen);
    if (rc == 0 && only_gguf && (f->map.size < 4 || memcmp(f->map.data, "GGUF", 4) != 0)) {
        gguf_close(f);
        return 0;
    }
    if (rc == 0) rc = parse(f, err, errlen);
    if (rc) gguf_close(f);
    else *out = f;
    return rc;
}

wp_result gguf_open(gguf_file **out, const char *path, char *err, size_t errlen) {
    return open_mapped(out, path, false, err, errlen);
}

wp_result gguf_open_if(const char *path, gguf_file **out, char *err, size_t errlen) {
    *out = NULL;
    struct stat st;
    if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    return open_mapped(out, path, true, err, errlen);
}

const char *gguf_path(const gguf_file *f) { return f->path; }

void gguf_close(gguf_file *f) {
    if (!f) return;
    fs_unmap(&f->map);
    free(f->kv);
    free(f->t);
    free(f);
}

bool gguf_is_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char magic[4];
    bool yes = read(fd, magic, 4) == 4 && memcmp(magic, "GGUF", 4) == 0;
    close(fd);
    return yes;
}

/* ---- accessors (the file is checked: no bounds to test) ---- */

wp_result gguf_find_kv(const gguf_file *f, const char *key, const gguf_kv **kv, char *err, size_t errlen) {
    size_t len = strlen(key);
    *kv = NULL;
    for (size_t i = 0; i < f->n_kv; i++) {
        if (f->kv[i].keylen != len || memcmp(f->kv[i].key, key, len) != 0) continue;
        if (*kv) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: key %s is given twice", f->path, key);
        *kv = &f->kv[i];
    }
    return 0;
}

static int64_t read_int(const unsigned char *p, uint32_t type, bool *ok) {
    union {
        uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; uint64_t u64; int64_t i64;
    } v;
    memcpy(&v, p, scalar_size[type]);
    *ok = true;
    switch (type) {
    case GGUF_U8: case GGUF_BOOL: return v.u8;
    case GGUF_I8: return v.i8;
    case GGUF_U16: return v.u16;
    case GGUF_I16: return v.i16;
    case GGUF_U32: return v.u32;
    case GGUF_I32: return v.i32;
    case GGUF_I64: return v.i64;
    case GGUF_U64: *ok = v.u64 <= INT64_MAX; return (int64_t)v.u64;
    default: *ok = false; return 0;
    }
}

static wp_result missing(const gguf_file *f, const char *key, bool required, bool *present, char *err, size_t errlen) {
    if (present) *present = false;
    return required ? wp_fail(WP_BAD_INPUT, err, errlen, "%s: key %s is missing", f->path, key) : 0;
}

wp_result gguf_get_uint(const gguf_file *f, const char *key, bool required, uint64_t *v, bool *present, char *err, size_t errlen) {
    const gguf_kv *kv;
    wp_result rc = gguf_find_kv(f, key, &kv, err, errlen);
    if (rc || !kv) return rc ? rc : missing(f, key, required, present, err, errlen);
    bool ok = kv->type != GGUF_STRING && kv->type != GGUF_ARRAY;
    int64_t x = ok ? read_int(f->map.data + kv->off, kv->type, &ok) : 0;
    if (!ok || x < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: key %s is not a non-negative integer", f->path, key);
    *v = (uint64_t)x;
    if (present) *present = true;
    return 0;
}

wp_result gguf_get_float(const gguf_file *f, const char *key, bool required, double *v, bool *present, char *err, size_t errlen) {
    const gguf_kv *kv;
    wp_result rc = gguf_find_kv(f, key, &kv, err, errlen);
    if (rc || !kv) return rc ? rc : missing(f, key, required, present, err, errlen);
    const unsigned char *p = f->map.data + kv->off;
    if (kv->type == GGUF_F32) {
        float x;
        memcpy(&x, p, 4);
        *v = x;
    } else if (kv->type == GGUF_F64) {
        memcpy(v, p, 8);
    } else {
        bool ok = kv->type != GGUF_STRING && kv->type != GGUF_ARRAY;
        int64_t x = ok ? read_int(p, kv->type, &ok) : 0;
        if (!ok) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: key %s is not a number", f->path, key);
        *v = (double)x;
    }
    if (present) *present = true;
    return 0;
}

wp_result gguf_get_str(const gguf_file *f, const char *key, bool required, const char **s, size_t *len, char *err, size_t errlen) {
    const gguf_kv *kv;
    *s = NULL;
    *len = 0;
    wp_result rc = gguf_find_kv(f, key, &kv, err, errlen);
    if (rc || !kv) return rc ? rc : missing(f, key, required, NULL, err, errlen);
    if (kv->type != GGUF_STRING) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: key %s is not a string", f->path, key);
    size_t pos = kv->off;
    gguf_next_str(f, &pos, s, len);
    return 0;
}

void gguf_next_str(const gguf_file *f, size_t *pos, const char **s, size_t *len) {
    uint64_t n;
    memcpy(&n, f->map.data + *pos, 8);
    *s = (const char *)f->map.data + *pos + 8;
    *len = (size_t)n;
    *pos += 8 + (size_t)n;
}

int64_t gguf_next_int(const gguf_file *f, size_t *pos, uint32_t type) {
    bool ok;
    int64_t v = read_int(f->map.data + *pos, type, &ok);
    *pos += scalar_size[type];
    return v;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    size_t len = strlen(name);
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->t[i].namelen == len && memcmp(f->t[i].name, name, len) == 0) return &f->t[i];
    return NULL;
}

/* ---- dequantization: the block formats of ggml-common.h, computed as gguf-py's quants.py
 * does (d * q, then + m: two fp32 roundings, never fused), so the values equal its. ---- */

static float f16_at(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return wp_f16_to_f32(h);
}

static void deq_block(uint32_t type, const unsigned char *b, float *y) {
    if (type == GGML_Q8_0) {
        float d = f16_at(b);
        for (int j = 0; j < 32; j++) y[j] = d * (float)(int8_t)b[2 + j];
    } else if (type == GGML_Q4_0) {
        float d = f16_at(b);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((b[2 + j] & 0xF) - 8);
            y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
        }
    } else { /* Q4_1 */
        float d = f16_at(b), m = f16_at(b + 2);
        for (int j = 0; j < 16; j++) {
            float lo = d * (float)(b[4 + j] & 0xF), hi = d * (float)(b[4 + j] >> 4);
            y[j] = lo + m;
            y[j + 16] = hi + m;
        }
    }
}

bool gguf_type_readable(uint32_t type) {
    return type == GGML_F32 || type == GGML_F16 || type == GGML_BF16 || type == GGML_Q8_0 || type == GGML_Q4_0 ||
           type == GGML_Q4_1;
}

/* Every value finite, or 2 naming the tensor and where: a NaN or Inf weight (a damaged scale,
 * min or norm) would run and give NaN logits with exit 0. block: 32 for the block formats. */
static wp_result check_finite(const gguf_file *f, const gguf_tensor *t, const float *v, size_t n, size_t block, char *err,
                              size_t errlen) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            if (block > 1)
                return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %.*s: block %zu (%s, at byte %llu of the data section) "
                               "dequantizes to %g: its scale or min is not finite", f->path, (int)t->namelen, t->name, i / block,
                               gguf_type_name(t->type), (unsigned long long)(t->off + i / block * types[t->type].bytes), v[i]);
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %.*s: element %zu is %g, not a finite number", f->path,
                           (int)t->namelen, t->name, i, v[i]);
        }
    return 0;
}

wp_result gguf_tensor_f32(const gguf_file *f, const gguf_tensor *t, float *dst, char *err, size_t errlen) {
    const unsigned char *p = f->map.data + f->data + t->off;
    size_t n = (size_t)t->numel;
    switch (t->type) {
    case GGML_F32: memcpy(dst, p, n * 4); return check_finite(f, t, dst, n, 1, err, errlen);
    case GGML_F16: for (size_t i = 0; i < n; i++) dst[i] = f16_at(p + 2 * i); return check_finite(f, t, dst, n, 1, err, errlen);
    case GGML_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = wp_bf16_to_f32(h);
        }
        return check_finite(f, t, dst, n, 1, err, errlen);
    case GGML_Q8_0: case GGML_Q4_0: case GGML_Q4_1:
        for (size_t b = 0; b < n / 32; b++) deq_block(t->type, p + b * types[t->type].bytes, dst + 32 * b);
        return check_finite(f, t, dst, n, 32, err, errlen);
    default:
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %.*s: type %s (%u) is not one weipipe dequantizes (F32, F16, BF16, Q8_0, "
                       "Q4_0, Q4_1)", f->path, (int)t->namelen, t->name, gguf_type_name(t->type), t->type);
    }
}
