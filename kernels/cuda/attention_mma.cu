/* CUDA backend: causal attention on tensor cores through WMMA (16x16x16 fp16/bf16 products,
 * fp32 accumulators). Blocks of 4 warps own a 64-row tile (queries, or keys in the dK/dV
 * pass); each warp owns 16 of its rows, so after the block-wide tile loads a warp only ever
 * touches its own rows of S, P, dS and the outputs and needs no more than __syncwarp.
 *
 * The forward keeps its O accumulator in shared memory (fp32): the online softmax rescales
 * whole rows of O, and WMMA does not say which row a fragment element belongs to. The
 * backward accumulators (dK, dV per KV tile; dQ per query tile) are never rescaled, so they
 * stay in fragments across the whole loop. Shared-memory rows are padded (hd + 8 halves,
 * 64 + 4 floats) against bank conflicts; every fragment pointer is 32-byte aligned, and every
 * leading dimension a multiple of 16 bytes, as WMMA requires. */
#include <mma.h>

#include "attention.cuh"

using namespace nvcuda;

#define MMA_TILE 64
#define MMA_WARPS 4
#define MMA_THREADS (MMA_WARPS * 32)

/* padded row lengths, in elements */
#define LD_S (MMA_TILE + 4) /* fp32 scores S, dP */
#define LD_P (MMA_TILE + 8) /* 16-bit P, dS */

__host__ __device__ constexpr size_t a128(size_t x) { return (x + 127) / 128 * 128; }
__host__ __device__ constexpr int ld_h(int hd) { return hd + 8; } /* 16-bit tiles of hd columns */
__host__ __device__ constexpr int ld_o(int hd) { return hd + 4; } /* fp32 rows of hd columns */
__host__ __device__ constexpr size_t tile_bytes(int hd) { return a128((size_t)MMA_TILE * ld_h(hd) * 2); }
__host__ __device__ constexpr size_t score_bytes() { return a128((size_t)MMA_TILE * LD_S * 4); }
__host__ __device__ constexpr size_t prob_bytes() { return a128((size_t)MMA_TILE * LD_P * 2); }
__host__ __device__ constexpr size_t out_bytes(int hd) { return a128((size_t)MMA_TILE * ld_o(hd) * 4); }
__host__ __device__ constexpr size_t rowstat_bytes() { return a128(2 * MMA_TILE * 4); }
/* forward: Q K V | S | P | O */
__host__ __device__ constexpr size_t fwd_smem(int hd) { return 3 * tile_bytes(hd) + score_bytes() + prob_bytes() + out_bytes(hd); }
/* dK/dV: Q dO K V | S^T dP^T | P^T dS^T | lse delta   (Q and dO double as the output stage) */
__host__ __device__ constexpr size_t dkdv_smem(int hd) {
    return 4 * tile_bytes(hd) + 2 * score_bytes() + 2 * prob_bytes() + rowstat_bytes();
}
/* dQ: Q dO K V | S dP | dS | lse delta   (Q and dO double as the output stage) */
__host__ __device__ constexpr size_t dq_smem(int hd) {
    return 4 * tile_bytes(hd) + 2 * score_bytes() + prob_bytes() + rowstat_bytes();
}

template <typename T> using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using frag_b_row = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T> using frag_b_col = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;

/* dst[r, :] = rows[row0 + r, :] for the tile's 64 rows (zero past nrows), 16 bytes at a time:
 * hd is a multiple of 16 and the callers checked that the base pointers are 16-byte aligned. */
template <typename T, int HD>
__device__ void load_tile(T *dst, const T *rows, size_t stride, int row0, int nrows) {
    constexpr int VEC = 8, PER_ROW = HD / VEC;
    for (int idx = threadIdx.x; idx < MMA_TILE * PER_ROW; idx += MMA_THREADS) {
        int r = idx / PER_ROW, c = (idx % PER_ROW) * VEC;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < nrows) val = *(const uint4 *)(rows + (size_t)(row0 + r) * stride + c);
        *(uint4 *)(dst + r * ld_h(HD) + c) = val;
    }
}

/* out[16, 64] (fp32, this warp's rows) = A_w[16, HD] @ B^T where B holds 64 rows of HD;
 * A comes as preloaded fragments. */
template <typename T, int HD>
__device__ void warp_scores(float *out, const frag_a<T> *a_frags, const T *b_rows) {
#pragma unroll
    for (int n = 0; n < MMA_TILE / 16; n++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            frag_b_col<T> b;
            wmma::load_matrix_sync(b, b_rows + 16 * n * ld_h(HD) + 16 * kk, ld_h(HD));
            wmma::mma_sync(acc, a_frags[kk], b, acc);
        }
        wmma::store_matrix_sync(out + 16 * n, acc, LD_S, wmma::mem_row_major);
    }
}

/* The same with A read from shared memory (a_rows: the warp's 16 rows of a 16-bit tile), for
 * the dK/dV pass, whose accumulators leave no registers for preloaded fragments. */
template <typename T, int HD>
__device__ void warp_scores_smem(float *out, const T *a_rows, const T *b_rows) {
#pragma unroll
    for (int n = 0; n < MMA_TILE / 16; n++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            frag_a<T> a;
            frag_b_col<T> b;
            wmma::load_matrix_sync(a, a_rows + 16 * kk, ld_h(HD));
            wmma::load_matrix_sync(b, b_rows + 16 * n * ld_h(HD) + 16 * kk, ld_h(HD));
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(out + 16 * n, acc, LD_S, wmma::mem_row_major);
    }
}

template <typename T, int HD>
__device__ void load_row_frags(frag_a<T> *frags, const T *rows16) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) wmma::load_matrix_sync(frags[kk], rows16 + 16 * kk, ld_h(HD));
}

/* acc[n] += A_w[16, 64] (16-bit, ld LD_P) @ B[64, HD] (16-bit tile, row-major). The k loop
 * stays rolled: each A fragment then serves all HD / 16 products while it is live, and the
 * accumulators keep the registers. */
template <typename T, int HD>
__device__ void warp_accumulate(frag_acc *acc, const T *a_rows, const T *b_tile) {
#pragma unroll 1
    for (int kk = 0; kk < MMA_TILE / 16; kk++) {
        frag_a<T> a;
        wmma::load_matrix_sync(a, a_rows + 16 * kk, LD_P);
#pragma unroll
        for (int n = 0; n < HD / 16; n++) {
            frag_b_row<T> b;
            wmma::load_matrix_sync(b, b_tile + 16 * kk * ld_h(HD) + 16 * n, ld_h(HD));
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
}

/* Writes this warp's 16 rows of fragments acc (times mult) to rows[row0 + r] (r < nrows - row0),
 * through the warp's rows of the fp32 stage. */
template <typename T, int HD>
__device__ void warp_store_rows(T *rows, size_t stride, int row0, int nrows, const frag_acc *acc, float mult,
                                float *stage) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *mine = stage + 16 * w * ld_o(HD);
#pragma unroll
    for (int n = 0; n < HD / 16; n++) wmma::store_matrix_sync(mine + 16 * n, acc[n], ld_o(HD), wmma::mem_row_major);
    __syncwarp();
    for (int rr = 0; rr < 16; rr++) {
        int r = row0 + 16 * w + rr;
        if (r >= nrows) break;
        for (int d = lane; d < HD; d += 32) rows[(size_t)r * stride + d] = wp_store<T>(mine[rr * ld_o(HD) + d] * mult);
    }
    __syncwarp();
}

/* grid (ceil(sq / 64), nh, b); the block for the last query tile (most keys) starts first */
template <typename T, int HD>
__global__ void __launch_bounds__(MMA_THREADS)
    mma_fwd_kernel(T *o, float *lse, const T *q, const T *kk, const T *v, wp_attn_shape s) {
    extern __shared__ __align__(128) unsigned char smem[];
    T *qs = (T *)smem, *ks = (T *)(smem + tile_bytes(HD)), *vs = (T *)(smem + 2 * tile_bytes(HD));
    float *ss = (float *)(smem + 3 * tile_bytes(HD));
    T *ps = (T *)(smem + 3 * tile_bytes(HD) + score_bytes());
    float *os = (float *)(smem + 3 * tile_bytes(HD) + score_bytes() + prob_bytes());
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_TILE, head = blockIdx.y, bi = blockIdx.z;
    const int kvh = head / (s.nh / s.nkv);
    const T *qbase = q + (size_t)bi * s.sq * s.q_stride + (size_t)head * HD;
    const T *kbase = kk + (size_t)bi * s.skv * s.kv_stride + (size_t)kvh * HD;
    const T *vbase = v + (size_t)bi * s.skv * s.kv_stride + (size_t)kvh * HD;

    load_tile<T, HD>(qs, qbase, s.q_stride, q0, s.sq);
    for (int idx = threadIdx.x; idx < MMA_TILE * ld_o(HD); idx += MMA_THREADS) os[idx] = 0.0f;
    __syncthreads();
    frag_a<T> qf[HD / 16];
    load_row_frags<T, HD>(qf, qs + 16 * w * ld_h(HD));
    float m_row[16], l_row[16];
#pragma unroll
    for (int rr = 0; rr < 16; rr++) {
        m_row[rr] = -INFINITY;
        l_row[rr] = 0.0f;
    }
    const int kv_end = attn_query_pos(s, min(q0 + MMA_TILE, s.sq) - 1) + 1;
    /* document masks: key tiles before the tile's first document hold nothing it sees */
    for (int kv0 = attn_query_lo(s, bi, q0) / MMA_TILE * MMA_TILE; kv0 < kv_end; kv0 += MMA_TILE) {
        __syncthreads(); /* every warp is done with the previous K, V */
        load_tile<T, HD>(ks, kbase, s.kv_stride, kv0, s.skv);
        load_tile<T, HD>(vs, vbase, s.kv_stride, kv0, s.skv);
        __syncthreads();
        warp_scores<T, HD>(ss + 16 * w * LD_S, qf, ks);
        __syncwarp();
        /* online softmax over this tile, row by row; causally every query sees key 0 in the first
         * tile, with document masks a row may see nothing yet (attn_rescale) */
#pragma unroll
        for (int rr = 0; rr < 16; rr++) {
            const int r = 16 * w + rr, pos = attn_query_pos(s, q0 + r), lo = attn_query_lo(s, bi, q0 + r);
            const int j0 = kv0 + lane, j1 = j0 + 32;
            const bool see0 = j0 < s.skv && j0 <= pos && j0 >= lo, see1 = j1 < s.skv && j1 <= pos && j1 >= lo;
            float s0 = see0 ? ss[r * LD_S + lane] * s.scale : -INFINITY;
            float s1 = see1 ? ss[r * LD_S + lane + 32] * s.scale : -INFINITY;
            float m_new = fmaxf(m_row[rr], wp_warp_max(fmaxf(s0, s1)));
            float alpha = attn_rescale(m_row[rr], m_new);
            float p0 = see0 ? expf(s0 - m_new) : 0.0f, p1 = see1 ? expf(s1 - m_new) : 0.0f;
            ps[r * LD_P + lane] = wp_store<T>(p0);
            ps[r * LD_P + lane + 32] = wp_store<T>(p1);
            l_row[rr] = l_row[rr] * alpha + wp_warp_sum(p0 + p1);
            m_row[rr] = m_new;
            for (int d = lane; d < HD; d += 32) os[r * ld_o(HD) + d] *= alpha;
        }
        __syncwarp();
        /* O_w += P_w V */
#pragma unroll
        for (int n = 0; n < HD / 16; n++) {
            frag_acc acc;
            float *orow = os + 16 * w * ld_o(HD) + 16 * n;
            wmma::load_matrix_sync(acc, orow, ld_o(HD), wmma::mem_row_major);
#pragma unroll
            for (int kk2 = 0; kk2 < MMA_TILE / 16; kk2++) {
                frag_a<T> a;
                frag_b_row<T> b;
                wmma::load_matrix_sync(a, ps + 16 * w * LD_P + 16 * kk2, LD_P);
                wmma::load_matrix_sync(b, vs + 16 * kk2 * ld_h(HD) + 16 * n, ld_h(HD));
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(orow, acc, ld_o(HD), wmma::mem_row_major);
        }
        __syncwarp();
    }
#pragma unroll
    for (int rr = 0; rr < 16; rr++) {
        const int r = 16 * w + rr, i = q0 + r;
        if (i >= s.sq) break;
        const float inv = 1.0f / l_row[rr];
        T *orow = o + ((size_t)bi * s.sq + i) * s.q_stride + (size_t)head * HD;
        for (int d = lane; d < HD; d += 32) orow[d] = wp_store<T>(os[r * ld_o(HD) + d] * inv);
        if (lane == 0) lse[((size_t)bi * s.nh + head) * s.sq + i] = m_row[rr] + logf(l_row[rr]);
    }
}

/* grid (ceil(skv / 64), nkv, b): one KV tile, summed over the group's query heads and every
 * query tile that sees it, in a fixed order. */
template <typename T, int HD>
__global__ void __launch_bounds__(MMA_THREADS)
    mma_dkdv_kernel(T *dk, T *dv, const T *dout, const T *q, const T *kk, const T *v, const float *lse,
                    const float *delta, wp_attn_shape s) {
    extern __shared__ __align__(128) unsigned char smem[];
    const size_t tb = tile_bytes(HD);
    T *qs = (T *)smem, *dos = (T *)(smem + tb), *ks = (T *)(smem + 2 * tb), *vs = (T *)(smem + 3 * tb);
    float *st = (float *)(smem + 4 * tb), *dpt = (float *)(smem + 4 * tb + score_bytes());
    T *pt = (T *)(smem + 4 * tb + 2 * score_bytes()), *dst = (T *)(smem + 4 * tb + 2 * score_bytes() + prob_bytes());
    float *lse_s = (float *)(smem + 4 * tb + 2 * score_bytes() + 2 * prob_bytes()), *delta_s = lse_s + MMA_TILE;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kv0 = blockIdx.x * MMA_TILE, kvh = blockIdx.y, bi = blockIdx.z, group = s.nh / s.nkv;
    const size_t kv_off = (size_t)bi * s.skv * s.kv_stride + (size_t)kvh * HD;

    load_tile<T, HD>(ks, kk + kv_off, s.kv_stride, kv0, s.skv);
    load_tile<T, HD>(vs, v + kv_off, s.kv_stride, kv0, s.skv);
    frag_acc dk_acc[HD / 16], dv_acc[HD / 16];
#pragma unroll
    for (int n = 0; n < HD / 16; n++) {
        wmma::fill_fragment(dk_acc[n], 0.0f);
        wmma::fill_fragment(dv_acc[n], 0.0f);
    }
    const int i_first = max(0, kv0 - (s.skv - s.sq)); /* the first query that sees key kv0 */
    for (int g = 0; g < group; g++) {
        const int head = kvh * group + g;
        const size_t q_off = (size_t)bi * s.sq * s.q_stride + (size_t)head * HD;
        const float *lse_h = lse + ((size_t)bi * s.nh + head) * s.sq, *delta_h = delta + ((size_t)bi * s.nh + head) * s.sq;
        for (int i0 = i_first; i0 < s.sq; i0 += MMA_TILE) {
            /* document masks: this and every later query tile start past this KV tile */
            if (attn_query_lo(s, bi, i0) > kv0 + MMA_TILE - 1) break;
            __syncthreads(); /* every warp is done with the previous Q, dO */
            load_tile<T, HD>(qs, q + q_off, s.q_stride, i0, s.sq);
            load_tile<T, HD>(dos, dout + q_off, s.q_stride, i0, s.sq);
            if (threadIdx.x < MMA_TILE) {
                int i = i0 + threadIdx.x;
                lse_s[threadIdx.x] = i < s.sq ? lse_h[i] : 0.0f;
                delta_s[threadIdx.x] = i < s.sq ? delta_h[i] : 0.0f;
            }
            __syncthreads();
            /* S^T_w = K_w Q^T and dP^T_w = V_w dO^T: [16 keys, 64 queries] */
            warp_scores_smem<T, HD>(st + 16 * w * LD_S, ks + 16 * w * ld_h(HD), qs);
            warp_scores_smem<T, HD>(dpt + 16 * w * LD_S, vs + 16 * w * ld_h(HD), dos);
            __syncwarp();
            for (int rr = 0; rr < 16; rr++) {
                const int r = 16 * w + rr, j = kv0 + r;
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int c = lane + 32 * half, i = i0 + c;
                    const bool seen = i < s.sq && j < s.skv && j <= attn_query_pos(s, i) && j >= attn_query_lo(s, bi, i);
                    float p = seen ? expf(st[r * LD_S + c] * s.scale - lse_s[c]) : 0.0f;
                    float ds = p * (dpt[r * LD_S + c] - delta_s[c]);
                    pt[r * LD_P + c] = wp_store<T>(p);
                    dst[r * LD_P + c] = wp_store<T>(ds);
                }
            }
            __syncwarp();
            warp_accumulate<T, HD>(dv_acc, pt + 16 * w * LD_P, dos); /* dV_w += P^T_w dO */
            warp_accumulate<T, HD>(dk_acc, dst + 16 * w * LD_P, qs); /* dK_w += dS^T_w Q */
        }
    }
    __syncthreads(); /* Q and dO are free: they become the output stage */
    float *stage = (float *)smem;
    warp_store_rows<T, HD>(dk + kv_off, s.kv_stride, kv0, s.skv, dk_acc, s.scale, stage);
    warp_store_rows<T, HD>(dv + kv_off, s.kv_stride, kv0, s.skv, dv_acc, 1.0f, stage);
}

/* grid (ceil(sq / 64), nh, b): one query tile, summed over the KV tiles it sees. */
template <typename T, int HD>
__global__ void __launch_bounds__(MMA_THREADS)
    mma_dq_kernel(T *dq, const T *dout, const T *q, const T *kk, const T *v, const float *lse, const float *delta,
                  wp_attn_shape s) {
    extern __shared__ __align__(128) unsigned char smem[];
    const size_t tb = tile_bytes(HD);
    T *qs = (T *)smem, *dos = (T *)(smem + tb), *ks = (T *)(smem + 2 * tb), *vs = (T *)(smem + 3 * tb);
    float *ss = (float *)(smem + 4 * tb), *dps = (float *)(smem + 4 * tb + score_bytes());
    T *dss = (T *)(smem + 4 * tb + 2 * score_bytes());
    float *lse_s = (float *)(smem + 4 * tb + 2 * score_bytes() + prob_bytes()), *delta_s = lse_s + MMA_TILE;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_TILE, head = blockIdx.y, bi = blockIdx.z;
    const int kvh = head / (s.nh / s.nkv);
    const size_t q_off = (size_t)bi * s.sq * s.q_stride + (size_t)head * HD;
    const size_t kv_off = (size_t)bi * s.skv * s.kv_stride + (size_t)kvh * HD;
    const float *lse_h = lse + ((size_t)bi * s.nh + head) * s.sq, *delta_h = delta + ((size_t)bi * s.nh + head) * s.sq;

    load_tile<T, HD>(qs, q + q_off, s.q_stride, q0, s.sq);
    load_tile<T, HD>(dos, dout + q_off, s.q_stride, q0, s.sq);
    if (threadIdx.x < MMA_TILE) {
        int i = q0 + threadIdx.x;
        lse_s[threadIdx.x] = i < s.sq ? lse_h[i] : 0.0f;
        delta_s[threadIdx.x] = i < s.sq ? delta_h[i] : 0.0f;
    }
    __syncthreads();
    frag_a<T> qf[HD / 16], dof[HD / 16];
    load_row_frags<T, HD>(qf, qs + 16 * w * ld_h(HD));
    load_row_frags<T, HD>(dof, dos + 16 * w * ld_h(HD));
    frag_acc dq_acc[HD / 16];
#pragma unroll
    for (int n = 0; n < HD / 16; n++) wmma::fill_fragment(dq_acc[n], 0.0f);
    const int kv_end = attn_query_pos(s, min(q0 + MMA_TILE, s.sq) - 1) + 1;
    for (int kv0 = attn_query_lo(s, bi, q0) / MMA_TILE * MMA_TILE; kv0 < kv_end; kv0 += MMA_TILE) {
        __syncthreads(); /* every warp is done with the previous K, V */
        load_tile<T, HD>(ks, kk + kv_off, s.kv_stride, kv0, s.skv);
        load_tile<T, HD>(vs, v + kv_off, s.kv_stride, kv0, s.skv);
        __syncthreads();
        warp_scores<T, HD>(ss + 16 * w * LD_S, qf, ks);   /* S_w = Q_w K^T */
        warp_scores<T, HD>(dps + 16 * w * LD_S, dof, vs); /* dP_w = dO_w V^T */
        __syncwarp();
        for (int rr = 0; rr < 16; rr++) {
            const int r = 16 * w + rr, i = q0 + r, pos = attn_query_pos(s, i), lo = attn_query_lo(s, bi, i);
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int c = lane + 32 * half, j = kv0 + c;
                const bool seen = i < s.sq && j < s.skv && j <= pos && j >= lo;
                float p = seen ? expf(ss[r * LD_S + c] * s.scale - lse_s[r]) : 0.0f;
                dss[r * LD_P + c] = wp_store<T>(p * (dps[r * LD_S + c] - delta_s[r]));
            }
        }
        __syncwarp();
        warp_accumulate<T, HD>(dq_acc, dss + 16 * w * LD_P, ks); /* dQ_w += dS_w K */
    }
    __syncthreads(); /* Q and dO are free: they become the output stage */
    warp_store_rows<T, HD>(dq + q_off, s.q_stride, q0, s.sq, dq_acc, s.scale, (float *)smem);
}

static bool head_size_built(int hd) { return hd == 16 || hd == 32 || hd == 64 || hd == 96 || hd == 128; }

bool attn_mma_supports(wp_kern *k, const wp_attn_shape *s) {
    const wp_cuda *c = (const wp_cuda *)k->impl;
    if (k->compute == WP_F32 || !head_size_built(s->hd)) return false;
    size_t need = fwd_smem(s->hd);
    if (dkdv_smem(s->hd) > need) need = dkdv_smem(s->hd);
    if (dq_smem(s->hd) > need) need = dq_smem(s->hd);
    return need <= c->smem_optin;
}

static int set_smem(wp_kern *k, const void *kernel, size_t bytes) {
    return CU_CHECK(k, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <typename T, int HD>
static int fwd_launch(wp_kern *k, const wp_attn_shape *s, void *o, float *lse, const void *q, const void *kk,
                      const void *v) {
    wp_cuda *c = (wp_cuda *)k->impl;
    dim3 grid((s->sq + MMA_TILE - 1) / MMA_TILE, s->nh, s->b);
    if (set_smem(k, (const void *)mma_fwd_kernel<T, HD>, fwd_smem(HD))) return -1;
    mma_fwd_kernel<T, HD><<<grid, MMA_THREADS, fwd_smem(HD), c->stream>>>((T *)o, lse, (const T *)q, (const T *)kk,
                                                                          (const T *)v, *s);
    return CU_LAUNCH_CHECK(k, "mma_fwd_kernel");
}

template <typename T, int HD>
static int bwd_launch(wp_kern *k, const wp_attn_shape *s, void *dq, void *dk, void *dv, const void *dout,
                      const void *q, const void *kk, const void *v, const float *lse, const float *delta) {
    wp_cuda *c = (wp_cuda *)k->impl;
    dim3 grid_kv((s->skv + MMA_TILE - 1) / MMA_TILE, s->nkv, s->b), grid_q((s->sq + MMA_TILE - 1) / MMA_TILE, s->nh, s->b);
    if (set_smem(k, (const void *)mma_dkdv_kernel<T, HD>, dkdv_smem(HD))) return -1;
    mma_dkdv_kernel<T, HD><<<grid_kv, MMA_THREADS, dkdv_smem(HD), c->stream>>>(
        (T *)dk, (T *)dv, (const T *)dout, (const T *)q, (const T *)kk, (const T *)v, lse, delta, *s);
    if (CU_LAUNCH_CHECK(k, "mma_dkdv_kernel")) return -1;
    if (set_smem(k, (const void *)mma_dq_kernel<T, HD>, dq_smem(HD))) return -1;
    mma_dq_kernel<T, HD><<<grid_q, MMA_THREADS, dq_smem(HD), c->stream>>>(
        (T *)dq, (const T *)dout, (const T *)q, (const T *)kk, (const T *)v, lse, delta, *s);
    return CU_LAUNCH_CHECK(k, "mma_dq_kernel");
}

/* Instantiates CALL<T, HD>(...) for the compute dtype and the head size. */
#define MMA_DISPATCH(k, hd, CALL, ...)                                                    \
    do {                                                                                  \
        if ((k)->compute == WP_F16) {                                                     \
            switch (hd) {                                                                 \
            case 16: return CALL<wp_f16_t, 16>(__VA_ARGS__);                              \
            case 32: return CALL<wp_f16_t, 32>(__VA_ARGS__);                              \
            case 64: return CALL<wp_f16_t, 64>(__VA_ARGS__);                              \
            case 96: return CALL<wp_f16_t, 96>(__VA_ARGS__);                              \
            case 128: return CALL<wp_f16_t, 128>(__VA_ARGS__);                            \
            }                                                                             \
        } else {                                                                          \
            switch (hd) {                                                                 \
            case 16: return CALL<wp_bf16_t, 16>(__VA_ARGS__);                             \
            case 32: return CALL<wp_bf16_t, 32>(__VA_ARGS__);                             \
            case 64: return CALL<wp_bf16_t, 64>(__VA_ARGS__);                             \
            case 96: return CALL<wp_bf16_t, 96>(__VA_ARGS__);                             \
            case 128: return CALL<wp_bf16_t, 128>(__VA_ARGS__);                           \
            }                                                                             \
        }                                                                                 \
        return cu_fail(k, "attention", "no tensor-core kernel for head size %d", hd);     \
    } while (0)

int attn_mma_fwd(wp_kern *k, const wp_attn_shape *s, void *o, float *lse, const void *q, const void *kk,
                 const void *v) {
    MMA_DISPATCH(k, s->hd, fwd_launch, k, s, o, lse, q, kk, v);
}

int attn_mma_bwd(wp_kern *k, const wp_attn_shape *s, void *dq, void *dk, void *dv, const void *dout, const void *q,
                 const void *kk, const void *v, const float *lse, const float *delta) {
    MMA_DISPATCH(k, s->hd, bwd_launch, k, s, dq, dk, dv, dout, q, kk, v, lse, delta);
}
