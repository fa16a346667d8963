/* CUDA RMSNorm, RoPE and embedding kernels against the CPU backend, for fp16, bf16 and fp32
 * compute, on odd shapes. Bounds (u: the compute dtype's unit roundoff):
 * - rmsnorm fwd / bwd input: one rounding of the output, u, plus 4e-6 for fp32 row sums in
 *   another order; rstd (fp32 on both sides): 4e-6.
 * - rmsnorm weight gradient: fp32 sums over T rows in another order, 1e-5 (fp32 dw); one
 *   more rounding for a bf16 dw.
 * - rope: one rounding, u (the same double-precision cos/sin tables on both sides).
 * - embedding fwd: a copy, bit for bit. embedding bwd: fp32 sums in token order on both sides,
 *   grouped differently: 4e-6 (fp32 dw), plus a bf16 rounding for a bf16 dw. */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_harness.h"

static double tol(wp_dtype t, double units) { return units * gh_unit_roundoff(t) + 4e-6; }

static void check_rmsnorm(gh_pair *p, int T, int h) {
    const wp_dtype ct = p->ct;
    const size_t n = (size_t)T * h;
    wp_rng g = rng_seeded(2000 + T + h + ct);
    float *x = gh_floats(n), *dy = gh_floats(n), *dx0 = gh_floats(n), *w = gh_floats(h), *dw0 = gh_floats(h);
    float *ref = gh_floats(n), *got = gh_floats(n);
    gh_fill(&g, x, n, 2.0f, ct);
    gh_fill(&g, dy, n, 1.0f, ct);
    gh_fill(&g, dx0, n, 1.0f, ct);
    gh_fill(&g, w, h, 1.5f, ct);
    gh_fill(&g, dw0, h, 1.0f, WP_BF16);
    void *cx = gh_upload(p->cpu, x, n, WP_F32), *cdy = gh_upload(p->cpu, dy, n, WP_F32), *cw = gh_upload(p->cpu, w, h, WP_F32);
    void *gx = gh_upload(p->gpu, x, n, ct), *gdy = gh_upload(p->gpu, dy, n, ct), *gw = gh_upload(p->gpu, w, h, ct);
    void *cy = gh_out(p->cpu, n * 4), *gy = gh_out(p->gpu, n * wp_dtype_size(ct));
    float *crstd = gh_out(p->cpu, T * 4), *grstd = gh_out(p->gpu, T * 4);
    char what[128];

    kern_rmsnorm_fwd(p->cpu, cy, crstd, cx, cw, T, h, 1e-5f);
    kern_rmsnorm_fwd(p->gpu, gy, grstd, gx, gw, T, h, 1e-5f);
    gh_download(p->cpu, ref, cy, n, WP_F32);
    gh_download(p->gpu, got, gy, n, ct);
    snprintf(what, sizeof what, "rmsnorm_fwd y %s T=%d h=%d", wp_dtype_name(ct), T, h);
    gh_expect(what, got, ref, n, tol(ct, 1));
    gh_download(p->cpu, ref, crstd, T, WP_F32);
    gh_download(p->gpu, got, grstd, T, WP_F32);
    snprintf(what, sizeof what, "rmsnorm_fwd rstd %s T=%d h=%d", wp_dtype_name(ct), T, h);
    gh_expect(what, got, ref, T, 4e-6);

    /* both backends use the CPU's rstd from here on, so only the kernel under test differs */
    kern_to_device(p->gpu, grstd, ref, T * 4);
    for (int acc = 0; acc < 2; acc++) {
        void *cdx = gh_upload(p->cpu, dx0, n, WP_F32), *gdx = gh_upload(p->gpu, dx0, n, ct);
        kern_rmsnorm_bwd_input(p->cpu, cdx, acc, cdy, cx, cw, crstd, T, h);
        kern_rmsnorm_bwd_input(p->gpu, gdx, acc, gdy, gx, gw, grstd, T, h);
        gh_download(p->cpu, ref, cdx, n, WP_F32);
        gh_download(p->gpu, got, gdx, n, ct);
        snprintf(what, sizeof what, "rmsnorm_bwd_input%s %s T=%d h=%d", acc ? " (+=)" : "", wp_dtype_name(ct), T, h);
        gh_expect(what, got, ref, n, tol(ct, 1));
        kern_free(p->cpu, cdx), kern_free(p->gpu, gdx);
    }
    const wp_dtype dwts[] = {WP_F32, WP_BF16};
    for (int d = 0; d < 2; d++) {
        void *cdw = gh_upload(p->cpu, dw0, h, dwts[d]), *gdw = gh_upload(p->gpu, dw0, h, dwts[d]);
        kern_rmsnorm_bwd_weight(p->cpu, cdw, dwts[d], cdy, cx, crstd, T, h);
        kern_rmsnorm_bwd_weight(p->gpu, gdw, dwts[d], gdy, gx, grstd, T, h);
        gh_download(p->cpu, ref, cdw, h, dwts[d]);
        gh_download(p->gpu, got, gdw, h, dwts[d]);
        snprintf(what, sizeof what, "rmsnorm_bwd_weight dw %s (+=) %s T=%d h=%d", wp_dtype_name(dwts[d]), wp_dtype_name(ct), T, h);
        gh_expect(what, got, ref, h, 1e-5 + (dwts[d] == WP_BF16 ? gh_unit_roundoff(WP_BF16) : 0));
        kern_free(p->cpu, cdw), kern_free(p->gpu, gdw);
    }
    void *bc[] = {cx, cdy, cw, cy, crstd}, *bg[] = {gx, gdy, gw, gy, grstd};
    for (int i = 0; i < 5; i++) kern_free(p->cpu, bc[i]), kern_free(p->gpu, bg[i]);
    free(x), free(dy), free(dx0), free(w), free(dw0), free(ref), free(got);
}

static void check_rope(gh_pair *p, int b, int s, int nheads, int hd, int pos0) {
    const wp_dtype ct = p->ct;
    const size_t n = (size_t)b * s * nheads * hd;
    wp_rng g = rng_seeded(3000 + s + hd + pos0 + ct);
    float *x = gh_floats(n), *ref = gh_floats(n), *got = gh_floats(n);
    gh_fill(&g, x, n, 1.0f, ct);
    char what[128];
    /* dirs 2, 3: Llama 3.x scaling (rope_scaling llama3), the CPU tables being the fp64 reference;
     * dirs 4, 5: positions restarting per document (plo), the first continuing one from before pos0 */
    const wp_rope_scaling sc = {32, 1, 4, 64};
    int32_t *plo = malloc((size_t)b * s * sizeof *plo);
    for (int r = 0; r < b * s; r++) {
        int t = r % s;
        plo[r] = t < 3 ? (pos0 > 0 ? pos0 - 1 : 0) : pos0 + t - t % 3;
    }
    void *cplo = gh_upload_ints(p->cpu, plo, b * s), *gplo = gh_upload_ints(p->gpu, plo, b * s);
    for (int dir = 0; dir < 6; dir++) {
        void *cx = gh_upload(p->cpu, x, n, WP_F32), *gx = gh_upload(p->gpu, x, n, ct);
        if (dir == 0) {
            kern_rope_fwd(p->cpu, cx, b, s, nheads, hd, pos0, 10000.0f);
            kern_rope_fwd(p->gpu, gx, b, s, nheads, hd, pos0, 10000.0f);
        } else if (dir == 1) {
            kern_rope_bwd(p->cpu, cx, b, s, nheads, hd, pos0, 500000.0f);
            kern_rope_bwd(p->gpu, gx, b, s, nheads, hd, pos0, 500000.0f);
        } else if (dir == 2) {
            kern_rope_fwd_scaled(p->cpu, cx, b, s, nheads, hd, pos0, 500000.0f, &sc, NULL);
            kern_rope_fwd_scaled(p->gpu, gx, b, s, nheads, hd, pos0, 500000.0f, &sc, NULL);
        } else if (dir == 3) {
            kern_rope_bwd_scaled(p->cpu, cx, b, s, nheads, hd, pos0, 10000.0f, &sc, NULL);
            kern_rope_bwd_scaled(p->gpu, gx, b, s, nheads, hd, pos0, 10000.0f, &sc, NULL);
        } else if (dir == 4) {
            kern_rope_fwd_scaled(p->cpu, cx, b, s, nheads, hd, pos0, 500000.0f, &sc, cplo);
            kern_rope_fwd_scaled(p->gpu, gx, b, s, nheads, hd, pos0, 500000.0f, &sc, gplo);
        } else {
            kern_rope_bwd_scaled(p->cpu, cx, b, s, nheads, hd, pos0, 10000.0f, NULL, cplo);
            kern_rope_bwd_scaled(p->gpu, gx, b, s, nheads, hd, pos0, 10000.0f, NULL, gplo);
        }
        gh_download(p->cpu, ref, cx, n, WP_F32);
        gh_download(p->gpu, got, gx, n, ct);
        snprintf(what, sizeof what, "rope_%s%s%s %s b=%d s=%d heads=%d hd=%d pos0=%d", dir % 2 ? "bwd" : "fwd",
                 dir == 2 || dir == 3 || dir == 4 ? " llama3" : "", dir >= 4 ? " restarting" : "", wp_dtype_name(ct), b,
                 s, nheads, hd, pos0);
        gh_expect(what, got, ref, n, tol(ct, 1));
        kern_free(p->cpu, cx), kern_free(p->gpu, gx);
    }
    kern_free(p->cpu, cplo), kern_free(p->gpu, gplo);
    free(x), free(ref), free(got), free(plo);
}

static void check_embedding(gh_pair *p, int T, int h, int V) {
    const wp_dtype ct = p->ct;
    wp_rng g = rng_seeded(4000 + T + h + V + ct);
    const size_t nw = (size_t)V * h, ny = (size_t)T * h;
    /* ref and got hold the forward's [T, h] output and the backward's [V, h] gradient in turn */
    const size_t nmax = nw > ny ? nw : ny;
    float *wte = gh_floats(nw), *dy = gh_floats(ny), *dw0 = gh_floats(nw), *ref = gh_floats(nmax), *got = gh_floats(nmax);
    int32_t *tok = malloc(T * sizeof *tok);
    gh_fill(&g, wte, nw, 1.0f, ct);
    gh_fill(&g, dy, ny, 1.0f, ct);
    gh_fill(&g, dw0, nw, 1.0f, WP_BF16);
    /* a skewed draw: some tokens many times, some never, the last vocabulary row too */
    for (int t = 0; t < T; t++) tok[t] = t % 5 == 0 ? V - 1 : (int32_t)rng_below(&g, (uint64_t)(V / 2 + 1));
    void *ctok = gh_upload_ints(p->cpu, tok, T), *gtok = gh_upload_ints(p->gpu, tok, T);
    void *cw = gh_upload(p->cpu, wte, nw, WP_F32), *gw = gh_upload(p->gpu, wte, nw, ct);
    void *cy = gh_out(p->cpu, ny * 4), *gy = gh_out(p->gpu, ny * wp_dtype_size(ct));
    char what[128];
    kern_embedding_fwd(p->cpu, cy, ctok, cw, T, h);
    kern_embedding_fwd(p->gpu, gy, gtok, gw, T, h);
    gh_download(p->cpu, ref, cy, ny, WP_F32);
    gh_download(p->gpu, got, gy, ny, ct);
    snprintf(what, sizeof what, "embedding_fwd %s T=%d h=%d V=%d (bit for bit)", wp_dtype_name(ct), T, h, V);
    gh_expect(what, got, ref, ny, 0.0);

    void *cdy = gh_upload(p->cpu, dy, ny, WP_F32), *gdy = gh_upload(p->gpu, dy, ny, ct);
    const wp_dtype dwts[] = {WP_F32, WP_BF16};
    for (int d = 0; d < 2; d++) {
        void *cdw = gh_upload(p->cpu, dw0, nw, dwts[d]), *gdw = gh_upload(p->gpu, dw0, nw, dwts[d]);
        kern_embedding_bwd(p->cpu, cdw, dwts[d], ctok, cdy, T, h);
        kern_embedding_bwd(p->gpu, gdw, dwts[d], gtok, gdy, T, h);
        gh_download(p->cpu, ref, cdw, nw, dwts[d]);
        gh_download(p->gpu, got, gdw, nw, dwts[d]);
        snprintf(what, sizeof what, "embedding_bwd dw %s (+=) %s T=%d h=%d V=%d", wp_dtype_name(dwts[d]), wp_dtype_name(ct), T,
                 h, V);
        gh_expect(what, got, ref, nw, 4e-6 + (dwts[d] == WP_BF16 ? gh_unit_roundoff(WP_BF16) : 0));
        kern_free(p->cpu, cdw), kern_free(p->gpu, gdw);
    }
    void *bc[] = {ctok, cw, cy, cdy}, *bg[] = {gtok, gw, gy, gdy};
    for (int i = 0; i < 4; i++) kern_free(p->cpu, bc[i]), kern_free(p->gpu, bg[i]);
    free(wte), free(dy), free(dw0), free(ref), free(got), free(tok);
}

int main(void) {
    int rc = gh_require_gpu("gpu/layers");
    if (rc) return rc;
    const wp_dtype cts[] = {WP_F16, WP_BF16, WP_F32};
    for (int t = 0; t < 3; t++) {
        gh_pair p;
        gh_open(&p, cts[t]);
        check_rmsnorm(&p, 7, 12);
        check_rmsnorm(&p, 300, 257);
        check_rmsnorm(&p, 1000, 4096);
        check_rope(&p, 2, 7, 3, 6, 0);
        check_rope(&p, 1, 129, 4, 64, 1000);
        check_rope(&p, 3, 50, 2, 128, 16000);
        check_embedding(&p, 7, 12, 37);
        check_embedding(&p, 1000, 257, 300);
        check_embedding(&p, 4096, 64, 50);
        gh_close(&p);
    }
    return check_result("gpu/layers");
}
