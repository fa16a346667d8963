/* LM head + cross-entropy against fp64: per-token losses and lse, then the backward (dx,
 * dlogits, dw_head accumulated onto a non-zero start) against central differences of
 * L = dloss * sum(losses), element by element at small sizes and along random directions
 * when T spans several row blocks. Some targets are masked (-1). The one-pass fwd_bwd against
 * fwd then bwd: the same bits (it makes the same calls on the same operands). */
#include "kt.h"

#define TOL_FWD (64 * KT_U32)
#define TOL_BWD (1024 * KT_U32)
#define TOL_DIR 1e-3 /* projected error / typical projection; a wrong term gives ~0.1 and up */
#define FD_STEP 1e-4

typedef struct {
    int T, h, V;
    double dloss;
    const int32_t *targets;
    double *x, *w;
} ref_ctx;

/* losses and lse in fp64; returns dloss * sum(losses) */
static double ref_forward(const ref_ctx *c, double *losses, double *lse, double *probs) {
    double total = 0;
    double *logit = kt_doubles(c->V);
    for (int t = 0; t < c->T; t++) {
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < c->V; v++) {
            double acc = 0;
            for (int j = 0; j < c->h; j++) acc += c->x[(size_t)t * c->h + j] * c->w[(size_t)v * c->h + j];
            logit[v] = acc;
            mx = acc > mx ? acc : mx;
        }
        for (int v = 0; v < c->V; v++) sum += exp(logit[v] - mx);
        double l = mx + log(sum), loss = c->targets[t] < 0 ? 0 : l - logit[c->targets[t]];
        if (losses) losses[t] = loss;
        if (lse) lse[t] = l;
        if (probs)
            for (int v = 0; v < c->V; v++) probs[(size_t)t * c->V + v] = exp(logit[v] - l);
        total += loss;
    }
    free(logit);
    return c->dloss * total;
}

static double ref_loss(void *ctx) { return ref_forward(ctx, NULL, NULL, NULL); }

typedef struct {
    float *x, *w, *losses, *lse, *dx, *dlogits, *dw, *dw0;
    int32_t *targets;
} bufs;

static bufs make(kt_rng *r, int T, int h, int V) {
    bufs b = {kt_floats((size_t)T * h), kt_floats((size_t)V * h), kt_floats(T), kt_floats(T), kt_floats((size_t)T * h),
              kt_floats((size_t)T * V), kt_floats((size_t)V * h), kt_floats((size_t)V * h), kt_alloc(T * sizeof(int32_t))};
    kt_fill(r, b.x, (size_t)T * h, -1, 1);
    kt_fill(r, b.w, (size_t)V * h, -0.5f, 0.5f);
    kt_fill(r, b.dw0, (size_t)V * h, -1, 1);
    memcpy(b.dw, b.dw0, (size_t)V * h * sizeof(float));
    for (int t = 0; t < T; t++) b.targets[t] = t % 5 == 3 ? -1 : (int32_t)(kt_next(r) % (unsigned)V);
    return b;
}

static void release(bufs *b) {
    free(b->x), free(b->w), free(b->losses), free(b->lse), free(b->dx), free(b->dlogits), free(b->dw), free(b->dw0);
    free(b->targets);
}

static void check_forward(const ref_ctx *c, const bufs *b) {
    double *losses = kt_doubles(c->T), *lse = kt_doubles(c->T);
    ref_forward(c, losses, lse, NULL);
    double e_l = kt_rel(b->losses, losses, c->T), e_s = kt_rel(b->lse, lse, c->T);
    int masked_bad = 0;
    for (int t = 0; t < c->T; t++) masked_bad += c->targets[t] < 0 && b->losses[t] != 0.0f;
    check_say(e_l <= TOL_FWD && e_s <= TOL_FWD && masked_bad == 0,
              "lmhead fwd T=%d h=%d V=%d: rel err losses %.2e lse %.2e (tol %.1e), masked rows 0", c->T, c->h, c->V, e_l,
              e_s, TOL_FWD);
    free(losses), free(lse);
}

/* dlogits = (softmax - onehot) * dloss, 0 on masked rows. */
static void check_dlogits(const ref_ctx *c, const bufs *b) {
    size_t n = (size_t)c->T * c->V;
    double *p = kt_doubles(n);
    ref_forward(c, NULL, NULL, p);
    for (int t = 0; t < c->T; t++)
        for (int v = 0; v < c->V; v++) {
            double *d = &p[(size_t)t * c->V + v];
            *d = c->targets[t] < 0 ? 0 : (*d - (v == c->targets[t])) * c->dloss;
        }
    double e = kt_rel(b->dlogits, p, n);
    check_say(e <= TOL_FWD, "lmhead bwd T=%d: dlogits_out rel err %.2e (tol %.1e)", c->T, e, TOL_FWD);
    free(p);
}

static void elementwise_case(wp_kern *k, kt_rng *r, int T, int h, int V, float dloss) {
    bufs b = make(r, T, h, V);
    ref_ctx c = {T, h, V, dloss, b.targets, kt_doubles((size_t)T * h), kt_doubles((size_t)V * h)};
    kt_to_double(c.x, b.x, (size_t)T * h), kt_to_double(c.w, b.w, (size_t)V * h);
    kern_lmhead_ce_fwd(k, b.losses, b.lse, b.x, b.w, b.targets, T, h, V);
    check_forward(&c, &b);
    kern_lmhead_ce_bwd(k, b.dx, b.dlogits, b.dw, WP_F32, b.x, b.w, b.targets, b.lse, dloss, T, h, V);
    check_dlogits(&c, &b);
    double *gx = kt_doubles((size_t)T * h), *gw = kt_doubles((size_t)V * h);
    kt_fd_grad(gx, c.x, (size_t)T * h, FD_STEP, ref_loss, &c);
    kt_fd_grad(gw, c.w, (size_t)V * h, FD_STEP, ref_loss, &c);
    for (size_t i = 0; i < (size_t)V * h; i++) b.dw[i] -= b.dw0[i]; /* the kernel added to dw0 */
    double e_x = kt_rel(b.dx, gx, (size_t)T * h), e_w = kt_rel(b.dw, gw, (size_t)V * h);
    check_say(e_x <= TOL_BWD && e_w <= TOL_BWD,
              "lmhead bwd T=%d h=%d V=%d: rel err vs finite differences dx %.2e dw_head %.2e (tol %.1e)", T, h, V, e_x,
              e_w, TOL_BWD);
    kt_no_error(k, "lmhead");
    free(c.x), free(c.w), free(gx), free(gw);
    release(&b);
}

/* Along random directions d: (L(p + eps d) - L(p - eps d)) / 2 eps against g . d, normalised
 * by the typical size of g . d, ||g|| ||d|| / sqrt(n). */
static double direction_error(const float *g, double *p, size_t n, kt_rng *r, ref_ctx *c) {
    double *d = kt_doubles(n), worst = 0, gn = 0, dn = 0;
    for (int rep = 0; rep < 3; rep++) {
        gn = dn = 0;
        for (size_t i = 0; i < n; i++) d[i] = kt_normal(r), gn += (double)g[i] * g[i], dn += d[i] * d[i];
        double fd = kt_fd_dir(p, d, n, FD_STEP, ref_loss, c), e = fabs(fd - kt_dot_fd(g, d, n)) / (sqrt(gn * dn / n));
        if (e > worst) worst = e;
    }
    free(d);
    return worst;
}

static void direction_case(wp_kern *k, kt_rng *r, int T, int h, int V, float dloss) {
    bufs b = make(r, T, h, V);
    ref_ctx c = {T, h, V, dloss, b.targets, kt_doubles((size_t)T * h), kt_doubles((size_t)V * h)};
    kt_to_double(c.x, b.x, (size_t)T * h), kt_to_double(c.w, b.w, (size_t)V * h);
    kern_lmhead_ce_fwd(k, b.losses, b.lse, b.x, b.w, b.targets, T, h, V);
    check_forward(&c, &b);
    memset(b.dw, 0, (size_t)V * h * sizeof(float));
    kern_lmhead_ce_bwd(k, b.dx, b.dlogits, b.dw, WP_F32, b.x, b.w, b.targets, b.lse, dloss, T, h, V);
    check_dlogits(&c, &b);
    double e_x = direction_error(b.dx, c.x, (size_t)T * h, r, &c), e_w = direction_error(b.dw, c.w, (size_t)V * h, r, &c);
    check_say(e_x <= TOL_DIR && e_w <= TOL_DIR,
              "lmhead bwd T=%d h=%d V=%d (several row blocks): directional err dx %.2e dw_head %.2e (tol %.0e)", T, h, V,
              e_x, e_w, TOL_DIR);

    /* bf16 dw_head: the fp32 sum over all row blocks, rounded once: within bf16's unit
     * roundoff (2^-8) of the fp32 result, and without dlogits_out the same dx. */
    uint16_t *dwb = kt_alloc((size_t)V * h * sizeof *dwb);
    float *dx2 = kt_floats((size_t)T * h);
    kern_lmhead_ce_bwd(k, dx2, NULL, dwb, WP_BF16, b.x, b.w, b.targets, b.lse, dloss, T, h, V);
    double worst = 0;
    for (size_t i = 0; i < (size_t)V * h; i++) {
        double e = fabs(wp_bf16_to_f32(dwb[i]) - b.dw[i]) / (0x1p-8 * fabs(b.dw[i]) + 1e-30);
        if (e > worst) worst = e;
    }
    check_say(worst <= 1.0 && kt_same_bits(dx2, b.dx, (size_t)T * h * sizeof *dx2),
              "lmhead bwd T=%d: bf16 dw_head within one rounding of fp32 (%.2f of 2^-8), dx unchanged", T, worst);
    kt_no_error(k, "lmhead");
    free(c.x), free(c.w), free(dwb), free(dx2);
    release(&b);
}

/* fwd_bwd (poisoned outputs, dw_head starting non-zero) against fwd then bwd with an fp32
 * dw_head: losses, dx and dw_head bit for bit, masked rows included. */
static void fused_case(wp_kern *k, kt_rng *r, int T, int h, int V, float dloss) {
    bufs b = make(r, T, h, V);
    kern_lmhead_ce_fwd(k, b.losses, b.lse, b.x, b.w, b.targets, T, h, V);
    kern_lmhead_ce_bwd(k, b.dx, NULL, b.dw, WP_F32, b.x, b.w, b.targets, b.lse, dloss, T, h, V);
    float *losses = kt_floats(T), *dx = kt_floats((size_t)T * h), *dw = kt_floats((size_t)V * h);
    for (int t = 0; t < T; t++) losses[t] = NAN;
    for (size_t i = 0; i < (size_t)T * h; i++) dx[i] = NAN;
    memcpy(dw, b.dw0, (size_t)V * h * sizeof(float));
    kern_lmhead_ce_fwd_bwd(k, losses, dx, dw, b.x, b.w, b.targets, dloss, T, h, V);
    kt_no_error(k, "lmhead fwd_bwd");
    int masked_zero = 1;
    for (int t = 0; t < T; t++)
        if (b.targets[t] < 0)
            for (int j = 0; j < h; j++) masked_zero &= losses[t] == 0 && dx[(size_t)t * h + j] == 0;
    check_say(kt_same_bits(losses, b.losses, T * sizeof(float)) &&
                  kt_same_bits(dx, b.dx, (size_t)T * h * sizeof(float)) &&
                  kt_same_bits(dw, b.dw, (size_t)V * h * sizeof(float)) && masked_zero,
              "lmhead fwd_bwd T=%d h=%d V=%d: losses, dx, dw_head bit-identical to fwd then bwd; masked rows 0", T, h,
              V);
    free(losses), free(dx), free(dw);
    release(&b);
}

int main(void) {
    kt_rng r = {17};
    wp_kern *k = kt_cpu(2);
    elementwise_case(k, &r, 7, 12, 37, 0.37f);
    elementwise_case(k, &r, 1, 3, 5, 1.0f);
    elementwise_case(k, &r, 20, 9, 61, 2.5f);
    direction_case(k, &r, 300, 16, 50, 1.0f / 300);
    direction_case(k, &r, 129, 24, 257, 0.5f);
    fused_case(k, &r, 7, 12, 37, 0.37f);
    fused_case(k, &r, 300, 16, 50, 1.0f / 300);
    kern_destroy(k);
    return check_result("kernels/lmhead");
}
