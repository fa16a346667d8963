/* CUDA backend: matrix products through cuBLAS (cublasGemmEx, fp32 compute).
 *
 * kernels.h is row-major; cuBLAS is column-major. A row-major matrix with row stride ld is the
 * same memory as its transpose in column-major with leading dimension ld, so
 * C = op(A) op(B) (row-major) is computed as C^T = op(B)^T op(A)^T (column-major): the operands
 * swap places and keep their transpose flags. */
#include "cuda_impl.h"

/* One fp32 block of the epilogue path stays below this many bytes. */
#define WP_GEMM_BLOCK_BYTES ((size_t)64 << 20)

static cudaDataType_t cuda_type(wp_dtype t) {
    return t == WP_F16 ? CUDA_R_16F : t == WP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* Output types cublasGemmEx writes for A, B in ct under CUBLAS_COMPUTE_32F: ct itself or fp32.
 * (fp16 inputs with a bf16 output, the mixed-precision weight gradient, are not among them.) */
static bool blas_writes(wp_dtype ct, wp_dtype ctype) { return ctype == ct || ctype == WP_F32; }

static int gemm_blas(wp_kern *k, wp_cuda *c, bool trans_a, bool trans_b, int m, int n, int kk, float alpha,
                     const void *A, int lda, const void *B, int ldb, float beta, void *C, wp_dtype ctype, int ldc) {
    cudaDataType_t in = cuda_type(k->compute);
    return CU_BLAS_CHECK(k, cublasGemmEx(c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         n, m, kk, &alpha, B, in, ldb, A, in, lda, &beta, C, cuda_type(ctype), ldc,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* Output dtypes cuBLAS cannot write: the product goes to an fp32 block, then one rounding
 * into C (C = round(acc + beta C)), block by block of rows to bound the scratch. */
static void gemm_via_f32(wp_kern *k, wp_cuda *c, bool trans_a, bool trans_b, int m, int n, int kk, float alpha,
                         const void *A, int lda, const void *B, int ldb, float beta, void *C, wp_dtype ctype,
                         int ldc) {
    size_t row_bytes = (size_t)n * sizeof(float);
    size_t rows = WP_GEMM_BLOCK_BYTES / row_bytes;
    if (rows < 1) rows = 1;
    if (rows > (size_t)m) rows = (size_t)m;
    float *acc = cu_scratch(k, WP_SCRATCH_GEMM, rows * row_bytes);
    if (!acc) return;
    size_t in_size = wp_dtype_size(k->compute), out_size = wp_dtype_size(ctype);
    for (int i0 = 0; i0 < m; i0 += (int)rows) {
        int mb = m - i0 < (int)rows ? m - i0 : (int)rows;
        /* rows i0.. of op(A): whole rows of A, or columns of A when it is transposed */
        const char *a = (const char *)A + (trans_a ? (size_t)i0 : (size_t)i0 * lda) * in_size;
        void *cblock = (char *)C + (size_t)i0 * ldc * out_size;
        if (kk == 0) {
            if (CU_CHECK(k, cudaMemsetAsync(acc, 0, (size_t)mb * row_bytes, c->stream))) return;
        } else if (gemm_blas(k, c, trans_a, trans_b, mb, n, kk, alpha, a, lda, B, ldb, 0.0f, acc, WP_F32, n)) {
            return;
        }
        if (cu_gemm_epilogue(k, cblock, ctype, ldc, acc, beta, mb, n)) return;
    }
}

void cu_gemm(wp_kern *k, bool trans_a, bool trans_b, int m, int n, int kk, float alpha, const void *A, int lda,
             const void *B, int ldb, float beta, void *C, wp_dtype ctype, int ldc) {
    if (m < 0 || n < 0 || kk < 0) {
        cu_fail(k, "gemm", "negative size (m=%d, n=%d, k=%d)", m, n, kk);
        return;
    }
    int a_cols = trans_a ? m : kk, b_cols = trans_b ? kk : n;
    if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < (n > 1 ? n : 1)) {
        cu_fail(k, "gemm", "row stride too small (lda=%d needs %d, ldb=%d needs %d, ldc=%d needs %d)", lda, a_cols,
                ldb, b_cols, ldc, n);
        return;
    }
    if (m == 0 || n == 0) return;
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    if (blas_writes(k->compute, ctype))
        gemm_blas(k, c, trans_a, trans_b, m, n, kk, alpha, A, lda, B, ldb, beta, C, ctype, ldc);
    else
        gemm_via_f32(k, c, trans_a, trans_b, m, n, kk, alpha, A, lda, B, ldb, beta, C, ctype, ldc);
}
