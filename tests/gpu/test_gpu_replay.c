/* CUDA graphs (kernels/replay.h, --graphs) on the device: a span like a compute action's (GEMM
 * through cuBLAS, RMSNorm, attention forward and backward through cuDNN where built, SwiGLU, the
 * fused LM head, a memset and a copy) run through a replay five times with new inputs each time,
 * against the same span called directly into a second set of outputs, bit for bit: the first run
 * eager (first sight), the second captured into a graph and launched, the rest the graph. A capture
 * a library refuses shows as a note and a run that stays eager: reported, and failed here, since
 * then --graphs buys nothing for such spans. Then the span again with attention forced to
 * weipipe's own kernels (--attention native). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "replay.h"

enum { B = 2, S = 128, NH = 4, NKV = 2, HD = 64, H = NH * HD, KV = NKV * HD, F = 384, V = 1000, T = B * S };

typedef struct {
    wp_kern *k;
    void *x, *wq, *wk, *wv, *wn, *wh, *gate, *up; /* inputs (ct) */
    int32_t *tgt;
    /* outputs: one set for the replay, one for the direct calls */
    void *q, *kk, *vv, *n, *o, *sw, *dq, *dk, *dv, *dx, *xc;
    float *rstd, *lse, *loss, *dw;
} span;

static wp_result work(void *p) {
    span *s = p;
    wp_kern *k = s->k;
    kern_rmsnorm_fwd(k, s->n, s->rstd, s->x, s->wn, T, H, 1e-5f);
    kern_gemm(k, false, true, T, H, H, 1.0f, s->n, H, s->wq, H, 0.0f, s->q, kern_compute_dtype(k), H);
    kern_gemm(k, false, true, T, KV, H, 1.0f, s->n, H, s->wk, H, 0.0f, s->kk, kern_compute_dtype(k), KV);
    kern_gemm(k, false, true, T, KV, H, 1.0f, s->n, H, s->wv, H, 0.0f, s->vv, kern_compute_dtype(k), KV);
    kern_rope_fwd(k, s->q, B, S, NH, HD, 0, 10000.0f);
    kern_attention_fwd(k, s->o, s->lse, s->q, s->kk, s->vv, B, S, S, NH, NKV, HD, NULL);
    kern_attention_bwd(k, s->dq, s->dk, s->dv, s->o, s->q, s->kk, s->vv, s->o, s->lse, B, S, S, NH, NKV, HD, NULL);
    kern_swiglu_fwd(k, s->sw, s->gate, s->up, (size_t)T * F);
    kern_zero(k, s->dw, (size_t)V * H * sizeof(float));
    kern_lmhead_ce_fwd_bwd(k, s->loss, s->dx, s->dw, s->o, s->wh, s->tgt, 1.0f / T, T, H, V);
    kern_copy(k, s->xc, s->dx, (size_t)T * H * wp_dtype_size(kern_compute_dtype(k)));
    return kern_status(k);
}

static void *out(wp_kern *k, size_t n, wp_dtype t) { return gh_out(k, n * wp_dtype_size(t)); }

static void outputs(span *s, wp_dtype ct) {
    wp_kern *k = s->k;
    s->q = out(k, (size_t)T * H, ct), s->kk = out(k, (size_t)T * KV, ct), s->vv = out(k, (size_t)T * KV, ct);
    s->n = out(k, (size_t)T * H, ct), s->o = out(k, (size_t)T * H, ct), s->sw = out(k, (size_t)T * F, ct);
    s->dq = out(k, (size_t)T * H, ct), s->dk = out(k, (size_t)T * KV, ct), s->dv = out(k, (size_t)T * KV, ct);
    s->dx = out(k, (size_t)T * H, ct), s->xc = out(k, (size_t)T * H, ct);
    s->rstd = out(k, T, WP_F32), s->lse = out(k, (size_t)B * NH * S, WP_F32), s->loss = out(k, T, WP_F32);
    s->dw = out(k, (size_t)V * H, WP_F32);
}

/* Every output of a and b, bit for bit. */
static void same(const span *a, const span *b, wp_dtype ct, const char *what) {
    struct { const char *name; const void *x, *y; size_t bytes; } o[] = {
        {"q", a->q, b->q, (size_t)T * H * wp_dtype_size(ct)},   {"o", a->o, b->o, (size_t)T * H * wp_dtype_size(ct)},
        {"dq", a->dq, b->dq, (size_t)T * H * wp_dtype_size(ct)}, {"dk", a->dk, b->dk, (size_t)T * KV * wp_dtype_size(ct)},
        {"dv", a->dv, b->dv, (size_t)T * KV * wp_dtype_size(ct)}, {"swiglu", a->sw, b->sw, (size_t)T * F * wp_dtype_size(ct)},
        {"losses", a->loss, b->loss, T * sizeof(float)},      {"dW head", a->dw, b->dw, (size_t)V * H * sizeof(float)},
        {"copy", a->xc, b->xc, (size_t)T * H * wp_dtype_size(ct)}, {"rstd", a->rstd, b->rstd, T * sizeof(float)},
    };
    for (size_t i = 0; i < sizeof o / sizeof *o; i++) {
        void *ha = malloc(o[i].bytes), *hb = malloc(o[i].bytes);
        kern_to_host(a->k, ha, o[i].x, o[i].bytes);
        kern_to_host(a->k, hb, o[i].y, o[i].bytes);
        char w[160];
        snprintf(w, sizeof w, "%s: %s", what, o[i].name);
        gh_expect_same_bits(w, ha, hb, o[i].bytes);
        free(ha), free(hb);
    }
}

static void run_case(wp_dtype ct, wp_attn_impl attn, const char *name) {
    gh_pair p;
    gh_open_attn(&p, ct, attn);
    wp_kern *k = p.gpu;
    check_say(kern_replay_on_device(k), "%s: the CUDA backend replays through device graphs", name);
    wp_rng g = rng_seeded(4242 + ct);
    float *h = gh_floats((size_t)V * H);
    span s = {.k = k};
    void **in[] = {&s.x, &s.wq, &s.wk, &s.wv, &s.wn, &s.wh, &s.gate, &s.up};
    size_t n_in[] = {(size_t)T * H, (size_t)H * H, (size_t)KV * H, (size_t)KV * H, H, (size_t)V * H, (size_t)T * F, (size_t)T * F};
    for (int i = 0; i < 8; i++) {
        gh_fill(&g, h, n_in[i], i == 4 ? 1.0f : 0.5f, ct);
        *in[i] = gh_upload(k, h, n_in[i], ct);
    }
    int32_t tgt[T];
    for (int t = 0; t < T; t++) tgt[t] = t % 9 == 4 ? -1 : (int32_t)rng_below(&g, (uint64_t)V);
    s.tgt = gh_upload_ints(k, tgt, T);
    span ref = s;
    outputs(&s, ct);
    outputs(&ref, ct);
    wp_kern_replay *r = kern_replay_create(k);
    const wp_replay_how want[5] = {WP_REPLAY_EAGER, WP_REPLAY_RECORDED, WP_REPLAY_REPLAYED, WP_REPLAY_REPLAYED,
                                   WP_REPLAY_REPLAYED};
    for (int run = 0; run < 5; run++) {
        gh_fill(&g, h, (size_t)T * H, 1.0f, ct); /* new contents, same buffers: the same key */
        void *fresh = gh_upload(k, h, (size_t)T * H, ct);
        kern_copy(k, s.x, fresh, (size_t)T * H * wp_dtype_size(ct));
        kern_free(k, fresh);
        wp_replay_how how;
        const char *why;
        wp_result rc = kern_replay_run(k, r, work, &s, &how, &why);
        work(&ref);
        kern_sync(k);
        gh_ok(k, name);
        check_say(rc == 0 && how == want[run], "%s run %d: how %d (want %d)%s%s", name, run, (int)how, (int)want[run],
                  why[0] ? ", eager: " : "", why);
        if (how != want[run] && kern_notes(k)[0]) printf("     notes: %s\n", kern_notes(k));
        char what[96];
        snprintf(what, sizeof what, "%s run %d against the direct calls", name, run);
        same(&s, &ref, ct, what);
    }
    kern_replay_destroy(k, r);
    free(h);
    gh_close(&p); /* the buffers go with the process */
}

int main(void) {
    int rc = gh_require_gpu("gpu/replay");
    if (rc) return rc;
    run_case(WP_BF16, WP_ATTN_AUTO, "bf16, attention auto (cuDNN where built)");
    run_case(WP_F16, WP_ATTN_NATIVE, "fp16, attention native");
    return check_result("gpu/replay");
}
