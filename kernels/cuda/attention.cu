/* CUDA backend: causal attention, flash style: Q, K, V tiles in shared memory, an online
 * softmax, memory O(s) (never an s x s matrix), fp32 accumulation, grouped-query heads.
 *
 * cuDNN's fused flash attention (attention_cudnn.cpp) runs a whole causal sequence in fp16/bf16
 * when the build has it (--attention auto|cudnn), and under document masks the whole documents
 * of whole sequences as its ragged sequences (kern_attention_docs hands it the list); weipipe's
 * own kernels run the rest (Seq1F1B's later segments, decoding), are the
 * cross-check of cuDNN's in the GPU tests, and all of it under --attention native. kern_notes
 * says once per context which one runs and, when not cuDNN, why.
 *
 * Two implementations of our own compute the same thing:
 * - attention_mma.cu: tensor cores through WMMA (fp16/bf16 in, fp32 accumulate), 64 x 64
 *   tiles, for the head sizes real models use;
 * - attention_simt.cu: plain CUDA-core arithmetic for fp32 compute and any other head size.
 * Both of our backwards are deterministic: no atomics (so --deterministic false changes only
 * cuDNN's). A first pass owns a KV tile and sums its dK,
 * dV over all query tiles (and over the query heads that share the KV head) in a fixed order;
 * a second pass owns a query tile and sums its dQ over the KV tiles. Each recomputes the
 * probabilities from the forward's log-sum-exp; the price is computing S and dP twice. */
#include "attention.cuh"
#if WP_HAVE_CUDNN
#include "attention_cudnn.h"
#endif

/* delta[b, nh, i] = sum_d dout[i, d] * o[i, d]: the softmax backward's row term, once per row. */
template <typename T>
__global__ void attn_delta_kernel(float *delta, const T *dout, const T *o, wp_attn_shape s) {
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    size_t rows = (size_t)s.b * s.sq * s.nh;
    if (warp >= rows) return;
    int head = (int)(warp % s.nh);
    size_t bi_row = warp / s.nh; /* b * sq + i */
    int i = (int)(bi_row % s.sq), bi = (int)(bi_row / s.sq);
    const T *dr = dout + bi_row * s.q_stride + (size_t)head * s.hd;
    const T *orow = o + bi_row * s.q_stride + (size_t)head * s.hd;
    float acc = 0.0f;
    for (int d = lane; d < s.hd; d += 32) acc += wp_load(dr[d]) * wp_load(orow[d]);
    acc = wp_warp_sum(acc);
    if (lane == 0) delta[((size_t)bi * s.nh + head) * s.sq + i] = acc;
}

#if WP_HAVE_CUDNN
/* lse [b, nh, s] (ours) from or to cuDNN's ragged stats [b*s, nh] (token-major) */
__global__ void lse_layout_kernel(float *dst, const float *src, int b, int nh, int s, bool to_tokens) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)b * nh * s) return;
    int t = (int)(i % s), h = (int)(i / s % nh), bi = (int)(i / s / nh);
    size_t tok = ((size_t)bi * s + t) * nh + h;
    if (to_tokens)
        dst[tok] = src[i];
    else
        dst[i] = src[tok];
}

static int lse_layout(wp_kern *k, wp_cuda *c, float *dst, const float *src, int b, int nh, int s, bool to_tokens) {
    size_t n = (size_t)b * nh * s;
    lse_layout_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c->stream>>>(dst, src, b, nh, s, to_tokens);
    return CU_LAUNCH_CHECK(k, "lse_layout_kernel");
}

/* The cuDNN handle, made at the first call that may use it; NULL (c->cudnn_why) when it cannot be. */
static wp_cudnn_attn *cudnn_handle(wp_cuda *c) {
    if (!c->cudnn && !c->cudnn_tried) {
        c->cudnn_tried = true;
        c->cudnn = cudnn_attn_create(c->stream, c->cudnn_why, sizeof c->cudnn_why);
    }
    return c->cudnn;
}
#endif

static int make_shape(wp_kern *k, const char *name, wp_attn_shape *s, int b, int sq, int skv, int nh, int nkv,
                      int hd, const int32_t *qlo) {
    if (b < 0 || b > 65535 || sq < 0 || skv < sq || nh <= 0 || nh > 65535 || nkv <= 0 || nh % nkv || hd <= 0)
        return cu_fail(k, name, "bad shape b=%d sq=%d skv=%d nh=%d nkv=%d hd=%d (need skv >= sq, nh %% nkv == 0)", b,
                       sq, skv, nh, nkv, hd);
    s->b = b;
    s->sq = sq;
    s->skv = skv;
    s->nh = nh;
    s->nkv = nkv;
    s->hd = hd;
    s->scale = 1.0f / sqrtf((float)hd);
    s->q_stride = (size_t)nh * hd;
    s->kv_stride = (size_t)nkv * hd;
    s->qlo = qlo;
    if (!attn_mma_supports(k, s) && hd > WP_ATTN_SIMT_MAX_HD)
        return cu_fail(k, name, "head size %d is larger than the %d this backend supports", hd, WP_ATTN_SIMT_MAX_HD);
    return 0;
}

/* NULL when cuDNN may run this call; else why not (for the note, or --attention cudnn's error). */
static const char *cudnn_refusal(wp_kern *k, wp_cuda *c, const wp_attn_shape *s, bool aligned) {
#if WP_HAVE_CUDNN
    if (k->compute == WP_F32) return "fp32 compute (cuDNN's fused attention takes fp16 or bf16)";
    /* a segment's queries see keys before them: cuDNN's bottom-right causal ragged sequences
     * could take them, but that is not wired up (nor checked on a GPU) */
    if (s->sq != s->skv)
        return s->qlo ? "a Seq1F1B segment after the first under document masks (queries are the last part of a "
                        "longer sequence)"
                      : "queries are the last part of a longer sequence (decoding with a cache)";
    if (s->hd % 8 != 0 || s->hd > 256) return "a head size that is not a multiple of 8 up to 256";
    if (!aligned) return "buffers not 16-byte aligned";
    return cudnn_handle(c) ? NULL : c->cudnn_why;
#else
    (void)k, (void)c, (void)s, (void)aligned;
    return "this build has no cuDNN attention (configure with -Dcudnn=enabled)";
#endif
}

/* Our kernels for the call: say which, and why not cuDNN (once per context and reason). */
static bool use_mma(wp_kern *k, wp_cuda *c, const wp_attn_shape *s, bool aligned, const char *no_cudnn) {
    bool mma = attn_mma_supports(k, s) && aligned;
    const char *ours = mma ? "weipipe's tensor-core (WMMA) attention kernels"
                           : "weipipe's SIMT attention kernels (CUDA cores; 10-50x slower than tensor cores)";
    const char *simt_why = "";
    if (!mma && k->compute == WP_F32) simt_why = ": fp32 compute";
    else if (!mma && !aligned) simt_why = ": buffers not 16-byte aligned";
    else if (!mma) simt_why = ": a head size without a tensor-core kernel";
    if (c->attention == WP_ATTN_NATIVE)
        kern_note(k, "attention: %s (--attention native)%s", ours, simt_why);
    else
        kern_note(k, "attention: %s%s, not cuDNN's: %s", ours, simt_why, no_cudnn);
    return mma;
}

/* 1 when cuDNN ran the call; 0 when ours should (no_cudnn says why); -1 on an error (recorded). */
template <typename F>
static int try_cudnn(wp_kern *k, wp_cuda *c, const wp_attn_shape *s, bool aligned, const char *name,
                     const char **no_cudnn, const char *why, F call) {
    *no_cudnn = "--attention native";
    if (c->attention == WP_ATTN_NATIVE) return 0;
    *no_cudnn = cudnn_refusal(k, c, s, aligned);
    if (!*no_cudnn) {
        int rc = call();
        if (rc == 0) {
#if WP_HAVE_CUDNN
            const char *det = c->nondeterministic ? "non-deterministic backward: --deterministic false" : "deterministic backward";
            if (s->qlo)
                kern_note(k, "attention: cuDNN %s fused flash attention over ragged documents (--doc-mask; %s)",
                        cudnn_attn_version(), det);
            else
                kern_note(k, "attention: cuDNN %s fused flash attention (%s)", cudnn_attn_version(), det);
            size_t ws = cudnn_attn_workspace(c->cudnn);
            kern_mem_add(k, (int64_t)ws - (int64_t)c->cudnn_workspace);
            if (ws != c->cudnn_workspace) kern_replay_stale(k); /* recorded graphs point at the old workspace */
            c->cudnn_workspace = ws;
#endif
            return 1;
        }
        if (rc < 0) return cu_fail(k, name, "%s", why);
        *no_cudnn = why; /* no plan for this shape */
    }
    if (c->attention == WP_ATTN_CUDNN) return cu_fail(k, name, "--attention cudnn: %s", *no_cudnn);
    return 0;
}

extern "C" {

void cu_attention_fwd(wp_kern *k, void *o, float *lse, const void *q, const void *kv_k, const void *kv_v, int b, int sq,
                      int skv, int nh, int nkv, int hd, const int32_t *qlo) {
    wp_attn_shape s;
    wp_cuda *c = cu_ctx(k);
    if (!c || make_shape(k, "attention_fwd", &s, b, sq, skv, nh, nkv, hd, qlo) || b == 0 || sq == 0) return;
    bool aligned = ((uintptr_t)o | (uintptr_t)q | (uintptr_t)kv_k | (uintptr_t)kv_v) % 16 == 0;
    const char *no_cudnn;
    char why[512] = "";
    int rc = try_cudnn(k, c, &s, aligned, "attention_fwd", &no_cudnn, why, [&]() {
#if WP_HAVE_CUDNN
        if (!qlo) return cudnn_attn_fwd(c->cudnn, k->compute, o, lse, q, kv_k, kv_v, NULL, b, sq, nh, nkv, hd, why,
                                        sizeof why);
        /* documents: cuDNN's stats come token-major, ours are [b, nh, s] */
        float *tok = (float *)cu_scratch(k, WP_SCRATCH_OP, (size_t)b * sq * nh * sizeof(float));
        if (!tok) return -1;
        int r = cudnn_attn_fwd(c->cudnn, k->compute, o, tok, q, kv_k, kv_v, qlo, b, sq, nh, nkv, hd, why, sizeof why);
        if (r == 0 && lse_layout(k, c, lse, tok, b, nh, sq, false)) return -1;
        return r;
#else
        return 1;
#endif
    });
    if (rc) return;
    if (use_mma(k, c, &s, aligned, no_cudnn))
        attn_mma_fwd(k, &s, o, lse, q, kv_k, kv_v);
    else
        attn_simt_fwd(k, &s, o, lse, q, kv_k, kv_v);
}

void cu_attention_bwd(wp_kern *k, void *dq, void *dk, void *dv, const void *dout, const void *q, const void *kv_k,
                      const void *kv_v, const void *o, const float *lse, int b, int sq, int skv, int nh, int nkv,
                      int hd, const int32_t *qlo) {
    wp_attn_shape s;
    wp_cuda *c = cu_ctx(k);
    if (!c || make_shape(k, "attention_bwd", &s, b, sq, skv, nh, nkv, hd, qlo)) return;
    size_t kv_bytes = (size_t)b * skv * s.kv_stride * wp_dtype_size(k->compute);
    if (b == 0) return;
    if (sq == 0) { /* no query sees any key: the key and value gradients are zero */
        cu_zero(k, dk, kv_bytes);
        cu_zero(k, dv, kv_bytes);
        return;
    }
    bool aligned = ((uintptr_t)dq | (uintptr_t)dk | (uintptr_t)dv | (uintptr_t)dout | (uintptr_t)q | (uintptr_t)kv_k |
                    (uintptr_t)kv_v | (uintptr_t)o) % 16 == 0;
    const char *no_cudnn;
    char why[512] = "";
    int rc = try_cudnn(k, c, &s, aligned, "attention_bwd", &no_cudnn, why, [&]() {
#if WP_HAVE_CUDNN
        if (!qlo) return cudnn_attn_bwd(c->cudnn, k->compute, !c->nondeterministic, dq, dk, dv, dout, q, kv_k, kv_v, o, lse, NULL, b, sq, nh,
                                        nkv, hd, why, sizeof why);
        float *tok = (float *)cu_scratch(k, WP_SCRATCH_OP, (size_t)b * sq * nh * sizeof(float));
        if (!tok || lse_layout(k, c, tok, lse, b, nh, sq, true)) return -1;
        return cudnn_attn_bwd(c->cudnn, k->compute, !c->nondeterministic, dq, dk, dv, dout, q, kv_k, kv_v, o, tok, qlo, b, sq, nh, nkv, hd,
                              why, sizeof why);
#else
        return 1;
#endif
    });
    if (rc) return;
    bool native_aligned = ((uintptr_t)dout | (uintptr_t)q | (uintptr_t)kv_k | (uintptr_t)kv_v) % 16 == 0;
    size_t rows = (size_t)b * sq * nh;
    float *delta = (float *)cu_scratch(k, WP_SCRATCH_OP, rows * sizeof(float));
    if (!delta) return;
    unsigned blocks = (unsigned)((rows * 32 + 255) / 256);
    WP_WITH_DTYPE(k->compute, E,
        attn_delta_kernel<E><<<blocks, 256, 0, c->stream>>>(delta, (const E *)dout, (const E *)o, s));
    if (CU_LAUNCH_CHECK(k, "attn_delta_kernel")) return;
    if (use_mma(k, c, &s, native_aligned, no_cudnn))
        attn_mma_bwd(k, &s, dq, dk, dv, dout, q, kv_k, kv_v, lse, delta);
    else
        attn_simt_bwd(k, &s, dq, dk, dv, dout, q, kv_k, kv_v, lse, delta);
}

void cu_attention_docs(wp_kern *k, const int32_t *qlo, const int32_t *host_lo, int b, int s) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
#if WP_HAVE_CUDNN
    /* only where cuDNN may run: our kernels read qlo per query */
    if (c->attention == WP_ATTN_NATIVE || k->compute == WP_F32 || !cudnn_handle(c)) return;
    char why[512] = "";
    if (cudnn_attn_docs(c->cudnn, qlo, host_lo, b, s, why, sizeof why)) cu_fail(k, "attention_docs", "%s", why);
#else
    (void)qlo, (void)host_lo, (void)b, (void)s;
#endif
}

} /* extern "C" */
