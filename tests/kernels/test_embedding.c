/* Embedding: the forward gathers exact rows; the backward (tokens repeat) is held against
 * central differences of L = sum(wte[tokens] * R) in fp64, is deterministic (two runs and
 * 1 vs 4 threads give the same bits), and a bf16 gradient is rounded once per row. */
#include "kt.h"

#define TOL_BWD (64 * KT_U32)
#define FD_STEP 1e-3

typedef struct {
    int T, h;
    const int32_t *tokens;
    double *wte, *R;
} ref_ctx;

static double ref_loss(void *ctx) {
    const ref_ctx *c = ctx;
    double loss = 0;
    for (int t = 0; t < c->T; t++)
        for (int j = 0; j < c->h; j++) loss += c->wte[(size_t)c->tokens[t] * c->h + j] * c->R[(size_t)t * c->h + j];
    return loss;
}

static void run_case(wp_kern *k, wp_kern *k4, kt_rng *r, int T, int h, int V) {
    size_t nw = (size_t)V * h, ny = (size_t)T * h;
    int32_t *tokens = kt_alloc(T * sizeof *tokens);
    for (int t = 0; t < T; t++) tokens[t] = (int32_t)(kt_next(r) % (unsigned)(V < 8 ? V : V / 4)); /* repeats */
    float *wte = kt_floats(nw), *y = kt_floats(ny), *R = kt_floats(ny);
    float *dw = kt_floats(nw), *dw2 = kt_floats(nw), *dw4 = kt_floats(nw);
    kt_fill(r, wte, nw, -1, 1);
    kt_fill(r, R, ny, -1, 1);

    kern_embedding_fwd(k, y, tokens, wte, T, h);
    int fwd_bad = 0;
    for (int t = 0; t < T; t++) fwd_bad += memcmp(y + (size_t)t * h, wte + (size_t)tokens[t] * h, h * sizeof *y) != 0;
    check_say(fwd_bad == 0, "embedding fwd T=%d h=%d V=%d: rows gathered exactly (%d wrong)", T, h, V, fwd_bad);

    ref_ctx c = {T, h, tokens, kt_doubles(nw), kt_doubles(ny)};
    kt_to_double(c.wte, wte, nw), kt_to_double(c.R, R, ny);
    double *g = kt_doubles(nw);
    kern_embedding_bwd(k, dw, WP_F32, tokens, R, T, h);
    kt_fd_grad(g, c.wte, nw, FD_STEP, ref_loss, &c);
    double e = kt_rel(dw, g, nw);
    check_say(e <= TOL_BWD, "embedding bwd T=%d h=%d V=%d: rel err vs finite differences %.2e (tol %.1e)", T, h, V, e,
              TOL_BWD);

    kern_embedding_bwd(k, dw2, WP_F32, tokens, R, T, h);
    kern_embedding_bwd(k4, dw4, WP_F32, tokens, R, T, h);
    check_say(kt_same_bits(dw, dw2, nw * sizeof *dw) && kt_same_bits(dw, dw4, nw * sizeof *dw),
              "embedding bwd T=%d: two runs and 1 vs 4 threads give the same bits", T);

    /* bf16: start + fp32 sum of the token's rows, rounded once; the fp32 kernel from the same
     * start gives that fp32 value. */
    uint16_t *dwb = kt_alloc(nw * sizeof *dwb);
    float *dwf = kt_floats(nw);
    for (size_t i = 0; i < nw; i++) dwb[i] = wp_f32_to_bf16(kt_uniform(r, -1, 1)), dwf[i] = wp_bf16_to_f32(dwb[i]);
    kern_embedding_bwd(k4, dwb, WP_BF16, tokens, R, T, h);
    kern_embedding_bwd(k, dwf, WP_F32, tokens, R, T, h);
    int bf_bad = 0;
    for (size_t i = 0; i < nw; i++) bf_bad += dwb[i] != wp_f32_to_bf16(dwf[i]);
    check_say(bf_bad == 0, "embedding bwd T=%d: bf16 gradient is the fp32 one rounded once (%d differ)", T, bf_bad);
    kt_no_error(k, "embedding");
    kt_no_error(k4, "embedding");
    free(tokens), free(wte), free(y), free(R), free(dw), free(dw2), free(dw4), free(c.wte), free(c.R), free(g);
    free(dwb), free(dwf);
}

int main(void) {
    kt_rng r = {13};
    wp_kern *k = kt_cpu(1), *k4 = kt_cpu(4);
    run_case(k, k4, &r, 7, 12, 37);
    run_case(k, k4, &r, 1, 5, 3);
    run_case(k, k4, &r, 200, 260, 16); /* many repeats, rows wider than one column block */
    run_case(k, k4, &r, 513, 8, 40);
    kern_destroy(k);
    kern_destroy(k4);
    return check_result("kernels/embedding");
}
