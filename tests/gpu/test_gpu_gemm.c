/* CUDA GEMM (cuBLAS, row-major mapped onto column-major by swapping operands) against the
 * CPU backend: all four transpose combinations, odd sizes, row strides wider than the rows,
 * alpha and beta, and every output dtype the model uses (ct, fp32, bf16 -- including fp16
 * inputs into a bf16 gradient, which cuBLAS cannot write and goes through fp32 + one
 * rounding). Bound: one rounding of the output, u(ctype), plus k * 2^-24 + 1e-6 for fp32
 * accumulation in another order (tensor cores add with truncation, so their rounding errors
 * share a sign and grow with the depth k, not with its square root). */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_harness.h"

typedef struct {
    int m, n, kk, pad; /* pad: extra row-stride elements of A, B and C */
} gemm_case;

static void check_case(gh_pair *p, const gemm_case *gc, bool ta, bool tb, wp_dtype ctype, float alpha, float beta) {
    const int a_rows = ta ? gc->kk : gc->m, a_cols = ta ? gc->m : gc->kk;
    const int b_rows = tb ? gc->n : gc->kk, b_cols = tb ? gc->kk : gc->n;
    const int lda = a_cols + gc->pad, ldb = b_cols + gc->pad, ldc = gc->n + gc->pad;
    const size_t na = (size_t)a_rows * lda, nb = (size_t)b_rows * ldb, nc = (size_t)gc->m * ldc;
    wp_rng g = rng_seeded(1000 + 31 * gc->m + 7 * ta + 3 * tb + ctype);
    float *A = gh_floats(na), *B = gh_floats(nb), *C = gh_floats(nc), *ref = gh_floats(nc), *got = gh_floats(nc);
    gh_fill(&g, A, na, 1.0f, p->ct);
    gh_fill(&g, B, nb, 1.0f, p->ct);
    gh_fill(&g, C, nc, 1.0f, ctype);
    /* the CPU computes in fp32 and stores fp32 or bf16 */
    wp_dtype cpu_ctype = ctype == WP_BF16 ? WP_BF16 : WP_F32;
    void *cA = gh_upload(p->cpu, A, na, WP_F32), *cB = gh_upload(p->cpu, B, nb, WP_F32), *cC = gh_upload(p->cpu, C, nc, cpu_ctype);
    void *gA = gh_upload(p->gpu, A, na, p->ct), *gB = gh_upload(p->gpu, B, nb, p->ct), *gC = gh_upload(p->gpu, C, nc, ctype);
    kern_gemm(p->cpu, ta, tb, gc->m, gc->n, gc->kk, alpha, cA, lda, cB, ldb, beta, cC, cpu_ctype, ldc);
    kern_gemm(p->gpu, ta, tb, gc->m, gc->n, gc->kk, alpha, gA, lda, gB, ldb, beta, gC, ctype, ldc);
    gh_download(p->cpu, ref, cC, nc, cpu_ctype);
    gh_download(p->gpu, got, gC, nc, ctype);
    /* the padding columns of C must be untouched */
    bool padding_kept = true;
    for (int i = 0; i < gc->m && padding_kept; i++)
        for (int j = gc->n; j < ldc; j++)
            if (got[(size_t)i * ldc + j] != wp_round_to(C[(size_t)i * ldc + j], ctype)) {
                EXPECT(false, "gemm wrote C's padding at row %d col %d", i, j);
                padding_kept = false;
                break;
            }
    char what[160];
    snprintf(what, sizeof what, "gemm %s%s m=%d n=%d k=%d pad=%d in %s, C %s, alpha=%g beta=%g", ta ? "T" : "N",
             tb ? "T" : "N", gc->m, gc->n, gc->kk, gc->pad, wp_dtype_name(p->ct), wp_dtype_name(ctype), alpha, beta);
    double bound = gh_unit_roundoff(ctype) + (cpu_ctype == WP_BF16 ? gh_unit_roundoff(WP_BF16) : 0) + gc->kk * 0x1p-24 + 1e-6;
    gh_expect(what, got, ref, nc, bound);
    kern_free(p->cpu, cA), kern_free(p->cpu, cB), kern_free(p->cpu, cC);
    kern_free(p->gpu, gA), kern_free(p->gpu, gB), kern_free(p->gpu, gC);
    free(A), free(B), free(C), free(ref), free(got);
}

int main(void) {
    int rc = gh_require_gpu("gpu/gemm");
    if (rc) return rc;
    const gemm_case cases[] = {{37, 53, 29, 0}, {1, 300, 77, 3}, {130, 96, 200, 5}, {64, 64, 1, 0}, {257, 129, 513, 2}};
    const wp_dtype cts[] = {WP_F16, WP_BF16, WP_F32};
    for (int t = 0; t < 3; t++) {
        gh_pair p;
        gh_open(&p, cts[t]);
        const wp_dtype ctypes[] = {cts[t], WP_F32, WP_BF16};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int o = 0; o < 3; o++) {
                        if (o > 0 && ctypes[o] == cts[t]) continue;
                        float beta = o == 0 ? 0.0f : 1.0f; /* gradients accumulate with beta = 1 */
                        check_case(&p, &cases[c], ta, tb, ctypes[o], c % 2 ? 0.7f : 1.0f, c == 2 ? 0.3f : beta);
                    }
        gh_close(&p);
    }
    return check_result("gpu/gemm");
}
