/* CUDA causal attention against the CPU backend: weipipe's own kernels (--attention native:
 * tensor-core WMMA kernels for fp16/bf16 with head sizes 16, 32, 64, 96, 128; the SIMT kernels
 * for fp32 and other head sizes) on every case, and cuDNN's fused attention (--attention
 * cudnn, where the build has it) on the cases it takes (fp16/bf16 whole sequences, head size a
 * multiple of 8): grouped KV heads, sq < skv, partial tiles, one query, several batches, and
 * s = 4096. The same bounds hold both, so cuDNN's kernels are checked by the CPU's and ours.
 *
 * Bounds, u the compute dtype's unit roundoff:
 * - forward o: 4u (P is rounded to the compute dtype before P V; o itself is rounded once);
 *   lse (fp32 on both sides, scores from the same rounded q, k): 1e-5.
 * - backward dq, dk, dv: 8u (P and dS = P (dP - delta) are rounded before their products;
 *   sum_j dS_ij = 0 makes dq and dk differences of similar terms). Both backends get the
 *   same o, lse and dout, so only the backward under test differs.
 * fp32 compute adds 1e-5 for fp32 sums in another order. */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_harness.h"
#include "wp_config.h"

typedef struct {
    int b, sq, skv, nh, nkv, hd;
} attn_case;

static void check_case(gh_pair *p, const attn_case *a, const char *impl) {
    const wp_dtype ct = p->ct;
    const size_t nq = (size_t)a->b * a->sq * a->nh * a->hd, nkv = (size_t)a->b * a->skv * a->nkv * a->hd;
    const size_t nl = (size_t)a->b * a->nh * a->sq;
    wp_rng g = rng_seeded(5000 + a->sq * 7 + a->skv + a->hd * 13 + ct);
    float *q = gh_floats(nq), *k = gh_floats(nkv), *v = gh_floats(nkv), *dout = gh_floats(nq);
    float *ref = gh_floats(nq > nkv ? nq : nkv), *got = gh_floats(nq > nkv ? nq : nkv);
    float *o_ref = gh_floats(nq), *lse_ref = gh_floats(nl);
    /* scores of a few units: softmax neither flat nor one-hot */
    gh_fill(&g, q, nq, 2.0f, ct);
    gh_fill(&g, k, nkv, 2.0f, ct);
    gh_fill(&g, v, nkv, 1.0f, ct);
    gh_fill(&g, dout, nq, 1.0f, ct);
    void *cq = gh_upload(p->cpu, q, nq, WP_F32), *ck = gh_upload(p->cpu, k, nkv, WP_F32), *cv = gh_upload(p->cpu, v, nkv, WP_F32);
    void *gq = gh_upload(p->gpu, q, nq, ct), *gk = gh_upload(p->gpu, k, nkv, ct), *gv = gh_upload(p->gpu, v, nkv, ct);
    void *co = gh_out(p->cpu, nq * 4), *go = gh_out(p->gpu, nq * wp_dtype_size(ct));
    float *clse = gh_out(p->cpu, nl * 4), *glse = gh_out(p->gpu, nl * 4);
    const double extra = ct == WP_F32 ? 1e-5 : 0.0, u = gh_unit_roundoff(ct);
    char shape[96], what[160];
    snprintf(shape, sizeof shape, "%s %s b=%d sq=%d skv=%d nh=%d nkv=%d hd=%d", impl, wp_dtype_name(ct), a->b, a->sq, a->skv,
             a->nh, a->nkv, a->hd);

    kern_attention_fwd(p->cpu, co, clse, cq, ck, cv, a->b, a->sq, a->skv, a->nh, a->nkv, a->hd, NULL);
    kern_attention_fwd(p->gpu, go, glse, gq, gk, gv, a->b, a->sq, a->skv, a->nh, a->nkv, a->hd, NULL);
    gh_ok(p->gpu, shape);
    gh_download(p->cpu, o_ref, co, nq, WP_F32);
    gh_download(p->gpu, got, go, nq, ct);
    snprintf(what, sizeof what, "attention_fwd o %s", shape);
    gh_expect(what, got, o_ref, nq, 4 * u + extra);
    gh_download(p->cpu, lse_ref, clse, nl, WP_F32);
    gh_download(p->gpu, got, glse, nl, WP_F32);
    snprintf(what, sizeof what, "attention_fwd lse %s", shape);
    gh_expect(what, got, lse_ref, nl, 1e-5);

    /* backward from the same o (rounded to ct), lse and dout on both sides */
    for (size_t i = 0; i < nq; i++) o_ref[i] = wp_round_to(o_ref[i], ct);
    void *co2 = gh_upload(p->cpu, o_ref, nq, WP_F32), *go2 = gh_upload(p->gpu, o_ref, nq, ct);
    kern_to_device(p->gpu, glse, lse_ref, nl * 4);
    void *cdo = gh_upload(p->cpu, dout, nq, WP_F32), *gdo = gh_upload(p->gpu, dout, nq, ct);
    void *cdq = gh_out(p->cpu, nq * 4), *cdk = gh_out(p->cpu, nkv * 4), *cdv = gh_out(p->cpu, nkv * 4);
    size_t es = wp_dtype_size(ct);
    void *gdq = gh_out(p->gpu, nq * es), *gdk = gh_out(p->gpu, nkv * es), *gdv = gh_out(p->gpu, nkv * es);
    kern_attention_bwd(p->cpu, cdq, cdk, cdv, cdo, cq, ck, cv, co2, clse, a->b, a->sq, a->skv, a->nh, a->nkv, a->hd, NULL);
    kern_attention_bwd(p->gpu, gdq, gdk, gdv, gdo, gq, gk, gv, go2, glse, a->b, a->sq, a->skv, a->nh, a->nkv, a->hd, NULL);
    gh_ok(p->gpu, shape);
    gh_expect_attn_grads(p, (void *[3]){cdq, cdk, cdv}, (void *[3]){gdq, gdk, gdv}, nq, nkv, ct, ref, got, 8 * u + extra,
                         shape);
    void *bc[] = {cq, ck, cv, co, clse, co2, cdo, cdq, cdk, cdv}, *bg[] = {gq, gk, gv, go, glse, go2, gdo, gdq, gdk, gdv};
    for (int i = 0; i < 10; i++) kern_free(p->cpu, bc[i]), kern_free(p->gpu, bg[i]);
    free(q), free(k), free(v), free(dout), free(ref), free(got), free(o_ref), free(lse_ref);
}

int main(void) {
    int rc = gh_require_gpu("gpu/attention");
    if (rc) return rc;
    const attn_case cases[] = {
        {2, 37, 37, 4, 2, 16},    /* one partial tile, GQA 2:1 */
        {1, 50, 131, 6, 3, 64},   /* queries are the last 50 of 131 positions */
        {1, 200, 200, 2, 1, 128}, /* four query tiles, all heads on one KV head */
        {1, 65, 65, 3, 3, 96},    /* a tile plus one row */
        {2, 19, 45, 3, 1, 24},    /* head size without a tensor-core kernel: SIMT */
        {1, 70, 70, 2, 2, 6},     /* tiny head size: SIMT */
        {1, 1, 90, 4, 2, 32},     /* a single query (decoding) */
        {1, 130, 130, 2, 1, 256}, /* the SIMT kernels' largest head size */
        {1, 1024, 1024, 4, 2, 128}, /* Llama's head size, many tiles */
        {1, 4096, 4096, 2, 1, 64},  /* a long sequence */
    };
    /* WP_GPU_TEST_QUICK (compute-sanitizer's run, 10-100x slower): the cases up to s = 256 only */
    const bool quick = getenv("WP_GPU_TEST_QUICK") != NULL;
    const size_t ncases = sizeof cases / sizeof cases[0];
    const wp_dtype cts[] = {WP_F16, WP_BF16, WP_F32};
    for (int t = 0; t < 3; t++) {
        gh_pair p;
        gh_open_attn(&p, cts[t], WP_ATTN_NATIVE);
        for (size_t c = 0; c < ncases; c++)
            if (!quick || cases[c].skv <= 256) check_case(&p, &cases[c], "native");
        gh_close(&p);
#if WP_HAVE_CUDNN
        if (cts[t] == WP_F32) continue; /* cuDNN's fused attention is fp16/bf16 */
        gh_open_attn(&p, cts[t], WP_ATTN_CUDNN);
        for (size_t c = 0; c < ncases; c++)
            if ((!quick || cases[c].skv <= 256) && cases[c].sq == cases[c].skv && cases[c].hd % 8 == 0)
                check_case(&p, &cases[c], "cudnn");
        printf("%s\n", kern_notes(p.gpu));
        gh_close(&p);
#endif
    }
    return check_result("gpu/attention");
}
