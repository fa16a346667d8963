/* Attention under document masks on the GPU against the CPU backend: weipipe's own CUDA kernels
 * (--attention native) and cuDNN's fused attention over ragged documents (--attention cudnn,
 * where the build has it; kern_attention_docs hands it the documents, as src/model/doc_mask.c
 * does), forward and backward, at random document layouts: one whole-sequence document, runs
 * of one-token documents, random lengths (document counts that are not powers of two, so the
 * ragged graph's padding documents of length 0 are used), grouped KV heads, several tiles.
 * Then the refusals, each naming why: a Seq1F1B segment after the first (queries the last part
 * of the keys), a qlo never handed over, a qlo that is no set of whole documents; under
 * --attention auto a segment falls back to our kernels and matches the CPU.
 *
 * Bounds as gpu/attention's (test_gpu_attention.c): o 4u, lse 1e-5, dq/dk/dv 8u, u the compute
 * dtype's unit roundoff; both backends' backward get the same o, lse and dout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "wp_config.h"

typedef struct {
    int b, sq, skv, nh, nkv, hd, every; /* every: a document starts at a token with probability 1/every */
} docs_case;

/* qlo [b*sq], keys in skv coordinates. Sequence 0 of several is one whole document; the last
 * starts with four one-token documents and ends with two; the rest are random. A segment
 * (sq < skv) continues a document begun before it. */
static void make_lo(wp_rng *g, const docs_case *a, int32_t *lo) {
    const int off = a->skv - a->sq;
    for (int bi = 0; bi < a->b; bi++) {
        int cur = off ? (int)rng_below(g, (uint64_t)off) : 0;
        for (int i = 0; i < a->sq; i++) {
            int t = off + i;
            bool last = bi == a->b - 1 && a->b > 1;
            bool start = t == 0 || (a->b > 1 && bi == 0 ? false
                                    : last               ? i < 4 || i >= a->sq - 2 || rng_below(g, (uint64_t)a->every) == 0
                                                         : rng_below(g, (uint64_t)a->every) == 0);
            if (start) cur = t;
            lo[(size_t)bi * a->sq + i] = cur;
        }
    }
}

/* Forward and backward of one case on p's GPU against its CPU. register_docs: hand the
 * documents over first (the model does). Returns 0, or 1 when the GPU refused (error kept). */
static int check_case(gh_pair *p, const docs_case *a, const int32_t *lo, const char *impl, bool register_docs) {
    const wp_dtype ct = p->ct;
    const size_t nq = (size_t)a->b * a->sq * a->nh * a->hd, nkv = (size_t)a->b * a->skv * a->nkv * a->hd;
    const size_t nl = (size_t)a->b * a->nh * a->sq, big = nq > nkv ? nq : nkv;
    wp_rng g = rng_seeded(7000 + a->sq * 7 + a->skv + a->hd * 13 + ct);
    float *q = gh_floats(nq), *k = gh_floats(nkv), *v = gh_floats(nkv), *dout = gh_floats(nq);
    float *ref = gh_floats(big), *got = gh_floats(big), *o_ref = gh_floats(nq), *lse_ref = gh_floats(nl);
    gh_fill(&g, q, nq, 2.0f, ct);
    gh_fill(&g, k, nkv, 2.0f, ct);
    gh_fill(&g, v, nkv, 1.0f, ct);
    gh_fill(&g, dout, nq, 1.0f, ct);
    const size_t nlo = (size_t)a->b * a->sq;
    int32_t *clo = gh_upload_ints(p->cpu, lo, nlo), *glo = gh_upload_ints(p->gpu, lo, nlo);
    if (register_docs) kern_attention_docs(p->gpu, glo, lo, a->b, a->sq);
    void *cq = gh_upload(p->cpu, q, nq, WP_F32), *ck = gh_upload(p->cpu, k, nkv, WP_F32), *cv = gh_upload(p->cpu, v, nkv, WP_F32);
    void *gq = gh_upload(p->gpu, q, nq, ct), *gk = gh_upload(p->gpu, k, nkv, ct), *gv = gh_upload(p->gpu, v, nkv, ct);
    void *co = gh_out(p->cpu, nq * 4), *go = gh_out(p->gpu, nq * wp_dtype_size(ct));
    float *clse = gh_out(p->cpu, nl * 4), *glse = gh_out(p->gpu, nl * 4);
    size_t es = wp_dtype_size(ct);
    void *cdo = gh_upload(p->cpu, dout, nq, WP_F32), *gdo = gh_upload(p->gpu, dout, nq, ct);
    void *cdq = gh_out(p->cpu, nq * 4), *cdk = gh_out(p->cpu, nkv * 4), *cdv = gh_out(p->cpu, nkv * 4);
    void *gdq = gh_out(p->gpu, nq * es), *gdk = gh_out(p->gpu, nkv * es), *gdv = gh_out(p->gpu, nkv * es);
    void *co2 = NULL, *go2 = NULL;
    const double u = gh_unit_roundoff(ct);
    char shape[128], what[200];
    snprintf(shape, sizeof shape, "%s %s b=%d sq=%d skv=%d nh=%d nkv=%d hd=%d docs 1/%d", impl, wp_dtype_name(ct), a->b,
             a->sq, a->skv, a->nh, a->nkv, a->hd, a->every);
    int refused = 0;

    kern_attention_fwd(p->cpu, co, clse, cq, ck, cv, a->b, a->sq, a->skv, a->nh, a->nkv, a->hd, clo);
    kern_attention_fwd(p->gpu, go, glse, gq, gk, gv, a->b, a->sq, a->skv, a->nh, a->nkv, a->hd, glo);
    gh_ok(p->cpu, shape);
    if (kern_error(p->gpu)) {
        refused = 1;
        goto out;
    }
    gh_download(p->cpu, o_ref, co, nq, WP_F32);
    gh_download(p->gpu, got, go, nq, ct);
    snprintf(what, sizeof what, "attention_fwd o %s", shape);
    gh_expect(what, got, o_ref, nq, 4 * u);
    gh_download(p->cpu, lse_ref, clse, nl, WP_F32);
    gh_download(p->gpu, got, glse, nl, WP_F32);
    snprintf(what, sizeof what, "attention_fwd lse %s", shape);
    gh_expect(what, got, lse_ref, nl, 1e-5);

    for (size_t i = 0; i < nq; i++) o_ref[i] = wp_round_to(o_ref[i], ct);
    co2 = gh_upload(p->cpu, o_ref, nq, WP_F32), go2 = gh_upload(p->gpu, o_ref, nq, ct);
    kern_to_device(p->gpu, glse, lse_ref, nl * 4);
    kern_attention_bwd(p->cpu, cdq, cdk, cdv, cdo, cq, ck, cv, co2, clse, a->b, a->sq, a->skv, a->nh, a->nkv, a->hd, clo);
    kern_attention_bwd(p->gpu, gdq, gdk, gdv, gdo, gq, gk, gv, go2, glse, a->b, a->sq, a->skv, a->nh, a->nkv, a->hd, glo);
    gh_ok(p->gpu, shape);
    gh_expect_attn_grads(p, (void *[3]){cdq, cdk, cdv}, (void *[3]){gdq, gdk, gdv}, nq, nkv, ct, ref, got, 8 * u, shape);
out:;
    void *bc[] = {clo, cq, ck, cv, co, clse, cdo, cdq, cdk, cdv, co2};
    void *bg[] = {glo, gq, gk, gv, go, glse, gdo, gdq, gdk, gdv, go2};
    for (size_t i = 0; i < sizeof bc / sizeof bc[0]; i++) {
        if (bc[i]) kern_free(p->cpu, bc[i]);
        if (bg[i]) kern_free(p->gpu, bg[i]);
    }
    free(q), free(k), free(v), free(dout), free(ref), free(got), free(o_ref), free(lse_ref);
    return refused;
}

#if WP_HAVE_CUDNN /* only the cuDNN cases below call it */
/* The case must be refused by --attention cudnn with an error containing needle. */
static void expect_refusal(wp_dtype ct, const docs_case *a, const int32_t *lo, bool register_docs, const char *needle) {
    gh_pair p;
    gh_open_attn(&p, ct, WP_ATTN_CUDNN);
    char what[200];
    snprintf(what, sizeof what, "--attention cudnn refuses %s (sq=%d skv=%d)", needle, a->sq, a->skv);
    int refused = check_case(&p, a, lo, "cudnn", register_docs);
    const char *err = kern_error(p.gpu);
    CHECK(refused && err && strstr(err, needle), "%s: got %s", what, err ? err : "no error");
    check_say(true, "%s: %s", what, err ? err : "");
    gh_close(&p);
}
#endif

int main(void) {
    int rc = gh_require_gpu("gpu/attention_docs");
    if (rc) return rc;
    const docs_case cases[] = {
        {2, 37, 37, 4, 2, 16, 5},      /* a partial tile, GQA 2:1 */
        {3, 200, 200, 4, 1, 64, 40},   /* several tiles, all heads on one KV head */
        {2, 130, 130, 2, 2, 128, 200}, /* long documents beside one-token ones */
        {1, 97, 97, 2, 1, 32, 3},      /* one sequence, many short documents */
        {2, 1024, 1024, 4, 2, 128, 300}, /* Llama's head size, documents over many tiles */
    };
    const size_t ncases = sizeof cases / sizeof cases[0];
    const bool quick = getenv("WP_GPU_TEST_QUICK") != NULL;
    const wp_dtype cts[] = {WP_F16, WP_BF16};
    for (int t = 0; t < 2; t++) {
        const wp_attn_impl impls[] = {WP_ATTN_NATIVE,
#if WP_HAVE_CUDNN
                                      WP_ATTN_CUDNN
#endif
        };
        for (size_t m = 0; m < sizeof impls / sizeof impls[0]; m++) {
            const char *impl = impls[m] == WP_ATTN_NATIVE ? "native" : "cudnn";
            gh_pair p;
            gh_open_attn(&p, cts[t], impls[m]);
            for (size_t c = 0; c < ncases; c++) {
                if (quick && cases[c].skv > 256) continue;
                const docs_case *a = &cases[c];
                wp_rng g = rng_seeded(900 + c);
                int32_t *lo = malloc((size_t)a->b * a->sq * sizeof *lo);
                CHECK(lo, "out of memory");
                make_lo(&g, a, lo);
                CHECK(!check_case(&p, a, lo, impl, true), "%s: %s", impl, kern_error(p.gpu));
                free(lo);
            }
            const char *notes = kern_notes(p.gpu);
            printf("%s\n", notes);
            if (impls[m] == WP_ATTN_CUDNN)
                CHECK(strstr(notes, "ragged documents"), "cuDNN did not say it ran the documents: %s", notes);
            gh_close(&p);
        }
    }
#if WP_HAVE_CUDNN
    /* the refusals, each in a fresh context (an error is sticky) */
    const docs_case seg = {2, 50, 131, 4, 2, 64, 20}, whole = {2, 64, 64, 4, 2, 64, 9};
    wp_rng g = rng_seeded(31);
    int32_t lo_seg[2 * 50], lo_whole[2 * 64];
    make_lo(&g, &seg, lo_seg);
    make_lo(&g, &whole, lo_whole);
    expect_refusal(WP_F16, &seg, lo_seg, true, "Seq1F1B segment");
    expect_refusal(WP_F16, &whole, lo_whole, false, "not handed to the backend");
    int32_t lo_window[2 * 64];
    for (int i = 0; i < 2 * 64; i++) lo_window[i] = i % 64 > 8 ? i % 64 - 8 : 0; /* a sliding window */
    expect_refusal(WP_F16, &whole, lo_window, true, "not whole documents");
    /* --attention auto: the segment falls back to our kernels, and says why */
    gh_pair p;
    gh_open_attn(&p, WP_F16, WP_ATTN_AUTO);
    CHECK(!check_case(&p, &seg, lo_seg, "auto", true), "auto: %s", kern_error(p.gpu));
    CHECK(strstr(kern_notes(p.gpu), "Seq1F1B segment"), "auto did not say why not cuDNN: %s", kern_notes(p.gpu));
    printf("%s\n", kern_notes(p.gpu));
    gh_close(&p);
#endif
    return check_result("gpu/attention_docs");
}
