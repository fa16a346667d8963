/* CUDA backend: sum of squares in fp64 (the global gradient norm). Per-block fp64 partials,
 * then one block sums them in a fixed order, so the result repeats bit for bit. inf and NaN
 * need no special case: they survive fp64 sums (inf + finite = inf, NaN + anything = NaN). */
#include "dtype.cuh"

#define WP_SUMSQ_THREADS 256
#define WP_SUMSQ_MAX_BLOCKS 1024

__device__ __forceinline__ double warp_sum_f64(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* blockDim.x == WP_SUMSQ_THREADS */
__device__ double block_sum_f64(double v) {
    __shared__ double warp_sums[WP_SUMSQ_THREADS / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum_f64(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = lane < WP_SUMSQ_THREADS / 32 ? warp_sums[lane] : 0.0;
    return warp_sum_f64(v);
}

template <typename T>
__global__ void sumsq_partial_kernel(double *partials, const T *x, size_t n) {
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = wp_load(x[i]);
        acc += v * v;
    }
    acc = block_sum_f64(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sumsq_final_kernel(double *result, const double *partials, int count) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
    acc = block_sum_f64(acc);
    if (threadIdx.x == 0) *result = acc;
}

extern "C" double cu_sumsq(wp_kern *k, const void *x, wp_dtype t, size_t n) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n == 0) return 0.0;
    /* The block count depends on n alone, so the summation order does too. */
    size_t want = (n + 4 * WP_SUMSQ_THREADS - 1) / (4 * WP_SUMSQ_THREADS);
    int blocks = (int)(want < WP_SUMSQ_MAX_BLOCKS ? want : WP_SUMSQ_MAX_BLOCKS);
    double *partials = (double *)cu_scratch(k, WP_SCRATCH_OP, (blocks + 1) * sizeof(double));
    if (!partials) return 0.0;
    double *result = partials + blocks;
    WP_WITH_DTYPE(t, T, sumsq_partial_kernel<T><<<blocks, WP_SUMSQ_THREADS, 0, c->stream>>>(partials, (const T *)x, n));
    if (CU_LAUNCH_CHECK(k, "sumsq_partial_kernel")) return 0.0;
    sumsq_final_kernel<<<1, WP_SUMSQ_THREADS, 0, c->stream>>>(result, partials, blocks);
    if (CU_LAUNCH_CHECK(k, "sumsq_final_kernel")) return 0.0;
    if (CU_CHECK(k, cudaMemcpyAsync(c->host_result, result, sizeof(double), cudaMemcpyDeviceToHost, c->stream)) ||
        CU_CHECK(k, cudaStreamSynchronize(c->stream)))
        return 0.0;
    return *c->host_result;
}
