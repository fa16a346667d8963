/* The peak a rank's MFU is measured against (--peak-tflops, else found here): on CUDA the
 * device's datasheet figure by name, on the CPU a GEMM rate measured on the rank's own backend.
 * Private to src/runtime. */
#ifndef WP_RUNTIME_PEAK_H
#define WP_RUNTIME_PEAK_H

#include "kernels.h"

/* Dense (no sparsity) TFLOPS of a known GPU at the compute type: the tensor cores' fp16/bf16
 * rate, or plain fp32 for WP_F32; 0 when the name is not in the table. */
double peak_tflops_of_gpu(const char *name, wp_dtype compute);

/* TFLOPS for MFU on k: given (> 0) wins; else the table on CUDA, else the best of a few
 * 384 x 384 x 384 products on k (the CPU's BLAS at the rank's threads). *source names where
 * it came from ("--peak-tflops", "datasheet: NVIDIA H100 80GB HBM3", "measured GEMM"). 0 when
 * nothing is known (an unlisted GPU: MFU is then null until --peak-tflops is given). */
double peak_tflops(wp_kern *k, double given, const char **source);

#endif
