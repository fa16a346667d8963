/* CUDA fused LM head + cross-entropy against the CPU backend: masked targets, odd V, row
 * blocks (V = 32000 with T = 600 takes two blocks of logits), Llama 3's V = 128256, and all
 * three ways to call the backward (dW fused per block; dlogits kept and dW in one product;
 * dlogits only), and the one-pass fwd_bwd (dW always fp32) against the CPU's fwd_bwd.
 * Bounds, u the compute dtype's unit roundoff:
 * - losses, lse: fp32 on both sides from the same rounded x, W: 2e-5.
 * - dlogits: one rounding, u. dx: 4u (dlogits rounded before the product, rows summing to 0).
 * - dW (+=): 4u, plus one bf16 rounding for a bf16 dW. fp32 compute adds 1e-5.
 * Every GPU output starts as NaN (gh_out), so an element left unwritten fails. */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_harness.h"

static void check_case(gh_pair *p, int T, int h, int V, wp_dtype dwtype) {
    const wp_dtype ct = p->ct;
    const size_t nx = (size_t)T * h, nw = (size_t)V * h, nl = (size_t)T * V;
    wp_rng g = rng_seeded(6000 + T + h + V + ct + 10 * dwtype);
    float *x = gh_floats(nx), *w = gh_floats(nw), *dw0 = gh_floats(nw);
    float *ref = gh_floats(nl > nw ? nl : nw), *got = gh_floats(nl > nw ? nl : nw), *lse_ref = gh_floats(T);
    int32_t *tgt = malloc(T * sizeof *tgt);
    gh_fill(&g, x, nx, 1.0f, ct);
    gh_fill(&g, w, nw, 0.3f, ct);
    gh_fill(&g, dw0, nw, 0.01f, dwtype);
    for (int t = 0; t < T; t++) tgt[t] = t % 7 == 3 ? -1 : (int32_t)rng_below(&g, (uint64_t)V);
    const double u = gh_unit_roundoff(ct), extra = ct == WP_F32 ? 1e-5 : 0.0;
    /* fp16 as training runs it: under the loss scale (dloss = 65536 / T, --loss-scale's default;
     * src/runtime/executor.c). Unscaled, (softmax ~ 1/V) * (1/T) at V = 32000, T = 600 is ~5e-8,
     * under fp16's smallest subnormal (6e-8): the dlogits flush to zero (first H200 run: dlogits
     * 2.0e-3, dx 1.1e-2 off, against u = 4.9e-4) -- a property of fp16, not of the kernel. */
    const float dloss = (ct == WP_F16 ? 65536.0f : 1.0f) / (float)T;
    void *cx = gh_upload(p->cpu, x, nx, WP_F32), *cw = gh_upload(p->cpu, w, nw, WP_F32), *ct_ = gh_upload_ints(p->cpu, tgt, T);
    void *gx = gh_upload(p->gpu, x, nx, ct), *gw = gh_upload(p->gpu, w, nw, ct), *gt = gh_upload_ints(p->gpu, tgt, T);
    float *closs = gh_out(p->cpu, T * 4), *clse = gh_out(p->cpu, T * 4);
    float *gloss = gh_out(p->gpu, T * 4), *glse = gh_out(p->gpu, T * 4);
    char shape[96], what[160];
    snprintf(shape, sizeof shape, "%s T=%d h=%d V=%d dW %s", wp_dtype_name(ct), T, h, V, wp_dtype_name(dwtype));

    kern_lmhead_ce_fwd(p->cpu, closs, clse, cx, cw, ct_, T, h, V);
    kern_lmhead_ce_fwd(p->gpu, gloss, glse, gx, gw, gt, T, h, V);
    gh_ok(p->gpu, shape);
    gh_download(p->cpu, ref, closs, T, WP_F32);
    gh_download(p->gpu, got, gloss, T, WP_F32);
    snprintf(what, sizeof what, "lmhead_ce_fwd losses %s", shape);
    gh_expect(what, got, ref, T, 2e-5);
    gh_download(p->cpu, lse_ref, clse, T, WP_F32);
    gh_download(p->gpu, got, glse, T, WP_F32);
    snprintf(what, sizeof what, "lmhead_ce_fwd lse %s", shape);
    gh_expect(what, got, lse_ref, T, 2e-5);
    kern_to_device(p->gpu, glse, lse_ref, T * 4); /* the backward starts from the same lse */

    const size_t es = wp_dtype_size(ct);
    static const char *modes[3] = {"dW fused per block", "dlogits kept + dW", "dlogits only"};
    for (int mode = 0; mode < 3; mode++) {
        void *cdx = gh_out(p->cpu, nx * 4), *gdx = gh_out(p->gpu, nx * es);
        void *cdl = mode ? gh_out(p->cpu, nl * 4) : NULL, *gdl = mode ? gh_out(p->gpu, nl * es) : NULL;
        void *cdw = mode < 2 ? gh_upload(p->cpu, dw0, nw, dwtype) : NULL, *gdw = mode < 2 ? gh_upload(p->gpu, dw0, nw, dwtype) : NULL;
        kern_lmhead_ce_bwd(p->cpu, cdx, cdl, cdw, dwtype, cx, cw, ct_, clse, dloss, T, h, V);
        kern_lmhead_ce_bwd(p->gpu, gdx, gdl, gdw, dwtype, gx, gw, gt, glse, dloss, T, h, V);
        gh_ok(p->gpu, shape);
        gh_download(p->cpu, ref, cdx, nx, WP_F32);
        gh_download(p->gpu, got, gdx, nx, ct);
        snprintf(what, sizeof what, "lmhead_ce_bwd dx (%s) %s", modes[mode], shape);
        gh_expect(what, got, ref, nx, 4 * u + extra);
        if (cdl) {
            gh_download(p->cpu, ref, cdl, nl, WP_F32);
            gh_download(p->gpu, got, gdl, nl, ct);
            snprintf(what, sizeof what, "lmhead_ce_bwd dlogits (%s) %s", modes[mode], shape);
            gh_expect(what, got, ref, nl, u + 4e-6);
        }
        if (cdw) {
            gh_download(p->cpu, ref, cdw, nw, dwtype);
            gh_download(p->gpu, got, gdw, nw, dwtype);
            snprintf(what, sizeof what, "lmhead_ce_bwd dW += (%s) %s", modes[mode], shape);
            gh_expect(what, got, ref, nw, 4 * u + extra + (dwtype == WP_BF16 ? gh_unit_roundoff(WP_BF16) : 0));
        }
        kern_free(p->cpu, cdx), kern_free(p->gpu, gdx);
        if (cdl) kern_free(p->cpu, cdl), kern_free(p->gpu, gdl);
        if (cdw) kern_free(p->cpu, cdw), kern_free(p->gpu, gdw);
    }
    {
        /* fwd_bwd: losses as fwd's, dx and the fp32 dW (+=) as the bwd's bounds */
        float *gl2 = gh_out(p->gpu, T * 4);
        void *cdx = gh_out(p->cpu, nx * 4), *gdx = gh_out(p->gpu, nx * es);
        void *cdw = gh_upload(p->cpu, dw0, nw, WP_F32), *gdw = gh_upload(p->gpu, dw0, nw, WP_F32);
        kern_lmhead_ce_fwd_bwd(p->cpu, closs, cdx, cdw, cx, cw, ct_, dloss, T, h, V);
        kern_lmhead_ce_fwd_bwd(p->gpu, gl2, gdx, gdw, gx, gw, gt, dloss, T, h, V);
        gh_ok(p->gpu, shape);
        gh_download(p->cpu, ref, closs, T, WP_F32);
        gh_download(p->gpu, got, gl2, T, WP_F32);
        snprintf(what, sizeof what, "lmhead_ce_fwd_bwd losses %s", shape);
        gh_expect(what, got, ref, T, 2e-5);
        gh_download(p->cpu, ref, cdx, nx, WP_F32);
        gh_download(p->gpu, got, gdx, nx, ct);
        snprintf(what, sizeof what, "lmhead_ce_fwd_bwd dx %s", shape);
        gh_expect(what, got, ref, nx, 4 * u + extra);
        gh_download(p->cpu, ref, cdw, nw, WP_F32);
        gh_download(p->gpu, got, gdw, nw, WP_F32);
        snprintf(what, sizeof what, "lmhead_ce_fwd_bwd dW fp32 += %s", shape);
        gh_expect(what, got, ref, nw, 4 * u + extra);
        kern_free(p->gpu, gl2), kern_free(p->cpu, cdx), kern_free(p->gpu, gdx), kern_free(p->cpu, cdw),
            kern_free(p->gpu, gdw);
    }
    void *bc[] = {cx, cw, ct_, closs, clse}, *bg[] = {gx, gw, gt, gloss, glse};
    for (int i = 0; i < 5; i++) kern_free(p->cpu, bc[i]), kern_free(p->gpu, bg[i]);
    free(x), free(w), free(dw0), free(ref), free(got), free(lse_ref), free(tgt);
}

int main(void) {
    int rc = gh_require_gpu("gpu/lmhead");
    if (rc) return rc;
    const wp_dtype cts[] = {WP_F16, WP_BF16, WP_F32};
    for (int t = 0; t < 3; t++) {
        gh_pair p;
        gh_open(&p, cts[t]);
        check_case(&p, 37, 64, 300, WP_F32);
        check_case(&p, 130, 96, 1031, WP_BF16);
        check_case(&p, 600, 32, 32000, t == 2 ? WP_F32 : WP_BF16);
        check_case(&p, 96, 64, 128256, WP_BF16); /* Llama 3's vocabulary: 12 M logits, row blocks */
        gh_close(&p);
    }
    return check_result("gpu/lmhead");
}
