/* MFU's peak (peak.h). */
#include "peak.h"

#include <string.h>

#include "clock.h"

/* Dense TFLOPS from NVIDIA's datasheets (the sparse figures halved), matched by a piece of the
 * name CUDA reports, the most specific first ("GH200" before "H200", "H100 NVL" before "H100").
 * fp32: the non-tensor FP32 rate; 0 where the datasheet gives none we could use. */
static const struct { const char *part; double half, fp32; } gpus[] = {
    {"GH200", 989, 67},       /* GH200 datasheet: BF16 1,979 TFLOPS with sparsity */
    {"H200", 989, 67},        /* H200 SXM datasheet: BF16 1,979 with sparsity, FP32 67 */
    {"H100 NVL", 835, 60},    /* H100 NVL: BF16 1,671 with sparsity, FP32 60 */
    {"H100 PCIe", 756, 51},   /* H100 PCIe: BF16 1,513 with sparsity, FP32 51 */
    {"H100", 989, 67},        /* H100 SXM ("NVIDIA H100 80GB HBM3"): BF16 1,979 with sparsity, FP32 67 */
    {"H800", 989, 67},        /* H800 SXM: as H100 SXM */
    {"B200", 2250, 0},        /* HGX B200: FP16/BF16 4.5 PFLOPS with sparsity (per GPU) */
    {"A100", 312, 19.5},      /* A100: BF16 312 dense, FP32 19.5 */
    {"A800", 312, 19.5},      /* A800: as A100 (the paper's cluster) */
    {"L40S", 362, 91.6},      /* L40S: BF16 733 with sparsity, FP32 91.6 */
    {"L4", 121, 30.3},        /* L4: BF16 242 with sparsity, FP32 30.3 */
    {"A10", 125, 31.2},       /* A10: BF16 250 with sparsity, FP32 31.2 */
    {"RTX 4090", 165, 82.6},  /* Ada whitepaper: FP16 tensor, FP32 accumulate 165.2 dense */
};

double peak_tflops_of_gpu(const char *name, wp_dtype compute) {
    for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++)
        if (strstr(name, gpus[i].part)) return compute == WP_F32 ? gpus[i].fp32 : gpus[i].half;
    return 0;
}

/* The best of a few square products on k's compute type into fp32, in TFLOPS. */
static double measure_gemm(wp_kern *k) {
    enum { N = 384, REPS = 4 }; /* 0.6 MB per fp32 operand: below any run's peak memory */
    wp_dtype ct = kern_compute_dtype(k);
    size_t ab = (size_t)N * N * wp_dtype_size(ct);
    void *a = kern_alloc(k, ab), *b = kern_alloc(k, ab), *c = kern_alloc(k, (size_t)N * N * sizeof(float));
    double best = 0;
    for (int r = 0; a && b && c && r <= REPS; r++) {
        double t0 = wp_now();
        kern_gemm(k, false, false, N, N, N, 1.0f, a, N, b, N, 0.0f, c, WP_F32, N);
        kern_sync(k);
        double dt = wp_now() - t0;
        if (r > 0 && dt > 0 && 2.0 * N * N * N / dt > best) best = 2.0 * N * N * N / dt; /* r = 0 warms up */
    }
    kern_free(k, a), kern_free(k, b), kern_free(k, c);
    return best / 1e12;
}

double peak_tflops(wp_kern *k, double given, const char **source) {
    if (given > 0) return *source = "--peak-tflops", given;
    if (kern_kind(k) == WP_BACKEND_CUDA) {
        *source = "NVIDIA's datasheet (dense)";
        return peak_tflops_of_gpu(kern_device_name(k), kern_compute_dtype(k));
    }
    *source = "measured GEMM";
    return measure_gemm(k);
}
