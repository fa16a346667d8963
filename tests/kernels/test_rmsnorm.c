/* RMSNorm against an fp64 reference: forward (y and rstd), and both backward kernels against
 * central differences of L = sum(y * R) in fp64, element by element. Also the accumulate flag
 * and a bf16 weight gradient rounded once. */
#include "kt.h"

/* Tolerances, norm-wise relative, as multiples of the fp32 unit roundoff u = 2^-24. */
#define TOL_FWD (64 * KT_U32)
#define TOL_BWD (1024 * KT_U32)
#define FD_STEP 1e-4

typedef struct {
    int T, h;
    double eps;
    double *x, *w, *R;
} ref_ctx;

static void ref_forward(const ref_ctx *c, double *y, double *rstd) {
    for (int t = 0; t < c->T; t++) {
        double ss = 0;
        for (int j = 0; j < c->h; j++) ss += c->x[t * c->h + j] * c->x[t * c->h + j];
        double r = 1.0 / sqrt(ss / c->h + c->eps);
        if (rstd) rstd[t] = r;
        for (int j = 0; j < c->h; j++) y[t * c->h + j] = c->x[t * c->h + j] * r * c->w[j];
    }
}

static double ref_loss(void *ctx) {
    const ref_ctx *c = ctx;
    size_t n = (size_t)c->T * c->h;
    double *y = kt_doubles(n), loss = 0;
    ref_forward(c, y, NULL);
    for (size_t i = 0; i < n; i++) loss += y[i] * c->R[i];
    free(y);
    return loss;
}

static void run_case(wp_kern *k, kt_rng *r, int T, int h) {
    size_t n = (size_t)T * h;
    float eps = 1e-5f;
    float *x = kt_floats(n), *w = kt_floats(h), *R = kt_floats(n), *y = kt_floats(n), *rstd = kt_floats(T);
    float *dx = kt_floats(n), *dx0 = kt_floats(n), *dxa = kt_floats(n), *dw = kt_floats(h);
    kt_fill(r, x, n, -2, 2);
    kt_fill(r, w, h, 0.5f, 1.5f);
    kt_fill(r, R, n, -1, 1);
    kt_fill(r, dx0, n, -1, 1);
    ref_ctx c = {T, h, eps, kt_doubles(n), kt_doubles(h), kt_doubles(n)};
    kt_to_double(c.x, x, n), kt_to_double(c.w, w, h), kt_to_double(c.R, R, n);
    double *y_ref = kt_doubles(n), *rstd_ref = kt_doubles(T), *g = kt_doubles(n), *gw = kt_doubles(h);

    kern_rmsnorm_fwd(k, y, rstd, x, w, T, h, eps);
    ref_forward(&c, y_ref, rstd_ref);
    double e_y = kt_rel(y, y_ref, n), e_r = kt_rel(rstd, rstd_ref, T);
    check_say(e_y <= TOL_FWD && e_r <= TOL_FWD, "rmsnorm fwd T=%d h=%d: rel err y %.2e rstd %.2e (tol %.1e)", T, h, e_y,
              e_r, TOL_FWD);

    kern_rmsnorm_bwd_input(k, dx, false, R, x, w, rstd, T, h);
    kt_fd_grad(g, c.x, n, FD_STEP, ref_loss, &c);
    double e_dx = kt_rel(dx, g, n);
    check_say(e_dx <= TOL_BWD, "rmsnorm bwd input T=%d h=%d: rel err vs finite differences %.2e (tol %.1e)", T, h, e_dx,
              TOL_BWD);
    memcpy(dxa, dx0, n * sizeof *dxa);
    kern_rmsnorm_bwd_input(k, dxa, true, R, x, w, rstd, T, h);
    int acc_bad = 0;
    for (size_t i = 0; i < n; i++) acc_bad += dxa[i] != dx0[i] + dx[i];
    check_say(acc_bad == 0, "rmsnorm bwd input T=%d h=%d: accumulate adds exactly the same gradient (%d differ)", T, h,
              acc_bad);

    kern_rmsnorm_bwd_weight(k, dw, WP_F32, R, x, rstd, T, h);
    kt_fd_grad(gw, c.w, h, FD_STEP, ref_loss, &c);
    double e_dw = kt_rel(dw, gw, h);
    check_say(e_dw <= TOL_BWD, "rmsnorm bwd weight T=%d h=%d: rel err vs finite differences %.2e (tol %.1e)", T, h, e_dw,
              TOL_BWD);

    /* bf16 gradient: bf16(start + fp32 sum), one rounding; the fp32 kernel from the same start
     * gives the fp32 value that must round to it. */
    uint16_t *dwb = kt_alloc(h * sizeof *dwb);
    float *dwf = kt_floats(h);
    for (int j = 0; j < h; j++) dwb[j] = wp_f32_to_bf16(kt_uniform(r, -1, 1)), dwf[j] = wp_bf16_to_f32(dwb[j]);
    kern_rmsnorm_bwd_weight(k, dwb, WP_BF16, R, x, rstd, T, h);
    kern_rmsnorm_bwd_weight(k, dwf, WP_F32, R, x, rstd, T, h);
    int bf_bad = 0;
    for (int j = 0; j < h; j++) bf_bad += dwb[j] != wp_f32_to_bf16(dwf[j]);
    check_say(bf_bad == 0, "rmsnorm bwd weight T=%d h=%d: bf16 gradient is the fp32 one rounded once (%d differ)", T, h,
              bf_bad);
    kt_no_error(k, "rmsnorm");

    free(x), free(w), free(R), free(y), free(rstd), free(dx), free(dx0), free(dxa), free(dw), free(dwb), free(dwf);
    free(c.x), free(c.w), free(c.R), free(y_ref), free(rstd_ref), free(g), free(gw);
}

int main(void) {
    kt_rng r = {11};
    wp_kern *k = kt_cpu(2);
    int shapes[][2] = {{7, 12}, {1, 5}, {33, 64}, {5, 300}, {40, 33}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) run_case(k, &r, shapes[i][0], shapes[i][1]);
    kern_destroy(k);
    return check_result("kernels/rmsnorm");
}
