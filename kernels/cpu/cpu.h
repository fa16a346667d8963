/* Private to the CPU backend: its context, scratch memory, threading and the scalar helpers
 * every CPU kernel shares. The CPU computes and stores "ct" buffers in fp32, so kernels cast
 * their void* ct arguments to float*. Arguments are validated in kernels/dispatch.c before a
 * kernel runs, so the functions here assume sane shapes and non-NULL buffers. */
#ifndef WP_KERNELS_CPU_H
#define WP_KERNELS_CPU_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"

/* Scratch slots: a kernel that calls another kernel (the LM head calls the GEMM) must not
 * share a slot with it, so each user has its own: the fallback GEMM's packed panels, the fp32
 * product of a non-fp32 GEMM output, a layer's working blocks, a layer's fp32 weight
 * gradient, index arrays, and attention's whole-sequence arrays. */
enum {
    CPU_SCRATCH_GEMM_PACK,
    CPU_SCRATCH_GEMM_C,
    CPU_SCRATCH_LAYER,
    CPU_SCRATCH_GRAD,
    CPU_SCRATCH_INDEX,
    CPU_SCRATCH_ATTN,
    CPU_SCRATCH_SLOTS
};

typedef struct {
    void *p;
    size_t bytes;
    wp_mem_term term; /* what kern_memory counts it as */
} cpu_buf;

/* cos/sin tables of the last RoPE call, [s, hd/2] each; reused while the key is the same. */
typedef struct {
    float *cos, *sin;
    size_t cap;  /* floats allocated in each table */
    int s, hd, pos0;
    float theta;
    wp_rope_scaling scaling; /* all zero: none (memcmp'd: zero-initialised, no padding) */
    bool valid;
} cpu_rope_cache;

typedef struct {
    int threads;  /* OpenMP threads of this context (num_threads clause of every region) */
    size_t stream_min; /* bytes: an output this large is written past the caches (cpu_store_stream) */
    bool use_blas;
    cpu_buf scratch[CPU_SCRATCH_SLOTS];
    cpu_rope_cache rope;
} cpu_ctx;

static inline cpu_ctx *cpu_of(wp_kern *k) { return (cpu_ctx *)k->impl; }
static inline int cpu_threads(wp_kern *k) { return cpu_of(k)->threads; }

/* 64-byte aligned, zeroed host memory; NULL and a kern error naming who asked on failure. */
void *cpu_aligned_alloc(wp_kern *k, size_t bytes, const char *who);
/* At least `bytes` of scratch in `slot`, grown on demand, contents undefined; NULL + error. */
void *cpu_scratch(wp_kern *k, int slot, size_t bytes, const char *who);
/* cos/sin tables for (s, hd, pos0, theta, scaling or NULL); NULL + error when out of memory. */
const cpu_rope_cache *cpu_rope_tables(wp_kern *k, int s, int hd, int pos0, float theta, const wp_rope_scaling *sc);

/* ---- scalar conversions, round to nearest even (wrapped by kernels/dtype.c) ---- */
static inline uint32_t cpu_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float cpu_bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline uint16_t cpu_f32_to_bf16(float x) {
    uint32_t u = cpu_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet the NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; a carry rounds up into the exponent */
    return (uint16_t)(u >> 16);
}
static inline float cpu_bf16_to_f32(uint16_t b) { return cpu_bits_f32((uint32_t)b << 16); }

/* Rounds the low `shift` bits of m away, to nearest even. */
static inline uint32_t cpu_round_shift(uint32_t m, int shift) {
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return r + (rem > half || (rem == half && (r & 1u)));
}

static inline uint16_t cpu_f32_to_f16(float x) {
    uint32_t u = cpu_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu)); /* quiet NaN */
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (u >= 0x38800000u) /* normal: rebias the exponent (127 -> 15), round 13 bits away */
        return (uint16_t)(sign | cpu_round_shift(u - 0x38000000u, 13));
    if (u <= 0x33000000u) return sign; /* <= 2^-25: ties to the even neighbour, zero */
    /* subnormal half: units of 2^-24; the implicit bit becomes explicit */
    uint32_t e = u >> 23, m = (u & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | cpu_round_shift(m, (int)(126u - e)));
}

static inline float cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return cpu_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) { /* zero or subnormal: m * 2^-24 is exact in fp32 */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return cpu_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* dst[i] = (float)src[i] for a buffer of dtype t starting at element `first`. */
void cpu_load(float *dst, const void *src, wp_dtype t, size_t first, size_t n);
/* dst[first + i] = (t)src[i], rounded once. */
void cpu_store(void *dst, wp_dtype t, size_t first, const float *src, size_t n);
/* cpu_store's bits, written with non-temporal stores: for an output larger than the last-level
 * cache (ctx stream_min), which would leave the caches before anyone reads it. A plain store
 * first reads each line it overwrites (read-for-ownership): 2 bytes of traffic per byte
 * written, where glibc's memcpy of such sizes streams (1), so a conversion written the plain
 * way moves a third more than the copy it is measured against (docs/performance-cpu.md). */
void cpu_store_stream(void *dst, wp_dtype t, size_t first, const float *src, size_t n);
/* dst[first + i] += src[i]: loaded to fp32, added, rounded once. */
void cpu_add_into(void *dst, wp_dtype t, size_t first, const float *src, size_t n);

/* e^x for fp32 in a form compilers vectorise: Cody-Waite reduction by ln 2 and Cephes' degree-7
 * polynomial, relative error a few ulp (tested against exp); exactly 0 below -87.3 and for
 * -inf (masked attention scores), +inf above 88 (softmax and sigmoid never get there). NaN
 * is not propagated: callers pass finite values or -inf. The range checks are integer masks on
 * the bit pattern, not float selects: under the default -ftrapping-math GCC would otherwise
 * split the loop body into branches and give up vectorising it. */
static inline float cpu_expf(float x) {
    const uint32_t lo = 0xc2ae999au, hi = 0x42b00000u; /* -87.3f and 88.0f */
    uint32_t ux = cpu_f32_bits(x);
    uint32_t below = 0u - (uint32_t)(ux > lo);                   /* x < -87.3, -inf included */
    uint32_t above = 0u - (uint32_t)((int32_t)ux > (int32_t)hi); /* x > 88, +inf included */
    float xc = cpu_bits_f32((ux & ~(below | above)) | (lo & below) | (hi & above));
    float t = xc * 1.44269504f + 12582912.0f; /* 1.5 * 2^23: round(x / ln 2) in the low bits */
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f; /* ln 2 = 0.693359375 - 2.12194440e-4, the first part exact */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    float y = p * cpu_bits_f32((cpu_f32_bits(t) - 0x4b400000u + 127u) << 23); /* times 2^n */
    return cpu_bits_f32((cpu_f32_bits(y) & ~(below | above)) | (0x7f800000u & above));
}

/* Hot loops get a second, AVX2 build picked once at load time (GCC/Clang function clones over
 * ifunc); the library itself stays built for the baseline x86-64. Not under ThreadSanitizer:
 * the resolvers run during relocation, before TSan's runtime is up, and crash there. Not under
 * Clang before 18 (Debian 12's is 14, used for the fuzz build): it names the dispatcher
 * "f.ifunc", so a call from another file, which says "f", never links (llvm-project PR 71706
 * gave the dispatcher the plain name, as GCC does). */
#if defined(__clang__) && __clang_major__ < 18
#define CPU_HOT_CLONES 0
#else
#define CPU_HOT_CLONES 1
#endif
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__) && CPU_HOT_CLONES
#define CPU_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CPU_HOT
#endif

/* C[M,N] += A[M,K] @ B[K,N], row-major with leading dimensions (cpu/microkernel.c). Each
 * element sums its K terms from zero and in order, then adds to C once, whichever register
 * tile computes it: the same inputs give the same bits. */
void cpu_mm_acc(float *restrict C, int ldc, const float *restrict A, int lda, const float *restrict B, int ldb, int M,
                int N, int K);

/* ---- GEMM (cpu/gemm.c) ---- */
/* fp32 C: C = alpha op(A) op(B) + beta C through OpenBLAS when built with it, else the C loops. */
void cpu_gemm_f32(wp_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);
/* The cache-blocked C loops, always compiled so tests compare them with the BLAS path. */
void cpu_gemm_fallback(wp_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha, const float *A,
                       int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* Makes the next GEMMs use (or not) BLAS; returns the previous setting. For tests and the
 * benchmark; ignored (always false) in a build without BLAS. */
bool cpu_gemm_use_blas(wp_kern *k, bool on);

/* ---- attention internals (cpu/attention_*.c) ----
 * Tiles of BQ queries x BK keys (FlashAttention's blocking). Per-thread workspaces do not
 * depend on s; the whole-sequence arrays (inputs repacked per head, D = rowsum(dO * O)) are
 * the size of the inputs, so attention memory is O(s). Repacking once per call makes every
 * tile a contiguous block: the products never stride through memory at the sequence's row
 * pitch, which would map a tile's rows onto a few L1 sets. */
enum { CPU_ATTN_BQ = 64, CPU_ATTN_BK = 64 };

typedef struct {
    int b, sq, skv, nh, nkv, hd;
    int rep;               /* query heads per kv head */
    int offset;            /* position of query 0: skv - sq */
    int nqt, nkt;          /* query and key tiles */
    int qstride, kvstride; /* row strides of q/o and of k/v: nh*hd, nkv*hd */
    float scale;           /* 1/sqrt(hd) */
    const int32_t *qlo;    /* document masks: first key of each query [b*sq], NULL: plain causal */
} cpu_attn_shape;

/* One thread's tiles: scores or probabilities, dP or dS, a transpose, the query tile, the
 * output accumulator, dK and dV accumulators, and the running max and sum of each query row. */
typedef struct {
    float *s, *dp, *tr, *q, *acc, *dkacc, *dvacc, *m, *l;
} cpu_attn_ws;

cpu_attn_shape cpu_attn_shape_of(int b, int sq, int skv, int nh, int nkv, int hd, const int32_t *qlo);
/* The first key query i of sequence bi sees (0 without document masks). */
static inline int cpu_attn_lo(const cpu_attn_shape *sh, int bi, int i) { return sh->qlo ? sh->qlo[(size_t)bi * sh->sq + i] : 0; }
/* The first key tile some query of tile qt sees: qlo is nondecreasing, so its first row's. */
static inline int cpu_attn_first_kt(const cpu_attn_shape *sh, int bi, int qt) {
    return cpu_attn_lo(sh, bi, qt * CPU_ATTN_BQ) / CPU_ATTN_BK;
}
/* Workspaces for `threads` threads; NULL + error when out of memory. */
float *cpu_attn_workspace(wp_kern *k, int hd, int threads);
cpu_attn_ws cpu_attn_ws_of(float *base, int hd, int thread);
/* Whole-sequence scratch of `floats` floats; NULL + error. */
float *cpu_attn_sequence_scratch(wp_kern *k, size_t floats);

/* [b*s, heads*hd] rows -> [b][head][s][hd]: each head's rows contiguous. */
void cpu_attn_pack_heads(wp_kern *k, float *dst, const float *src, int b, int s, int heads, int hd);
/* [b*s, heads*hd] rows -> [b][head][tile][hd][BK]: each tile of BK positions transposed. */
void cpu_attn_pack_tiles_t(wp_kern *k, float *dst, const float *src, int b, int s, int heads, int hd);
/* Row i of (batch*heads + head) bh in a pack_heads array of s rows. */
static inline const float *cpu_attn_head_row(const float *p, int s, int hd, int bh, int i) {
    return p + ((size_t)bh * s + i) * hd;
}
/* Tile t of bh in a pack_tiles_t array of ntiles tiles: [hd][BK]. */
static inline const float *cpu_attn_tile_t(const float *p, int ntiles, int hd, int bh, int t) {
    return p + ((size_t)bh * ntiles + t) * hd * CPU_ATTN_BK;
}

/* Online softmax step on a tile of raw scores S[nq][BK] (FlashAttention): row r sees the
 * tile's columns lo[r] - k0 <= c <= last0 + r (lo NULL: from 0; lo holds key positions, k0 is
 * the tile's first); scores are scaled, the running max m and sum l updated, the row's
 * accumulated output (acc[r][hd]) rescaled, and S turned into exp(scale*S - m). A row that has
 * seen no key yet (a document starting later) keeps m = -inf and contributes nothing. */
void cpu_attn_softmax_tile(float *S, int nq, int nk, int last0, const int32_t *lo, int k0, float scale, float *m,
                           float *l, float *acc, int hd);
/* Backward tile: S (raw scores) becomes P = exp(scale*S - lse), dP becomes dS = P (dP - D);
 * columns outside [lo[r] - k0, last0 + r] are masked to 0. */
void cpu_attn_probs_tile(float *S, float *dP, int nq, int nk, int last0, const int32_t *lo, int k0, float scale,
                         const float *lse, const float *D);
/* tr[c][r] = x[r][c] for r < nq, c < nk; x has rows of BK, tr of BQ. */
void cpu_attn_transpose_tile(float *tr, const float *x, int nq, int nk);

/* ---- the kernels of wp_cpu_ops, one file per family ---- */
wp_result cpu_init(wp_kern *k, const wp_kern_opts *opts, char *err, size_t errlen);
void cpu_fini(wp_kern *k);
void *cpu_alloc(wp_kern *k, size_t bytes);
void cpu_free(wp_kern *k, void *p);
void cpu_memcpy(wp_kern *k, void *dst, const void *src, size_t bytes);
void cpu_zero(wp_kern *k, void *p, size_t bytes);
void cpu_sync(wp_kern *k);

/* the compute ops: cpu_<name> for each row of ops_table.h (kernels.h semantics; see there) */
#define CPU_OP_DECL(ret, name, params, ...) ret cpu_##name params;
WP_KERN_OPS(CPU_OP_DECL, CPU_OP_DECL)
#undef CPU_OP_DECL

#endif
