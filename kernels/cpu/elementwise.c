/* Elementwise kernels on host buffers of any dtype: conversions, accumulation, scaling, the
 * fp64 sum of squares (gradient norms) and the residual add. Mixed dtypes go through fp32
 * blocks on the stack, so every result is rounded once. */
#include <omp.h>

#include "cpu.h"

enum {
    BLOCK = 2048,           /* elements per stack block */
    PARALLEL_MIN = 1 << 16, /* below this, threads cost more than they save */
};

void cpu_load(float *dst, const void *src, wp_dtype t, size_t first, size_t n) {
    if (t == WP_F32) {
        memcpy(dst, (const float *)src + first, n * sizeof *dst);
    } else if (t == WP_BF16) {
        const uint16_t *s = (const uint16_t *)src + first;
        for (size_t i = 0; i < n; i++) dst[i] = cpu_bf16_to_f32(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src + first;
        for (size_t i = 0; i < n; i++) dst[i] = cpu_f16_to_f32(s[i]);
    }
}

void cpu_store(void *dst, wp_dtype t, size_t first, const float *src, size_t n) {
    if (t == WP_F32) {
        memmove((float *)dst + first, src, n * sizeof *src);
    } else if (t == WP_BF16) {
        uint16_t *d = (uint16_t *)dst + first;
        for (size_t i = 0; i < n; i++) d[i] = cpu_f32_to_bf16(src[i]);
    } else {
        uint16_t *d = (uint16_t *)dst + first;
        for (size_t i = 0; i < n; i++) d[i] = cpu_f32_to_f16(src[i]);
    }
}

void cpu_add_into(void *dst, wp_dtype t, size_t first, const float *src, size_t n) {
    if (t == WP_F32) {
        float *d = (float *)dst + first;
        for (size_t i = 0; i < n; i++) d[i] += src[i];
        return;
    }
    float buf[BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += BLOCK) {
        size_t len = n - i0 < BLOCK ? n - i0 : BLOCK;
        cpu_load(buf, dst, t, first + i0, len);
        for (size_t i = 0; i < len; i++) buf[i] += src[i0 + i];
        cpu_store(dst, t, first + i0, buf, len);
    }
}

static size_t blocks_of(size_t n) { return (n + BLOCK - 1) / BLOCK; }
static size_t block_len(size_t n, size_t blk) { return n - blk * BLOCK < BLOCK ? n - blk * BLOCK : BLOCK; }

void cpu_convert(wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n) {
    if (dt == st) {
        memmove(dst, src, n * wp_dtype_size(dt));
        return;
    }
    size_t nb = blocks_of(n);
#pragma omp parallel for num_threads(cpu_threads(k)) if (n >= PARALLEL_MIN) schedule(static)
    for (size_t blk = 0; blk < nb; blk++) {
        float buf[BLOCK];
        size_t len = block_len(n, blk);
        cpu_load(buf, src, st, blk * BLOCK, len);
        cpu_store(dst, dt, blk * BLOCK, buf, len);
    }
}

void cpu_accumulate(wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n) {
    size_t nb = blocks_of(n);
#pragma omp parallel for num_threads(cpu_threads(k)) if (n >= PARALLEL_MIN) schedule(static)
    for (size_t blk = 0; blk < nb; blk++) {
        float buf[BLOCK];
        size_t len = block_len(n, blk);
        cpu_load(buf, src, st, blk * BLOCK, len);
        cpu_add_into(dst, dt, blk * BLOCK, buf, len);
    }
}

void cpu_scale(wp_kern *k, void *x, wp_dtype t, float a, size_t n) {
    size_t nb = blocks_of(n);
#pragma omp parallel for num_threads(cpu_threads(k)) if (n >= PARALLEL_MIN) schedule(static)
    for (size_t blk = 0; blk < nb; blk++) {
        float buf[BLOCK];
        size_t len = block_len(n, blk);
        cpu_load(buf, x, t, blk * BLOCK, len);
        for (size_t i = 0; i < len; i++) buf[i] *= a;
        cpu_store(x, t, blk * BLOCK, buf, len);
    }
}

/* Partial sums over fixed blocks, added in block order: the result does not depend on the
 * thread count, so every rank computes the same gradient norm from the same bits. */
enum { SUMSQ_GROUP = 64 };

static double block_sumsq(const void *x, wp_dtype t, size_t first, size_t len) {
    float buf[BLOCK];
    cpu_load(buf, x, t, first, len);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < len; i++) s += (double)buf[i] * buf[i];
    return s;
}

double cpu_sumsq(wp_kern *k, const void *x, wp_dtype t, size_t n) {
    size_t nb = blocks_of(n);
    double total = 0.0;
    for (size_t g0 = 0; g0 < nb; g0 += SUMSQ_GROUP) {
        double part[SUMSQ_GROUP] = {0};
        size_t g_len = nb - g0 < SUMSQ_GROUP ? nb - g0 : SUMSQ_GROUP;
#pragma omp parallel for num_threads(cpu_threads(k)) if (n >= PARALLEL_MIN) schedule(static)
        for (size_t j = 0; j < g_len; j++) part[j] = block_sumsq(x, t, (g0 + j) * BLOCK, block_len(n, g0 + j));
        for (size_t j = 0; j < g_len; j++) total += part[j];
    }
    return total;
}

void cpu_add(wp_kern *k, void *y, const void *a, const void *b, size_t n) {
    float *yf = y;
    const float *af = a, *bf = b;
#pragma omp parallel for simd num_threads(cpu_threads(k)) if (n >= PARALLEL_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) yf[i] = af[i] + bf[i];
}
