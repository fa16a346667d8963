/* Device-side view of wp_dtype: loads to fp32, stores rounded to nearest even, and a switch
 * that instantiates a template body for each storage type. */
#ifndef WP_CUDA_DTYPE_CUH
#define WP_CUDA_DTYPE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "cuda_impl.h"

typedef __half wp_f16_t;
typedef __nv_bfloat16 wp_bf16_t;

__device__ __forceinline__ float wp_load(float x) { return x; }
__device__ __forceinline__ float wp_load(wp_f16_t x) { return __half2float(x); }
__device__ __forceinline__ float wp_load(wp_bf16_t x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T wp_store(float x);
template <> __device__ __forceinline__ float wp_store<float>(float x) { return x; }
template <> __device__ __forceinline__ wp_f16_t wp_store<wp_f16_t>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ wp_bf16_t wp_store<wp_bf16_t>(float x) { return __float2bfloat16_rn(x); }

/* Runs the statements with T bound to the storage type of dtype d. */
#define WP_WITH_DTYPE(d, T, ...)                  \
    switch (d) {                                  \
    case WP_F16: {                                \
        typedef wp_f16_t T;                       \
        __VA_ARGS__;                              \
        break;                                    \
    }                                             \
    case WP_BF16: {                               \
        typedef wp_bf16_t T;                      \
        __VA_ARGS__;                              \
        break;                                    \
    }                                             \
    default: {                                    \
        typedef float T;                          \
        __VA_ARGS__;                              \
        break;                                    \
    }                                             \
    }

/* Sum over a warp; every lane gets the same result. */
__device__ __forceinline__ float wp_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float wp_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024) in a fixed order;
 * every thread gets the result. shared must hold 32 floats. */
__device__ __forceinline__ float wp_block_sum(float v, float *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = wp_warp_sum(v);
    __syncthreads(); /* shared may still be read by a previous call */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : 0.0f;
    return wp_warp_sum(v);
}

__device__ __forceinline__ float wp_block_max(float v, float *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = wp_warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : -INFINITY;
    return wp_warp_max(v);
}

#endif
