/* --deterministic false: cuDNN's faster, non-deterministic attention backward against its
 * deterministic one and against the CPU backend, on the same inputs. The forward does not
 * depend on the choice (same graph), so its outputs must match bit for bit; the backward's
 * dq, dk, dv differ only in the order of fp32 sums and must stay within gpu/attention's bound
 * of the CPU (8u, u the compute dtype's unit roundoff) and within that bound of the
 * deterministic one. The context's note must say which backward ran. Skips without a GPU or
 * without cuDNN in the build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "wp_config.h"

#if WP_HAVE_CUDNN
typedef struct {
    void *q, *k, *v, *dout, *o, *dq, *dk, *dv;
    float *lse;
} attn_bufs;

static void upload_all(wp_kern *k, attn_bufs *b, wp_dtype ct, const float *q, const float *kk, const float *v,
                       const float *dout, size_t nq, size_t nkv, size_t nl) {
    const size_t es = wp_dtype_size(ct);
    b->q = gh_upload(k, q, nq, ct), b->k = gh_upload(k, kk, nkv, ct), b->v = gh_upload(k, v, nkv, ct);
    b->dout = gh_upload(k, dout, nq, ct);
    b->o = gh_out(k, nq * es), b->lse = gh_out(k, nl * sizeof(float));
    b->dq = gh_out(k, nq * es), b->dk = gh_out(k, nkv * es), b->dv = gh_out(k, nkv * es);
}

static void free_all(wp_kern *k, attn_bufs *b) {
    void *p[] = {b->q, b->k, b->v, b->dout, b->o, b->lse, b->dq, b->dk, b->dv};
    for (int i = 0; i < 9; i++) kern_free(k, p[i]);
}

static void fwd_bwd(wp_kern *k, attn_bufs *b, int s, int nh, int nkv, int hd) {
    kern_attention_fwd(k, b->o, b->lse, b->q, b->k, b->v, 1, s, s, nh, nkv, hd, NULL);
    kern_attention_bwd(k, b->dq, b->dk, b->dv, b->dout, b->q, b->k, b->v, b->o, b->lse, 1, s, s, nh, nkv, hd, NULL);
    gh_ok(k, "attention");
}

static void *bytes_of(wp_kern *k, const void *dev, size_t bytes) {
    void *h = malloc(bytes);
    CHECK(h, "out of host memory (%zu bytes)", bytes);
    kern_to_host(k, h, dev, bytes);
    gh_ok(k, "download");
    return h;
}

static void one_case(wp_dtype ct, int s, int nh, int nkv, int hd) {
    gh_pair p; /* p.gpu: cuDNN, deterministic (the default) */
    gh_open_attn(&p, ct, WP_ATTN_CUDNN);
    char err[512];
    wp_kern_opts o = {.kind = WP_BACKEND_CUDA, .compute = ct, .threads = 1, .device = 0, .attention = WP_ATTN_CUDNN,
                      .nondeterministic = true};
    wp_kern *fast = kern_create(&o, err, sizeof err);
    CHECK(fast, "cuda context (--deterministic false): %s", err);

    const size_t nq = (size_t)s * nh * hd, nk = (size_t)s * nkv * hd, nl = (size_t)nh * s, es = wp_dtype_size(ct);
    wp_rng g = rng_seeded(9100 + s + hd + ct);
    float *q = gh_floats(nq), *kk = gh_floats(nk), *v = gh_floats(nk), *dout = gh_floats(nq);
    gh_fill(&g, q, nq, 2.0f, ct), gh_fill(&g, kk, nk, 2.0f, ct), gh_fill(&g, v, nk, 1.0f, ct);
    gh_fill(&g, dout, nq, 1.0f, ct);
    attn_bufs ref, det, nd;
    upload_all(p.cpu, &ref, WP_F32, q, kk, v, dout, nq, nk, nl);
    upload_all(p.gpu, &det, ct, q, kk, v, dout, nq, nk, nl);
    upload_all(fast, &nd, ct, q, kk, v, dout, nq, nk, nl);
    fwd_bwd(p.gpu, &det, s, nh, nkv, hd);
    fwd_bwd(fast, &nd, s, nh, nkv, hd);
    /* the CPU's backward from the GPU's forward (as gpu/attention: only the backward differs) */
    float *o_h = gh_floats(nq), *lse_h = gh_floats(nl);
    gh_download(p.gpu, o_h, det.o, nq, ct);
    kern_to_host(p.gpu, lse_h, det.lse, nl * sizeof(float));
    gh_ok(p.gpu, "download");
    kern_to_device(p.cpu, ref.o, o_h, nq * sizeof(float));
    kern_to_device(p.cpu, ref.lse, lse_h, nl * sizeof(float));
    kern_attention_bwd(p.cpu, ref.dq, ref.dk, ref.dv, ref.dout, ref.q, ref.k, ref.v, ref.o, ref.lse, 1, s, s, nh, nkv, hd,
                       NULL);
    gh_ok(p.cpu, "cpu attention_bwd");

    char what[160];
    void *a = bytes_of(p.gpu, det.o, nq * es), *b = bytes_of(fast, nd.o, nq * es);
    snprintf(what, sizeof what, "forward o, deterministic vs not, %s s=%d", wp_dtype_name(ct), s);
    gh_expect_same_bits(what, a, b, nq * es);
    free(a), free(b);
    const double bound = 8 * gh_unit_roundoff(ct);
    const char *names[3] = {"dq", "dk", "dv"};
    void *dets[3] = {det.dq, det.dk, det.dv}, *nds[3] = {nd.dq, nd.dk, nd.dv}, *refs[3] = {ref.dq, ref.dk, ref.dv};
    const size_t ns[3] = {nq, nk, nk};
    for (int i = 0; i < 3; i++) {
        float *r = gh_floats(ns[i]), *x = gh_floats(ns[i]), *y = gh_floats(ns[i]);
        kern_to_host(p.cpu, r, refs[i], ns[i] * sizeof(float));
        gh_download(p.gpu, x, dets[i], ns[i], ct);
        gh_download(fast, y, nds[i], ns[i], ct);
        snprintf(what, sizeof what, "%s non-deterministic vs cpu, %s s=%d nh=%d nkv=%d hd=%d", names[i],
                 wp_dtype_name(ct), s, nh, nkv, hd);
        gh_expect(what, y, r, ns[i], bound);
        snprintf(what, sizeof what, "%s non-deterministic vs deterministic, %s s=%d", names[i], wp_dtype_name(ct), s);
        gh_expect(what, y, x, ns[i], bound);
        free(r), free(x), free(y);
    }
    const char *notes = kern_notes(fast);
    printf("notes (--deterministic false): %s\nnotes (default): %s\n", notes, kern_notes(p.gpu));
    check_say(strstr(notes, "non-deterministic backward") != NULL, "the note names the non-deterministic backward");
    check_say(strstr(kern_notes(p.gpu), "(deterministic backward)") != NULL, "the default's note names the deterministic one");
    free_all(p.cpu, &ref), free_all(p.gpu, &det), free_all(fast, &nd);
    free(q), free(kk), free(v), free(dout), free(o_h), free(lse_h);
    kern_destroy(fast);
    gh_close(&p);
}
#endif

int main(void) {
    int rc = gh_require_gpu("gpu/attn_fast");
    if (rc) return rc;
#if WP_HAVE_CUDNN
    one_case(WP_BF16, 1024, 4, 2, 128); /* many query tiles per KV tile: where the sums race */
    one_case(WP_F16, 2048, 8, 8, 64);
    return check_result("gpu/attn_fast");
#else
    printf("skip: this build has no cuDNN attention (configure with -Dcudnn=enabled)\n");
    return GH_SKIP;
#endif
}
