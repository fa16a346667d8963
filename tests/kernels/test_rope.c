/* RoPE (Hugging Face rotate-half) against an fp64 reference: forward at small and large
 * positions, backward against central differences of L = sum(rope(x) * R), and the inverse
 * property bwd(fwd(x)) = x. Calls alternate between parameter sets, so a stale cos/sin
 * cache would show. Llama 3.x frequency scaling (rope_scaling type llama3) is checked against
 * the formula of transformers' _compute_llama3_parameters written out here again in fp64, with
 * parameters that put pairs in all three bands (kept, divided by factor, smoothed). Positions
 * restarting per document (plo, --doc-positions restart) are checked the same way, in a segment
 * (pos0 > 0) whose first document began in the previous one, and a plo past its token is refused. */
#include "kt.h"

#define TOL_FWD (16 * KT_U32)
#define TOL_BWD (64 * KT_U32)
#define FD_STEP 1e-3

typedef struct {
    int b, s, nh, hd, pos0;
    double theta;
    double *x, *R;
    const wp_rope_scaling *sc; /* NULL: plain */
    const int32_t *plo;        /* NULL: positions pos0 + t; else pos0 + t - plo[row] */
} ref_ctx;

/* inv_freq of pair i, as transformers computes it (torch.where over the three bands). */
static double ref_inv_freq(const ref_ctx *c, int i) {
    double inv = 1.0 / pow(c->theta, (2.0 * i) / c->hd);
    if (!c->sc) return inv;
    double factor = c->sc->factor, lo = c->sc->low_freq_factor, hi = c->sc->high_freq_factor;
    double old_ctx = c->sc->original_max_pos;
    double low_freq_wavelen = old_ctx / lo, high_freq_wavelen = old_ctx / hi;
    double wavelen = 2 * M_PI / inv;
    double llama = wavelen > low_freq_wavelen ? inv / factor : inv;
    double smooth = (old_ctx / wavelen - lo) / (hi - lo);
    double smoothed = (1 - smooth) * llama / factor + smooth * llama;
    bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    return medium ? smoothed : llama;
}

static void ref_forward(const ref_ctx *c, double *y) {
    int half = c->hd / 2, width = c->nh * c->hd;
    for (int row = 0; row < c->b * c->s; row++)
        for (int hh = 0; hh < c->nh; hh++)
            for (int i = 0; i < half; i++) {
                double angle = (c->pos0 + row % c->s - (c->plo ? c->plo[row] : 0)) * ref_inv_freq(c, i);
                size_t a = (size_t)row * width + (size_t)hh * c->hd + i, b = a + half;
                y[a] = c->x[a] * cos(angle) - c->x[b] * sin(angle);
                y[b] = c->x[b] * cos(angle) + c->x[a] * sin(angle);
            }
}

static double ref_loss(void *ctx) {
    const ref_ctx *c = ctx;
    size_t n = (size_t)c->b * c->s * c->nh * c->hd;
    double *y = kt_doubles(n), loss = 0;
    ref_forward(c, y);
    for (size_t i = 0; i < n; i++) loss += y[i] * c->R[i];
    free(y);
    return loss;
}

static void run_docs(wp_kern *k, kt_rng *r, int b, int s, int nh, int hd, int pos0, float theta,
                     const wp_rope_scaling *sc, const int32_t *plo) {
    size_t n = (size_t)b * s * nh * hd;
    float *x = kt_floats(n), *y = kt_floats(n), *R = kt_floats(n), *dx = kt_floats(n);
    kt_fill(r, x, n, -1, 1);
    kt_fill(r, R, n, -1, 1);
    ref_ctx c = {b, s, nh, hd, pos0, theta, kt_doubles(n), kt_doubles(n), sc, plo};
    kt_to_double(c.x, x, n), kt_to_double(c.R, R, n);
    double *y_ref = kt_doubles(n), *g = kt_doubles(n);

    memcpy(y, x, n * sizeof *y);
    kern_rope_fwd_scaled(k, y, b, s, nh, hd, pos0, theta, sc, plo);
    ref_forward(&c, y_ref);
    double e_fwd = kt_rel(y, y_ref, n);
    check_say(e_fwd <= TOL_FWD, "rope fwd b=%d s=%d nh=%d hd=%d pos0=%d theta=%g%s%s: rel err %.2e (tol %.1e)", b, s,
              nh, hd, pos0, theta, sc ? " llama3" : "", plo ? " restarting" : "", e_fwd, TOL_FWD);

    memcpy(dx, R, n * sizeof *dx);
    kern_rope_bwd_scaled(k, dx, b, s, nh, hd, pos0, theta, sc, plo);
    kt_fd_grad(g, c.x, n, FD_STEP, ref_loss, &c);
    double e_bwd = kt_rel(dx, g, n);
    check_say(e_bwd <= TOL_BWD, "rope bwd b=%d s=%d nh=%d hd=%d pos0=%d: rel err vs finite differences %.2e (tol %.1e)",
              b, s, nh, hd, pos0, e_bwd, TOL_BWD);

    kern_rope_bwd_scaled(k, y, b, s, nh, hd, pos0, theta, sc, plo);
    double *xd = kt_doubles(n);
    kt_to_double(xd, x, n);
    double e_inv = kt_rel(y, xd, n);
    check_say(e_inv <= TOL_BWD, "rope bwd(fwd(x)) = x b=%d s=%d: rel err %.2e (tol %.1e)", b, s, e_inv, TOL_BWD);
    kt_no_error(k, "rope");
    free(x), free(y), free(R), free(dx), free(c.x), free(c.R), free(y_ref), free(g), free(xd);
}

static void run_scaled(wp_kern *k, kt_rng *r, int b, int s, int nh, int hd, int pos0, float theta,
                       const wp_rope_scaling *sc) {
    run_docs(k, r, b, s, nh, hd, pos0, theta, sc, NULL);
}

static void run_case(wp_kern *k, kt_rng *r, int b, int s, int nh, int hd, int pos0, float theta) {
    run_scaled(k, r, b, s, nh, hd, pos0, theta, NULL);
}

/* Documents restarting their positions: two sequences of 7 tokens in a segment at pos0 = 20; the
 * first continues a document that began at 13 and starts new ones at 23 and 25, the second
 * starts at its segment's first token and again at 26. The rotation must differ from the
 * continuing positions' (else the case proves nothing), and a plo past its token is refused. */
static void check_restart(wp_kern *k, kt_rng *r) {
    const int32_t plo[14] = {13, 13, 13, 23, 23, 25, 25, 20, 20, 20, 20, 20, 20, 26};
    wp_rope_scaling sc = {8, 1, 4, 256};
    run_docs(k, r, 2, 7, 3, 16, 20, 10000.0f, NULL, plo);
    run_docs(k, r, 2, 7, 3, 16, 20, 10000.0f, &sc, plo);
    int32_t whole[6] = {0, 0, 2, 2, 2, 5};
    run_docs(k, r, 1, 6, 2, 8, 0, 10000.0f, NULL, whole);
    float x[12 * 2], y[12 * 2];
    for (int i = 0; i < 24; i++) x[i] = y[i] = (float)(i % 5) - 2.0f;
    int32_t starts_at_zero[3] = {0, 0, 0};
    kern_rope_fwd_scaled(k, y, 1, 3, 1, 8, 20, 10000.0f, NULL, starts_at_zero); /* positions 20, 21, 22 */
    kern_rope_fwd(k, x, 1, 3, 1, 8, 20, 10000.0f);
    check_say(memcmp(x, y, 3 * 8 * sizeof *x) == 0, "rope with plo all 0 at pos0 20 differs from plain pos0 20");
    int32_t restart[3] = {20, 20, 20};
    for (int i = 0; i < 24; i++) y[i] = (float)(i % 5) - 2.0f;
    kern_rope_fwd_scaled(k, y, 1, 3, 1, 8, 20, 10000.0f, NULL, restart); /* positions 0, 1, 2 */
    check_say(memcmp(x, y, 3 * 8 * sizeof *x) != 0, "rope with restarting positions equals the continuing ones");
    kt_no_error(k, "rope restart");
    int32_t late[3] = {20, 22, 21}; /* the second token's document would start after it */
    kern_rope_fwd_scaled(k, y, 1, 3, 1, 8, 20, 10000.0f, NULL, late);
    const char *e = kern_error(k);
    check_say(e && strstr(e, "plo[1] = 22"), "rope: a plo past its token not refused by name (%s)", e ? e : "no error");
}

/* The three bands are all populated: with theta 10000, hd 16 the wavelengths are 2 pi 10000^(i/8)
 * = 6.3, 20, 63, 199, 628, ...; original 256 with factors 1 and 4 keeps those below 64, divides
 * those above 256 and smooths 199. The scaled reference must differ from the plain one, or the
 * scaled case would prove nothing. */
static void check_bands(void) {
    wp_rope_scaling sc = {8, 1, 4, 256};
    ref_ctx plain = {.hd = 16, .theta = 10000}, scaled = plain;
    scaled.sc = &sc;
    int kept = 0, divided = 0, smoothed = 0;
    for (int i = 0; i < 8; i++) {
        double a = ref_inv_freq(&plain, i), b = ref_inv_freq(&scaled, i);
        kept += a == b;
        divided += fabs(b - a / 8) <= 1e-15 * a;
        smoothed += a != b && fabs(b - a / 8) > 1e-15 * a;
    }
    check_say(kept == 3 && smoothed == 1 && divided == 4, "llama3 bands: %d kept, %d smoothed, %d divided (3, 1, 4 expected)",
              kept, smoothed, divided);
}

int main(void) {
    kt_rng r = {5};
    wp_kern *k = kt_cpu(2);
    run_case(k, &r, 2, 7, 3, 6, 0, 10000.0f);
    run_case(k, &r, 1, 5, 2, 8, 100, 500000.0f);
    run_case(k, &r, 3, 9, 4, 2, 0, 10000.0f);
    run_case(k, &r, 1, 3, 2, 64, 16381, 10000.0f); /* long-context positions */
    run_case(k, &r, 2, 7, 3, 6, 0, 10000.0f);      /* back to the first key: cache refilled */
    check_bands();
    wp_rope_scaling sc = {8, 1, 4, 256}, sc2 = {32, 1, 4, 8192};
    run_scaled(k, &r, 2, 9, 3, 16, 0, 10000.0f, &sc);
    run_case(k, &r, 2, 9, 3, 16, 0, 10000.0f);             /* same shape unscaled: the cache must notice */
    run_scaled(k, &r, 1, 5, 2, 16, 300, 10000.0f, &sc);
    run_scaled(k, &r, 1, 3, 2, 64, 16381, 500000.0f, &sc2); /* Llama 3.2's scaling at long positions */
    check_restart(k, &r); /* last: it leaves the context failed */
    kern_destroy(k);
    return check_result("kernels/rope");
}
