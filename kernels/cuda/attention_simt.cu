/* CUDA backend: causal attention on CUDA cores (fp32 arithmetic, any compute dtype, head
 * size up to WP_ATTN_SIMT_MAX_HD). The fallback behind attention.cu for fp32 compute and for
 * head sizes the tensor-core kernels do not cover.
 *
 * A block is 8 warps; a warp owns one row (a query, or in the dK/dV pass a key) and walks the
 * other side in tiles of 32 rows staged in shared memory as fp32, one tile row per lane.
 * Lane l keeps output elements d = l, l + 32, ... in registers. Tile rows are padded to
 * hd + 1 floats so that the 32 lanes reading "their" row hit 32 different banks. */
#include "attention.cuh"

#define SIMT_WARPS 8
#define SIMT_TILE 32
#define SIMT_PER_LANE (WP_ATTN_SIMT_MAX_HD / 32)

/* tile[r, :] = rows[row0 + r] as fp32 (zero past nrows), for SIMT_TILE rows, whole block */
template <typename T>
__device__ void load_tile(float *tile, int ld, const T *rows, size_t stride, int row0, int nrows, int hd) {
    for (int idx = threadIdx.x; idx < SIMT_TILE * hd; idx += blockDim.x) {
        int r = idx / hd, d = idx % hd;
        tile[r * ld + d] = row0 + r < nrows ? wp_load(rows[(size_t)(row0 + r) * stride + d]) : 0.0f;
    }
}

/* one row (this warp's) as fp32 into dst[0..hd) */
template <typename T>
__device__ void load_row(float *dst, const T *row, int hd) {
    for (int d = threadIdx.x & 31; d < hd; d += 32) dst[d] = wp_load(row[d]);
}

__device__ __forceinline__ float dot(const float *a, const float *b, int hd) {
    float acc = 0.0f;
    for (int d = 0; d < hd; d++) acc += a[d] * b[d];
    return acc;
}

/* grid (ceil(sq / 8), nh, b); warp w owns query i = blockIdx.x * 8 + w */
template <typename T>
__global__ void __launch_bounds__(SIMT_WARPS * 32)
    simt_fwd_kernel(T *o, float *lse, const T *q, const T *kk, const T *v, wp_attn_shape s) {
    extern __shared__ float smem[];
    const int ld = s.hd + 1, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float *ks = smem, *vs = ks + SIMT_TILE * ld, *qs = vs + SIMT_TILE * ld + w * s.hd;
    const int head = blockIdx.y, bi = blockIdx.z, kvh = head / (s.nh / s.nkv);
    const int i0 = blockIdx.x * SIMT_WARPS, i = i0 + w;
    const bool valid = i < s.sq;
    const int pos = attn_query_pos(s, i);
    const int last = min(i0 + SIMT_WARPS, s.sq) - 1, kv_end = attn_query_pos(s, last) + 1;
    const T *kbase = kk + (size_t)bi * s.skv * s.kv_stride + (size_t)kvh * s.hd;
    const T *vbase = v + (size_t)bi * s.skv * s.kv_stride + (size_t)kvh * s.hd;
    const size_t qrow = ((size_t)bi * s.sq + i) * s.q_stride + (size_t)head * s.hd;
    if (valid) load_row(qs, q + qrow, s.hd);
    float m = -INFINITY, l = 0.0f, acc[SIMT_PER_LANE];
#pragma unroll
    for (int t = 0; t < SIMT_PER_LANE; t++) acc[t] = 0.0f;
    const int lo = attn_query_lo(s, bi, i), kv_begin = attn_query_lo(s, bi, i0) / SIMT_TILE * SIMT_TILE;
    for (int j0 = kv_begin; j0 < kv_end; j0 += SIMT_TILE) {
        __syncthreads(); /* previous tile fully used */
        load_tile(ks, ld, kbase, s.kv_stride, j0, s.skv, s.hd);
        load_tile(vs, ld, vbase, s.kv_stride, j0, s.skv, s.hd);
        __syncthreads();
        if (!valid) continue;
        const int j = j0 + lane;
        const bool seen = j < s.skv && j <= pos && j >= lo;
        float sc = seen ? dot(qs, ks + lane * ld, s.hd) * s.scale : -INFINITY;
        /* causally key 0 is in the first tile and every query sees it; with document masks a
         * query may see nothing before its document's tile */
        float m_new = fmaxf(m, wp_warp_max(sc));
        float alpha = attn_rescale(m, m_new);
        float p = seen ? expf(sc - m_new) : 0.0f;
        l = l * alpha + wp_warp_sum(p);
        m = m_new;
#pragma unroll
        for (int t = 0; t < SIMT_PER_LANE; t++) acc[t] *= alpha;
        for (int jj = 0; jj < SIMT_TILE; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
            for (int t = 0; t < SIMT_PER_LANE; t++) {
                int d = lane + 32 * t;
                if (d < s.hd) acc[t] += pj * vs[jj * ld + d];
            }
        }
    }
    if (!valid) return;
#pragma unroll
    for (int t = 0; t < SIMT_PER_LANE; t++) {
        int d = lane + 32 * t;
        if (d < s.hd) o[qrow + d] = wp_store<T>(acc[t] / l);
    }
    if (lane == 0) lse[((size_t)bi * s.nh + head) * s.sq + i] = m + logf(l);
}

/* grid (ceil(skv / 8), nkv, b); warp w owns key j = blockIdx.x * 8 + w of KV head blockIdx.y and
 * sums over the query heads of its group and all queries that see it, 32 queries per tile. */
template <typename T>
__global__ void __launch_bounds__(SIMT_WARPS * 32)
    simt_dkdv_kernel(T *dk, T *dv, const T *dout, const T *q, const T *kk, const T *v, const float *lse,
                     const float *delta, wp_attn_shape s) {
    extern __shared__ float smem[];
    const int ld = s.hd + 1, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float *qs = smem, *dos = qs + SIMT_TILE * ld, *ls = dos + SIMT_TILE * ld, *ds_row = ls + SIMT_TILE;
    float *krow = ds_row + SIMT_TILE + 2 * w * s.hd, *vrow = krow + s.hd;
    const int kvh = blockIdx.y, bi = blockIdx.z, group = s.nh / s.nkv;
    const int j0 = blockIdx.x * SIMT_WARPS, j = j0 + w;
    const bool valid = j < s.skv;
    const size_t kvrow = ((size_t)bi * s.skv + j) * s.kv_stride + (size_t)kvh * s.hd;
    if (valid) {
        load_row(krow, kk + kvrow, s.hd);
        load_row(vrow, v + kvrow, s.hd);
    }
    float dk_acc[SIMT_PER_LANE], dv_acc[SIMT_PER_LANE];
#pragma unroll
    for (int t = 0; t < SIMT_PER_LANE; t++) dk_acc[t] = dv_acc[t] = 0.0f;
    /* the first query that sees key j0 */
    const int i_first = max(0, j0 - (s.skv - s.sq));
    for (int g = 0; g < group; g++) {
        const int head = kvh * group + g;
        const T *qbase = q + (size_t)bi * s.sq * s.q_stride + (size_t)head * s.hd;
        const T *dobase = dout + (size_t)bi * s.sq * s.q_stride + (size_t)head * s.hd;
        const float *lse_h = lse + ((size_t)bi * s.nh + head) * s.sq, *delta_h = delta + ((size_t)bi * s.nh + head) * s.sq;
        for (int i0 = i_first; i0 < s.sq; i0 += SIMT_TILE) {
            /* document masks: this and every later query tile start past the block's keys */
            if (attn_query_lo(s, bi, i0) > j0 + SIMT_WARPS - 1) break;
            __syncthreads();
            load_tile(qs, ld, qbase, s.q_stride, i0, s.sq, s.hd);
            load_tile(dos, ld, dobase, s.q_stride, i0, s.sq, s.hd);
            if (threadIdx.x < SIMT_TILE) {
                int i = i0 + threadIdx.x;
                ls[threadIdx.x] = i < s.sq ? lse_h[i] : 0.0f;
                ds_row[threadIdx.x] = i < s.sq ? delta_h[i] : 0.0f;
            }
            __syncthreads();
            if (!valid) continue;
            const int i = i0 + lane;
            const bool seen = i < s.sq && j <= attn_query_pos(s, i) && j >= attn_query_lo(s, bi, i);
            float p = seen ? expf(dot(qs + lane * ld, krow, s.hd) * s.scale - ls[lane]) : 0.0f;
            float dp = seen ? dot(dos + lane * ld, vrow, s.hd) : 0.0f;
            float ds = p * (dp - ds_row[lane]);
            for (int ii = 0; ii < SIMT_TILE; ii++) {
                float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
                for (int t = 0; t < SIMT_PER_LANE; t++) {
                    int d = lane + 32 * t;
                    if (d < s.hd) {
                        dv_acc[t] += pi * dos[ii * ld + d];
                        dk_acc[t] += dsi * qs[ii * ld + d];
                    }
                }
            }
        }
    }
    if (!valid) return;
#pragma unroll
    for (int t = 0; t < SIMT_PER_LANE; t++) {
        int d = lane + 32 * t;
        if (d < s.hd) {
            dk[kvrow + d] = wp_store<T>(dk_acc[t] * s.scale);
            dv[kvrow + d] = wp_store<T>(dv_acc[t]);
        }
    }
}

/* grid (ceil(sq / 8), nh, b); warp w owns query i = blockIdx.x * 8 + w */
template <typename T>
__global__ void __launch_bounds__(SIMT_WARPS * 32)
    simt_dq_kernel(T *dq, const T *dout, const T *q, const T *kk, const T *v, const float *lse, const float *delta,
                   wp_attn_shape s) {
    extern __shared__ float smem[];
    const int ld = s.hd + 1, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float *ks = smem, *vs = ks + SIMT_TILE * ld, *qrow_s = vs + SIMT_TILE * ld + 2 * w * s.hd, *dorow = qrow_s + s.hd;
    const int head = blockIdx.y, bi = blockIdx.z, kvh = head / (s.nh / s.nkv);
    const int i0 = blockIdx.x * SIMT_WARPS, i = i0 + w;
    const bool valid = i < s.sq;
    const int pos = attn_query_pos(s, i);
    const int last = min(i0 + SIMT_WARPS, s.sq) - 1, kv_end = attn_query_pos(s, last) + 1;
    const T *kbase = kk + (size_t)bi * s.skv * s.kv_stride + (size_t)kvh * s.hd;
    const T *vbase = v + (size_t)bi * s.skv * s.kv_stride + (size_t)kvh * s.hd;
    const size_t qrow = ((size_t)bi * s.sq + i) * s.q_stride + (size_t)head * s.hd;
    float lse_i = 0.0f, delta_i = 0.0f;
    if (valid) {
        load_row(qrow_s, q + qrow, s.hd);
        load_row(dorow, dout + qrow, s.hd);
        lse_i = lse[((size_t)bi * s.nh + head) * s.sq + i];
        delta_i = delta[((size_t)bi * s.nh + head) * s.sq + i];
    }
    float acc[SIMT_PER_LANE];
#pragma unroll
    for (int t = 0; t < SIMT_PER_LANE; t++) acc[t] = 0.0f;
    const int lo = attn_query_lo(s, bi, i), kv_begin = attn_query_lo(s, bi, i0) / SIMT_TILE * SIMT_TILE;
    for (int j0 = kv_begin; j0 < kv_end; j0 += SIMT_TILE) {
        __syncthreads();
        load_tile(ks, ld, kbase, s.kv_stride, j0, s.skv, s.hd);
        load_tile(vs, ld, vbase, s.kv_stride, j0, s.skv, s.hd);
        __syncthreads();
        if (!valid) continue;
        const int j = j0 + lane;
        const bool seen = j < s.skv && j <= pos && j >= lo;
        float p = seen ? expf(dot(qrow_s, ks + lane * ld, s.hd) * s.scale - lse_i) : 0.0f;
        float dp = seen ? dot(dorow, vs + lane * ld, s.hd) : 0.0f;
        float ds = p * (dp - delta_i);
        for (int jj = 0; jj < SIMT_TILE; jj++) {
            float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
            for (int t = 0; t < SIMT_PER_LANE; t++) {
                int d = lane + 32 * t;
                if (d < s.hd) acc[t] += dsj * ks[jj * ld + d];
            }
        }
    }
    if (!valid) return;
#pragma unroll
    for (int t = 0; t < SIMT_PER_LANE; t++) {
        int d = lane + 32 * t;
        if (d < s.hd) dq[qrow + d] = wp_store<T>(acc[t] * s.scale);
    }
}

/* Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KB. */
static int smem_limit(wp_kern *k, const void *kernel, size_t bytes, const char *name) {
    wp_cuda *c = (wp_cuda *)k->impl;
    if (bytes > c->smem_optin)
        return cu_fail(k, name, "needs %zu bytes of shared memory, the device allows %zu", bytes, c->smem_optin);
    return CU_CHECK(k, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

int attn_simt_fwd(wp_kern *k, const wp_attn_shape *s, void *o, float *lse, const void *q, const void *kk,
                  const void *v) {
    wp_cuda *c = (wp_cuda *)k->impl;
    size_t smem = (2 * SIMT_TILE * (size_t)(s->hd + 1) + SIMT_WARPS * (size_t)s->hd) * sizeof(float);
    dim3 grid((s->sq + SIMT_WARPS - 1) / SIMT_WARPS, s->nh, s->b);
    int rc = 0;
    WP_WITH_DTYPE(k->compute, E,
        rc = smem_limit(k, (const void *)simt_fwd_kernel<E>, smem, "attention_fwd");
        if (!rc) simt_fwd_kernel<E><<<grid, SIMT_WARPS * 32, smem, c->stream>>>((E *)o, lse, (const E *)q,
                                                                               (const E *)kk, (const E *)v, *s));
    return rc ? rc : CU_LAUNCH_CHECK(k, "simt_fwd_kernel");
}

int attn_simt_bwd(wp_kern *k, const wp_attn_shape *s, void *dq, void *dk, void *dv, const void *dout, const void *q,
                  const void *kk, const void *v, const float *lse, const float *delta) {
    wp_cuda *c = (wp_cuda *)k->impl;
    size_t tiles = 2 * SIMT_TILE * (size_t)(s->hd + 1) * sizeof(float);
    size_t smem_kv = tiles + (2 * SIMT_TILE + 2 * SIMT_WARPS * (size_t)s->hd) * sizeof(float);
    size_t smem_q = tiles + 2 * SIMT_WARPS * (size_t)s->hd * sizeof(float);
    dim3 grid_kv((s->skv + SIMT_WARPS - 1) / SIMT_WARPS, s->nkv, s->b), grid_q((s->sq + SIMT_WARPS - 1) / SIMT_WARPS, s->nh, s->b);
    int rc = 0;
    WP_WITH_DTYPE(k->compute, E,
        rc = smem_limit(k, (const void *)simt_dkdv_kernel<E>, smem_kv, "attention_bwd");
        if (!rc) {
            simt_dkdv_kernel<E><<<grid_kv, SIMT_WARPS * 32, smem_kv, c->stream>>>(
                (E *)dk, (E *)dv, (const E *)dout, (const E *)q, (const E *)kk, (const E *)v, lse, delta, *s);
            rc = CU_LAUNCH_CHECK(k, "simt_dkdv_kernel");
        }
        if (!rc) rc = smem_limit(k, (const void *)simt_dq_kernel<E>, smem_q, "attention_bwd");
        if (!rc) {
            simt_dq_kernel<E><<<grid_q, SIMT_WARPS * 32, smem_q, c->stream>>>(
                (E *)dq, (const E *)dout, (const E *)q, (const E *)kk, (const E *)v, lse, delta, *s);
            rc = CU_LAUNCH_CHECK(k, "simt_dq_kernel");
        });
    return rc;
}
