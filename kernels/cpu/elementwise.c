/* Elementwise kernels on host buffers of any dtype: conversions, accumulation, scaling, the
 * fp64 sum of squares (gradient norms) and the residual add. Mixed dtypes go through fp32
 * blocks on the stack, so every result is rounded once. */
#include <omp.h>

#include "cpu.h"

enum {
    BLOCK = 2048,           /* elements per stack block */
    PARALLEL_MIN = KERN_BULK_PARALLEL_MIN, /* below this, threads cost more than they save */
    GRAB = 32,              /* blocks a thread takes at a time in the memory-bound loops */
};

/* The bulk conversions: loops without calls or branches in their bodies, so that they
 * vectorise; fp32 -> fp16 through F16C where the CPU has it (vcvtps2ph with an explicit
 * round-to-nearest-even is the exact IEEE conversion, the same bits as cpu_f32_to_f16:
 * tests/kernels/elementwise checks fp32 patterns across the range). Not fp16 -> fp32:
 * vcvtph2ps quiets a signalling NaN, which cpu_f16_to_f32 keeps as it is. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_F16C 1
__attribute__((target("avx2,f16c"))) static void store_f16_f16c(uint16_t *restrict d, const float *restrict s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = cpu_f32_to_f16(s[i]);
}
/* libgcc fills in the CPU model before main; reading it is a load and a test */
#if defined(__clang__)
#include <cpuid.h>
/* clang before 16 rejects "f16c" in __builtin_cpu_supports (the fuzz build, scripts/fuzz.sh):
 * CPUID leaf 1's F16C bit instead; avx2's test also checks that the OS saves the AVX state */
static bool have_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && __builtin_cpu_supports("avx2");
}
#else
static bool have_f16c(void) { return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2"); }
#endif
#else
#define CPU_F16C 0
#endif

/* cpu_f16_to_f32 with its three cases as selects */
CPU_HOT static void load_f16(float *restrict d, const uint16_t *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t h = s[i], sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
        uint32_t normal = sign | ((e + 112u) << 23) | (m << 13), special = sign | 0x7f800000u | (m << 13);
        uint32_t sub = sign | cpu_f32_bits((float)m * 0x1p-24f); /* exact in fp32 */
        d[i] = cpu_bits_f32(e == 0x1fu ? special : e == 0 ? sub : normal);
    }
}

CPU_HOT static void load_bf16(float *restrict d, const uint16_t *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = cpu_bf16_to_f32(s[i]);
}

/* cpu_f32_to_bf16 with its NaN case as a select instead of an early return */
CPU_HOT static void store_bf16(uint16_t *restrict d, const float *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u = cpu_f32_bits(s[i]);
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
        d[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
}

void cpu_load(float *dst, const void *src, wp_dtype t, size_t first, size_t n) {
    const uint16_t *s = (const uint16_t *)src + first;
    if (t == WP_F32) {
        memcpy(dst, (const float *)src + first, n * sizeof *dst);
    } else if (t == WP_BF16) {
        load_bf16(dst, s, n);
    } else {
        load_f16(dst, s, n);
    }
}

void cpu_store(void *dst, wp_dtype t, size_t first, const float *src, size_t n) {
    uint16_t *d = (uint16_t *)dst + first;
    if (t == WP_F32) {
        memmove((float *)dst + first, src, n * sizeof *src);
    } else if (t == WP_BF16) {
        store_bf16(d, src, n);
    } else {
#if CPU_F16C
        if (have_f16c()) {
            store_f16_f16c(d, src, n);
            return;
        }
#endif
        for (size_t i = 0; i < n; i++) d[i] = cpu_f32_to_f16(src[i]);
    }
}

/* Non-temporal copy of n bytes (SSE2, the x86-64 baseline: 16-byte streams reach the same
 * bandwidth as wider ones); the unaligned head and tail are plain stores. The sfence orders the
 * streamed stores before whatever follows (another thread reads them after the region's
 * barrier). Elsewhere a plain copy. */
#if defined(__x86_64__) && defined(__GNUC__)
static void stream_bytes(void *dst, const void *src, size_t n) {
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n) head = n;
    memcpy(d, s, head);
    size_t i = head;
    for (; i + 16 <= n; i += 16) _mm_stream_si128((__m128i *)(d + i), _mm_loadu_si128((const __m128i *)(s + i)));
    memcpy(d + i, s + i, n - i);
    _mm_sfence();
}
#else
static void stream_bytes(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
#endif

void cpu_store_stream(void *dst, wp_dtype t, size_t first, const float *src, size_t n) {
    size_t es = wp_dtype_size(t);
    if (t == WP_F32) {
        stream_bytes((char *)dst + first * es, src, n * es);
        return;
    }
    _Alignas(64) uint16_t buf[BLOCK]; /* converted in the cache, then streamed out */
    for (size_t i0 = 0; i0 < n; i0 += BLOCK) {
        size_t len = n - i0 < BLOCK ? n - i0 : BLOCK;
        cpu_store(buf, t, 0, src + i0, len);
        stream_bytes((char *)dst + (first + i0) * es, buf, len * es);
    }
}

CPU_HOT static void add_f32(float *restrict d, const float *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] += s[i];
}

void cpu_add_into(void *dst, wp_dtype t, size_t first, const float *src, size_t n) {
    if (t == WP_F32) {
        add_f32((float *)dst + first, src, n);
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
    const bool stream = n * wp_dtype_size(dt) >= cpu_of(k)->stream_min;
#pragma omp parallel for num_threads(kern_bulk_threads(k, n)) schedule(dynamic, GRAB)
    for (size_t blk = 0; blk < nb; blk++) {
        float buf[BLOCK];
        size_t len = block_len(n, blk), first = blk * BLOCK;
        /* an fp32 side is read or written in place: no stop in the stack block */
        if (st == WP_F32) {
            (stream ? cpu_store_stream : cpu_store)(dst, dt, first, (const float *)src + first, len);
        } else if (dt == WP_F32) {
            cpu_load((float *)dst + first, src, st, first, len);
        } else {
            cpu_load(buf, src, st, first, len);
            cpu_store(dst, dt, first, buf, len);
        }
    }
}

void cpu_accumulate(wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n) {
    size_t nb = blocks_of(n);
#pragma omp parallel for num_threads(kern_bulk_threads(k, n)) schedule(dynamic, GRAB)
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
