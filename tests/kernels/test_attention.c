/* Causal grouped-query attention against an fp64 reference that builds the whole sq x skv
 * score matrix: forward output and lse, then dq/dk/dv against central differences of
 * L = sum(O * R), element by element at small sizes and along random directions when several
 * 64-wide tiles are involved (queries the last sq of skv positions). Determinism: the backward
 * twice, and with 1, 2 and 3 threads (the fused and the two-pass schedules), gives the same
 * bits. */
#include "kt.h"

#define TOL_FWD (64 * KT_U32)
#define TOL_BWD (1024 * KT_U32)
#define TOL_DIR 1e-3
#define FD_STEP 1e-4

typedef struct {
    int b, sq, skv, nh, nkv, hd;
    double *q, *k, *v, *R;
} ref_ctx;

typedef struct {
    size_t nq, nkv; /* elements of q (and o), and of k (and v) */
} sizes;

static sizes sizes_of(int b, int sq, int skv, int nh, int nkv, int hd) {
    sizes s = {(size_t)b * sq * nh * hd, (size_t)b * skv * nkv * hd};
    return s;
}

/* O and lse with an explicit score matrix; returns sum(O * R). */
static double ref_forward(const ref_ctx *c, double *o, double *lse) {
    int hd = c->hd, rep = c->nh / c->nkv;
    double *S = kt_doubles((size_t)c->sq * c->skv), loss = 0, scale = 1.0 / sqrt(hd);
    for (int bi = 0; bi < c->b; bi++)
        for (int j = 0; j < c->nh; j++) {
            int g = j / rep;
            for (int i = 0; i < c->sq; i++) {
                int pos = c->skv - c->sq + i;
                const double *qi = c->q + ((size_t)(bi * c->sq + i) * c->nh + j) * hd;
                double mx = -INFINITY, sum = 0;
                for (int kk = 0; kk <= pos; kk++) {
                    const double *kr = c->k + ((size_t)(bi * c->skv + kk) * c->nkv + g) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += qi[d] * kr[d];
                    S[(size_t)i * c->skv + kk] = s * scale;
                    mx = s * scale > mx ? s * scale : mx;
                }
                double *P = S + (size_t)i * c->skv;
                for (int kk = 0; kk <= pos; kk++) sum += exp(P[kk] - mx);
                for (int kk = 0; kk <= pos; kk++) P[kk] = exp(P[kk] - mx) / sum;
                if (lse) lse[((size_t)bi * c->nh + j) * c->sq + i] = mx + log(sum);
                for (int d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int kk = 0; kk <= pos; kk++) acc += P[kk] * c->v[((size_t)(bi * c->skv + kk) * c->nkv + g) * hd + d];
                    size_t at = ((size_t)(bi * c->sq + i) * c->nh + j) * hd + d;
                    if (o) o[at] = acc;
                    loss += acc * c->R[at];
                }
            }
        }
    free(S);
    return loss;
}

static double ref_loss(void *ctx) { return ref_forward(ctx, NULL, NULL); }

typedef struct {
    float *q, *k, *v, *o, *lse, *R, *dq, *dk, *dv;
} bufs;

static bufs make(kt_rng *r, sizes n, int b, int nh, int sq) {
    bufs x = {kt_floats(n.nq), kt_floats(n.nkv), kt_floats(n.nkv), kt_floats(n.nq), kt_floats((size_t)b * nh * sq),
              kt_floats(n.nq), kt_floats(n.nq), kt_floats(n.nkv), kt_floats(n.nkv)};
    kt_fill(r, x.q, n.nq, -2, 2); /* scores up to a few units: peaked and flat rows both occur */
    kt_fill(r, x.k, n.nkv, -2, 2);
    kt_fill(r, x.v, n.nkv, -1, 1);
    kt_fill(r, x.R, n.nq, -1, 1);
    return x;
}

static void release(bufs *x) {
    free(x->q), free(x->k), free(x->v), free(x->o), free(x->lse), free(x->R), free(x->dq), free(x->dk), free(x->dv);
}

static ref_ctx ref_of(const bufs *x, sizes n, int b, int sq, int skv, int nh, int nkv, int hd) {
    ref_ctx c = {b, sq, skv, nh, nkv, hd, kt_doubles(n.nq), kt_doubles(n.nkv), kt_doubles(n.nkv), kt_doubles(n.nq)};
    kt_to_double(c.q, x->q, n.nq), kt_to_double(c.k, x->k, n.nkv), kt_to_double(c.v, x->v, n.nkv);
    kt_to_double(c.R, x->R, n.nq);
    return c;
}

static void free_ref(ref_ctx *c) { free(c->q), free(c->k), free(c->v), free(c->R); }

static void run_kernels(wp_kern *k, bufs *x, int b, int sq, int skv, int nh, int nkv, int hd) {
    kern_attention_fwd(k, x->o, x->lse, x->q, x->k, x->v, b, sq, skv, nh, nkv, hd, NULL);
    kern_attention_bwd(k, x->dq, x->dk, x->dv, x->R, x->q, x->k, x->v, x->o, x->lse, b, sq, skv, nh, nkv, hd, NULL);
    kt_no_error(k, "attention");
}

static void check_forward(const bufs *x, const ref_ctx *c, sizes n, const char *what) {
    double *o = kt_doubles(n.nq), *lse = kt_doubles((size_t)c->b * c->nh * c->sq);
    ref_forward(c, o, lse);
    double e_o = kt_rel(x->o, o, n.nq), e_l = kt_rel(x->lse, lse, (size_t)c->b * c->nh * c->sq);
    check_say(e_o <= TOL_FWD && e_l <= TOL_FWD, "attention fwd %s: rel err O %.2e lse %.2e (tol %.1e)", what, e_o, e_l,
              TOL_FWD);
    free(o), free(lse);
}

static void elementwise_case(wp_kern *k, kt_rng *r, int b, int sq, int skv, int nh, int nkv, int hd) {
    sizes n = sizes_of(b, sq, skv, nh, nkv, hd);
    bufs x = make(r, n, b, nh, sq);
    char what[96];
    snprintf(what, sizeof what, "b=%d sq=%d skv=%d nh=%d nkv=%d hd=%d", b, sq, skv, nh, nkv, hd);
    run_kernels(k, &x, b, sq, skv, nh, nkv, hd);
    ref_ctx c = ref_of(&x, n, b, sq, skv, nh, nkv, hd);
    check_forward(&x, &c, n, what);
    double *gq = kt_doubles(n.nq), *gk = kt_doubles(n.nkv), *gv = kt_doubles(n.nkv);
    kt_fd_grad(gq, c.q, n.nq, FD_STEP, ref_loss, &c);
    kt_fd_grad(gk, c.k, n.nkv, FD_STEP, ref_loss, &c);
    kt_fd_grad(gv, c.v, n.nkv, FD_STEP, ref_loss, &c);
    double eq = kt_rel(x.dq, gq, n.nq), ek = kt_rel(x.dk, gk, n.nkv), ev = kt_rel(x.dv, gv, n.nkv);
    check_say(eq <= TOL_BWD && ek <= TOL_BWD && ev <= TOL_BWD,
              "attention bwd %s: rel err vs finite differences dq %.2e dk %.2e dv %.2e (tol %.1e)", what, eq, ek, ev,
              TOL_BWD);
    free(gq), free(gk), free(gv);
    free_ref(&c);
    release(&x);
}

/* Worst |fd - g.d| / (||g|| ||d|| / sqrt(n)) over three random directions. */
static double direction_error(const float *g, double *p, size_t n, kt_rng *r, ref_ctx *c) {
    double *d = kt_doubles(n), worst = 0;
    for (int rep = 0; rep < 3; rep++) {
        double gn = 0, dn = 0;
        for (size_t i = 0; i < n; i++) d[i] = kt_normal(r), gn += (double)g[i] * g[i], dn += d[i] * d[i];
        double fd = kt_fd_dir(p, d, n, FD_STEP, ref_loss, c), e = fabs(fd - kt_dot_fd(g, d, n)) / sqrt(gn * dn / n);
        if (e > worst) worst = e;
    }
    free(d);
    return worst;
}

static void direction_case(wp_kern *k, kt_rng *r, int b, int sq, int skv, int nh, int nkv, int hd) {
    sizes n = sizes_of(b, sq, skv, nh, nkv, hd);
    bufs x = make(r, n, b, nh, sq);
    char what[96];
    snprintf(what, sizeof what, "b=%d sq=%d skv=%d nh=%d nkv=%d hd=%d", b, sq, skv, nh, nkv, hd);
    run_kernels(k, &x, b, sq, skv, nh, nkv, hd);
    ref_ctx c = ref_of(&x, n, b, sq, skv, nh, nkv, hd);
    check_forward(&x, &c, n, what);
    double eq = direction_error(x.dq, c.q, n.nq, r, &c), ek = direction_error(x.dk, c.k, n.nkv, r, &c),
           ev = direction_error(x.dv, c.v, n.nkv, r, &c);
    check_say(eq <= TOL_DIR && ek <= TOL_DIR && ev <= TOL_DIR,
              "attention bwd %s: directional err dq %.2e dk %.2e dv %.2e (tol %.0e)", what, eq, ek, ev, TOL_DIR);
    free_ref(&c);
    release(&x);
}

static void determinism_case(kt_rng *r, int b, int sq, int skv, int nh, int nkv, int hd) {
    sizes n = sizes_of(b, sq, skv, nh, nkv, hd);
    bufs x[3];
    wp_kern *k[3];
    for (int i = 0; i < 3; i++) {
        k[i] = kt_cpu(i + 1);
        x[i] = make(r, n, b, nh, sq);
    }
    for (int i = 1; i < 3; i++) { /* same inputs everywhere */
        memcpy(x[i].q, x[0].q, n.nq * sizeof(float)), memcpy(x[i].R, x[0].R, n.nq * sizeof(float));
        memcpy(x[i].k, x[0].k, n.nkv * sizeof(float)), memcpy(x[i].v, x[0].v, n.nkv * sizeof(float));
    }
    for (int i = 0; i < 3; i++) run_kernels(k[i], &x[i], b, sq, skv, nh, nkv, hd);
    float *dq_again = kt_floats(n.nq), *dk_again = kt_floats(n.nkv), *dv_again = kt_floats(n.nkv);
    kern_attention_bwd(k[1], dq_again, dk_again, dv_again, x[1].R, x[1].q, x[1].k, x[1].v, x[1].o, x[1].lse, b, sq, skv,
                       nh, nkv, hd, NULL);
    bool again = kt_same_bits(dq_again, x[1].dq, n.nq * 4) && kt_same_bits(dk_again, x[1].dk, n.nkv * 4) &&
                 kt_same_bits(dv_again, x[1].dv, n.nkv * 4);
    bool threads = true;
    for (int i = 1; i < 3; i++)
        threads = threads && kt_same_bits(x[i].o, x[0].o, n.nq * 4) && kt_same_bits(x[i].dq, x[0].dq, n.nq * 4) &&
                  kt_same_bits(x[i].dk, x[0].dk, n.nkv * 4) && kt_same_bits(x[i].dv, x[0].dv, n.nkv * 4);
    check_say(again && threads,
              "attention b=%d sq=%d skv=%d nh=%d nkv=%d: bwd twice identical (%s), 1/2/3 threads identical (%s)", b, sq,
              skv, nh, nkv, again ? "yes" : "no", threads ? "yes" : "no");
    for (int i = 0; i < 3; i++) {
        release(&x[i]);
        kern_destroy(k[i]);
    }
    free(dq_again), free(dk_again), free(dv_again);
}

int main(void) {
    kt_rng r = {29};
    wp_kern *k = kt_cpu(2);
    elementwise_case(k, &r, 2, 7, 7, 4, 2, 6);
    elementwise_case(k, &r, 1, 5, 11, 2, 1, 8);   /* sq < skv, all heads share one kv head */
    elementwise_case(k, &r, 1, 1, 1, 1, 1, 3);    /* one token */
    elementwise_case(k, &r, 1, 70, 100, 2, 2, 4); /* two query tiles, two key tiles */
    direction_case(k, &r, 2, 130, 200, 4, 2, 16);
    direction_case(k, &r, 1, 129, 129, 3, 1, 12);
    kern_destroy(k);
    determinism_case(&r, 1, 150, 170, 2, 1, 8);  /* one kv head: threads 2, 3 take the two-pass path */
    determinism_case(&r, 2, 100, 100, 4, 2, 16); /* 4 pairs: all fused */
    return check_result("kernels/attention");
}
