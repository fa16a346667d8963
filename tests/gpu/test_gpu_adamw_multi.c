/* kern_adamw_multi on CUDA: one launch over many pieces must give the bits of kern_adamw called
 * per piece on the same GPU (the same arithmetic per element), and stay within gpu/elementwise's
 * AdamW bounds of the CPU backend (rel L2 1e-6 for master, m, v; u + 1e-6 for the working copy).
 * Pieces of awkward sizes (1, a block's worth, one over, a large one) with mixed weight decay;
 * three steps; the whole array from a device-side descriptor list, then a run of pieces from
 * the middle of it (first != 0, as optim_step_chunk launches one chunk's pieces). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu_harness.h"

enum { NP = 7, STEPS = 3, MID0 = 2, MIDN = 3 };
static const size_t sizes[NP] = {1, 2048, 2049, 7, 300001, 255, 4096};
static const float decays[NP] = {0.1f, 0.0f, 0.1f, 0.1f, 0.0f, 0.0f, 0.1f};

/* state[b]: master, m, v, grad of all pieces laid end to end (fp32), w: the working copy */
typedef struct {
    float *state[4];
    void *w;
    wp_adamw_piece pieces[NP];
} side;

static void open_side(wp_kern *k, side *s, float *const init[4], size_t total, wp_dtype wtype) {
    for (int b = 0; b < 4; b++) s->state[b] = gh_upload(k, init[b], total, WP_F32);
    s->w = gh_out(k, total * wp_dtype_size(wtype));
    size_t first = 0;
    for (int p = 0; p < NP; p++) {
        s->pieces[p] = (wp_adamw_piece){.master = s->state[0] + first, .m = s->state[1] + first,
                                        .v = s->state[2] + first, .grad = s->state[3] + first,
                                        .w_out = (char *)s->w + first * wp_dtype_size(wtype), .n = sizes[p],
                                        .first = first, .weight_decay = decays[p]};
        first += sizes[p];
    }
}

static void close_side(wp_kern *k, side *s) {
    for (int b = 0; b < 4; b++) kern_free(k, s->state[b]);
    kern_free(k, s->w);
}

static size_t span(const side *s, int p0, int np) {
    return s->pieces[p0 + np - 1].first + s->pieces[p0 + np - 1].n - s->pieces[p0].first;
}

static void check(gh_pair *p, wp_dtype wtype) {
    size_t total = 0;
    for (int i = 0; i < NP; i++) total += sizes[i];
    wp_rng g = rng_seeded(600 + wtype);
    float *init[4];
    for (int b = 0; b < 4; b++) init[b] = gh_floats(total);
    gh_fill(&g, init[0], total, 0.5f, WP_F32);
    gh_fill(&g, init[1], total, 0.01f, WP_F32);
    for (size_t i = 0; i < total; i++) init[2][i] = (float)(1e-4 * rng_uniform(&g)); /* v >= 0 */
    gh_fill(&g, init[3], total, 0.1f, WP_F32);
    side cpu, one, multi; /* the CPU (multi: its per-piece loop), per-piece CUDA calls, one CUDA launch */
    open_side(p->cpu, &cpu, init, total, wtype);
    open_side(p->gpu, &one, init, total, wtype);
    open_side(p->gpu, &multi, init, total, wtype);
    wp_adamw_piece *dev = kern_alloc(p->gpu, sizeof multi.pieces);
    gh_ok(p->gpu, "descriptor allocation");
    kern_to_device(p->gpu, dev, multi.pieces, sizeof multi.pieces); /* uploaded once, used every step */
    const float b1 = 0.9f, b2 = 0.95f, lr = 1e-3f, eps = 1e-8f, gs = 0.5f;
    for (int t = 1; t <= STEPS; t++) {
        const float bc1 = 1 - powf(b1, (float)t), bc2 = 1 - powf(b2, (float)t);
        kern_adamw_multi(p->cpu, cpu.pieces, NP, total, gs, wtype, lr, b1, b2, eps, bc1, bc2);
        for (int i = 0; i < NP; i++) {
            const wp_adamw_piece *q = &one.pieces[i];
            kern_adamw(p->gpu, q->master, q->m, q->v, q->grad, gs, q->w_out, wtype, q->n, lr, b1, b2, eps,
                       q->weight_decay, bc1, bc2);
        }
        kern_adamw_multi(p->gpu, dev, NP, total, gs, wtype, lr, b1, b2, eps, bc1, bc2);
    }
    /* a fourth step on the middle pieces only, from the same descriptor list */
    const float bc1 = 1 - powf(b1, 4), bc2 = 1 - powf(b2, 4);
    for (int i = MID0; i < MID0 + MIDN; i++) {
        const wp_adamw_piece *q = &one.pieces[i];
        kern_adamw(p->gpu, q->master, q->m, q->v, q->grad, gs, q->w_out, wtype, q->n, lr, b1, b2, eps, q->weight_decay,
                   bc1, bc2);
        q = &cpu.pieces[i];
        kern_adamw(p->cpu, q->master, q->m, q->v, q->grad, gs, q->w_out, wtype, q->n, lr, b1, b2, eps, q->weight_decay,
                   bc1, bc2);
    }
    kern_adamw_multi(p->gpu, dev + MID0, MIDN, span(&multi, MID0, MIDN), gs, wtype, lr, b1, b2, eps, bc1, bc2);
    gh_ok(p->gpu, "adamw");
    gh_ok(p->cpu, "cpu adamw");

    const char *names[4] = {"master", "m", "v", "w_out"};
    float *ref = gh_floats(total), *got = gh_floats(total);
    char what[128];
    for (int b = 0; b < 4; b++) {
        const wp_dtype t = b < 3 ? WP_F32 : wtype;
        const size_t bytes = total * wp_dtype_size(t);
        void *x = b < 3 ? (void *)one.state[b] : one.w, *y = b < 3 ? (void *)multi.state[b] : multi.w;
        void *hx = malloc(bytes), *hy = malloc(bytes);
        CHECK(hx && hy, "out of host memory");
        kern_to_host(p->gpu, hx, x, bytes);
        kern_to_host(p->gpu, hy, y, bytes);
        snprintf(what, sizeof what, "adamw_multi %s (w_out %s): bits of the per-piece kernel", names[b], wp_dtype_name(wtype));
        gh_expect_same_bits(what, hx, hy, bytes);
        free(hx), free(hy);
        gh_download(p->cpu, ref, b < 3 ? (void *)cpu.state[b] : cpu.w, total, t);
        gh_download(p->gpu, got, y, total, t);
        snprintf(what, sizeof what, "adamw_multi %s (w_out %s) against the CPU", names[b], wp_dtype_name(wtype));
        gh_expect(what, got, ref, total, b < 3 ? 1e-6 : gh_unit_roundoff(wtype) + 1e-6);
    }
    free(ref), free(got);
    kern_free(p->gpu, dev);
    close_side(p->cpu, &cpu), close_side(p->gpu, &one), close_side(p->gpu, &multi);
    for (int b = 0; b < 4; b++) free(init[b]);
}

int main(void) {
    int rc = gh_require_gpu("gpu/adamw_multi");
    if (rc) return rc;
    gh_pair p;
    gh_open(&p, WP_F32);
    const wp_dtype types[3] = {WP_F32, WP_F16, WP_BF16};
    for (int d = 0; d < 3; d++) check(&p, types[d]);
    gh_close(&p);
    return check_result("gpu/adamw_multi");
}
