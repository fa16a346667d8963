/* Repeatability: the CUDA backward kernels that sum many contributions into one output
 * (attention dK/dV/dQ, embedding and RMSNorm weight gradients, the LM head's dW) run twice on
 * the same inputs and must give identical bits -- they use fixed summation orders, never
 * float atomics. Shapes are large enough that a run-to-run race would show: many query tiles
 * per KV tile, and one token repeated thousands of times. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

static void *download_bytes(wp_kern *k, const void *dev, size_t bytes) {
    void *h = malloc(bytes);
    CHECK(h, "out of host memory (%zu bytes)", bytes);
    kern_to_host(k, h, dev, bytes);
    gh_ok(k, "download");
    return h;
}

static void *random_buffer(wp_kern *k, wp_rng *g, size_t n, wp_dtype t, float scale) {
    float *x = gh_floats(n);
    gh_fill(g, x, n, scale, t);
    void *d = gh_upload(k, x, n, t);
    free(x);
    return d;
}

static void attention_twice(wp_dtype ct, int s, int nh, int nkv, int hd) {
    gh_pair p;
    gh_open(&p, ct);
    wp_kern *k = p.gpu;
    wp_rng g = rng_seeded(7000 + hd + ct);
    const size_t nq = (size_t)s * nh * hd, nkvn = (size_t)s * nkv * hd, es = wp_dtype_size(ct);
    void *q = random_buffer(k, &g, nq, ct, 2.0f), *kk = random_buffer(k, &g, nkvn, ct, 2.0f);
    void *v = random_buffer(k, &g, nkvn, ct, 1.0f), *dout = random_buffer(k, &g, nq, ct, 1.0f);
    void *o = gh_out(k, nq * es);
    float *lse = gh_out(k, (size_t)nh * s * 4);
    kern_attention_fwd(k, o, lse, q, kk, v, 1, s, s, nh, nkv, hd, NULL);
    void *grads[2][3];
    for (int run = 0; run < 2; run++) {
        grads[run][0] = gh_out(k, nq * es);
        grads[run][1] = gh_out(k, nkvn * es);
        grads[run][2] = gh_out(k, nkvn * es);
        kern_attention_bwd(k, grads[run][0], grads[run][1], grads[run][2], dout, q, kk, v, o, lse, 1, s, s, nh, nkv, hd, NULL);
    }
    gh_ok(k, "attention");
    const char *names[3] = {"dq", "dk", "dv"};
    const size_t bytes[3] = {nq * es, nkvn * es, nkvn * es};
    for (int i = 0; i < 3; i++) {
        void *a = download_bytes(k, grads[0][i], bytes[i]), *b = download_bytes(k, grads[1][i], bytes[i]);
        char what[128];
        snprintf(what, sizeof what, "attention_bwd %s twice, %s s=%d nh=%d nkv=%d hd=%d", names[i], wp_dtype_name(ct), s, nh,
                 nkv, hd);
        gh_expect_same_bits(what, a, b, bytes[i]);
        free(a), free(b);
        kern_free(k, grads[0][i]), kern_free(k, grads[1][i]);
    }
    void *bufs[] = {q, kk, v, dout, o, lse};
    for (int i = 0; i < 6; i++) kern_free(k, bufs[i]);
    gh_close(&p);
}

/* embedding, RMSNorm weight and LM-head weight gradients (bf16 and fp32 accumulators) */
static void weight_grads_twice(wp_dtype ct, wp_dtype dwtype) {
    gh_pair p;
    gh_open(&p, ct);
    wp_kern *k = p.gpu;
    const int T = 8192, h = 256, V = 1000;
    wp_rng g = rng_seeded(8000 + ct + 3 * dwtype);
    int32_t *tok = malloc(T * sizeof *tok);
    for (int t = 0; t < T; t++) tok[t] = t % 2 ? 17 : (int32_t)rng_below(&g, V); /* token 17 half the time */
    void *gtok = gh_upload_ints(k, tok, T);
    void *dy = random_buffer(k, &g, (size_t)T * h, ct, 1.0f), *x = random_buffer(k, &g, (size_t)T * h, ct, 1.0f);
    void *w = random_buffer(k, &g, (size_t)V * h, ct, 0.3f);
    float *rstd = gh_out(k, T * 4), *losses = gh_out(k, T * 4), *lse = gh_out(k, T * 4);
    void *y = gh_out(k, (size_t)T * h * wp_dtype_size(ct)), *dx = gh_out(k, (size_t)T * h * wp_dtype_size(ct));
    kern_rmsnorm_fwd(k, y, rstd, x, w, T, h, 1e-5f);
    kern_lmhead_ce_fwd(k, losses, lse, x, w, gtok, T, h, V);
    const size_t dw_bytes[3] = {(size_t)V * h * wp_dtype_size(dwtype), h * wp_dtype_size(dwtype), (size_t)V * h * wp_dtype_size(dwtype)};
    void *dw[2][3];
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < 3; i++) dw[run][i] = kern_alloc(k, dw_bytes[i]);
        kern_embedding_bwd(k, dw[run][0], dwtype, gtok, dy, T, h);
        kern_rmsnorm_bwd_weight(k, dw[run][1], dwtype, dy, x, rstd, T, h);
        kern_lmhead_ce_bwd(k, dx, NULL, dw[run][2], dwtype, x, w, gtok, lse, 1.0f / T, T, h, V);
    }
    gh_ok(k, "weight gradients");
    const char *names[3] = {"embedding_bwd", "rmsnorm_bwd_weight", "lmhead_ce_bwd dW"};
    for (int i = 0; i < 3; i++) {
        void *a = download_bytes(k, dw[0][i], dw_bytes[i]), *b = download_bytes(k, dw[1][i], dw_bytes[i]);
        char what[128];
        snprintf(what, sizeof what, "%s twice, %s into %s, T=%d", names[i], wp_dtype_name(ct), wp_dtype_name(dwtype), T);
        gh_expect_same_bits(what, a, b, dw_bytes[i]);
        free(a), free(b);
        kern_free(k, dw[0][i]), kern_free(k, dw[1][i]);
    }
    void *bufs[] = {gtok, dy, x, w, rstd, losses, lse, y, dx};
    for (int i = 0; i < 9; i++) kern_free(k, bufs[i]);
    free(tok);
    gh_close(&p);
}

int main(void) {
    int rc = gh_require_gpu("gpu/determinism");
    if (rc) return rc;
    attention_twice(WP_BF16, 1000, 4, 2, 64);  /* tensor cores */
    attention_twice(WP_F16, 777, 2, 1, 128);   /* tensor cores */
    attention_twice(WP_F32, 500, 4, 1, 40);    /* SIMT */
    weight_grads_twice(WP_BF16, WP_BF16);
    weight_grads_twice(WP_F16, WP_BF16);
    weight_grads_twice(WP_F32, WP_F32);
    return check_result("gpu/determinism");
}
