/* AdamW against an fp64 transcription of the update in kernels.h, over several steps with
 * gradient scaling and weight decay; the working copy written in each wire dtype must be the
 * fp32 master rounded once. */
#include <string.h>

#include "cpu.h"
#include "kt.h"

#define TOL (32 * KT_U32) /* norm-wise, after 5 steps of a few fp32 operations each */

typedef struct {
    float lr, beta1, beta2, eps, wd, grad_scale;
} hyper;

static void reference_step(double *master, double *m, double *v, const float *grad, size_t n, const hyper *h, int t) {
    double bc1 = 1 - pow(h->beta1, t), bc2 = 1 - pow(h->beta2, t);
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * h->grad_scale;
        m[i] = h->beta1 * m[i] + (1 - (double)h->beta1) * g;
        v[i] = h->beta2 * v[i] + (1 - (double)h->beta2) * g * g;
        master[i] -= h->lr * (m[i] / bc1 / (sqrt(v[i] / bc2) + h->eps) + h->wd * master[i]);
    }
}

static void run_case(wp_kern *k, kt_rng *r, size_t n, wp_dtype wtype) {
    hyper h = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f};
    float *master = kt_floats(n), *m = kt_floats(n), *v = kt_floats(n), *grad = kt_floats(n);
    void *w = kt_alloc(n * wp_dtype_size(wtype));
    double *rm = kt_doubles(n), *rmo = kt_doubles(n), *rv = kt_doubles(n);
    kt_fill(r, master, n, -1, 1);
    kt_to_double(rm, master, n);
    for (int t = 1; t <= 5; t++) {
        kt_fill(r, grad, n, -2, 2);
        float bc1 = 1.0f - powf(h.beta1, (float)t), bc2 = 1.0f - powf(h.beta2, (float)t);
        kern_adamw(k, master, m, v, grad, h.grad_scale, w, wtype, n, h.lr, h.beta1, h.beta2, h.eps, h.wd, bc1, bc2);
        reference_step(rm, rmo, rv, grad, n, &h, t);
    }
    double e_master = kt_rel(master, rm, n), e_m = kt_rel(m, rmo, n), e_v = kt_rel(v, rv, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = wp_round_to(master[i], wtype), got;
        if (wtype == WP_F32) got = ((float *)w)[i];
        else if (wtype == WP_F16) got = wp_f16_to_f32(((uint16_t *)w)[i]);
        else got = wp_bf16_to_f32(((uint16_t *)w)[i]);
        bad += got != want;
    }
    check_say(e_master <= TOL && e_m <= TOL && e_v <= TOL && bad == 0,
              "adamw n=%zu w_out %s: rel err master %.2e m %.2e v %.2e (tol %.1e), w_out = rounded master (%zu differ)",
              n, wp_dtype_name(wtype), e_master, e_m, e_v, TOL, bad);
    kt_no_error(k, "adamw");
    free(master), free(m), free(v), free(grad), free(w), free(rm), free(rmo), free(rv);
}

/* w_out NULL: the same master and moments, bit for bit, and nothing written (the runtime's UPDATE,
 * whose working copy LOAD makes). */
static void run_no_copy(wp_kern *k, kt_rng *r, size_t n) {
    float *st[2][3], *grad = kt_floats(n);
    for (int s = 0; s < 2; s++)
        for (int b = 0; b < 3; b++) st[s][b] = kt_floats(n);
    kt_fill(r, st[0][0], n, -1, 1);
    memcpy(st[1][0], st[0][0], n * sizeof(float));
    uint16_t *w = kt_alloc(n * 2);
    for (int t = 1; t <= 3; t++) {
        kt_fill(r, grad, n, -2, 2);
        float bc1 = 1.0f - powf(0.9f, (float)t), bc2 = 1.0f - powf(0.95f, (float)t);
        kern_adamw(k, st[0][0], st[0][1], st[0][2], grad, 0.5f, w, WP_BF16, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2);
        kern_adamw(k, st[1][0], st[1][1], st[1][2], grad, 0.5f, NULL, WP_BF16, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1,
                   bc2);
    }
    bool same = true;
    for (int b = 0; b < 3; b++) same &= memcmp(st[0][b], st[1][b], n * sizeof(float)) == 0;
    check_say(same, "adamw n=%zu w_out NULL: master and moments equal the run with a working copy bit for bit", n);
    kt_no_error(k, "adamw without a working copy");
    for (int s = 0; s < 2; s++)
        for (int b = 0; b < 3; b++) free(st[s][b]);
    free(grad), free(w);
}

int main(void) {
    kt_rng r = {31};
    wp_kern *k = kt_cpu(2);
    run_case(k, &r, 1, WP_F32);
    run_case(k, &r, 1001, WP_F16);
    run_case(k, &r, 70003, WP_BF16);
    run_case(k, &r, 5000, WP_F32);
    /* the working copy through non-temporal stores (written so when larger than the last-level
     * cache): a context that streams every output, the same checks */
    wp_kern *ks = kt_cpu(2);
    cpu_of(ks)->stream_min = 0;
    run_case(ks, &r, 1, WP_F16);
    run_case(ks, &r, 1001, WP_F16);
    run_case(ks, &r, 70003, WP_BF16);
    run_case(ks, &r, 5003, WP_F32);
    kern_destroy(ks);
    run_no_copy(k, &r, 70003);
    kern_destroy(k);
    return check_result("kernels/adamw");
}
