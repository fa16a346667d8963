/* SwiGLU y = silu(gate) * up against fp64: forward, backward against central differences of
 * L = sum(y * R) (element by element), and in-place use (dgate/dup written over gate/up) giving the same bits. */
#include "kt.h"

#define TOL_FWD (16 * KT_U32)
#define TOL_BWD (64 * KT_U32)
#define FD_STEP 1e-4

static double ref_y(double g, double u) { return g / (1 + exp(-g)) * u; }

/* L is a sum of per-element terms, so its central difference in element i involves only
 * that element's term: computed that way, the check is O(n). */
static void fd_grads(double *g_gate, double *g_up, const double *gate, const double *up, const double *R, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double h = FD_STEP;
        g_gate[i] = (ref_y(gate[i] + h, up[i]) - ref_y(gate[i] - h, up[i])) / (2 * h) * R[i];
        g_up[i] = (ref_y(gate[i], up[i] + h) - ref_y(gate[i], up[i] - h)) / (2 * h) * R[i];
    }
}

static void run_case(wp_kern *k, kt_rng *r, size_t n, float range) {
    float *gate = kt_floats(n), *up = kt_floats(n), *R = kt_floats(n), *y = kt_floats(n);
    float *dg = kt_floats(n), *du = kt_floats(n);
    kt_fill(r, gate, n, -range, range);
    kt_fill(r, up, n, -2, 2);
    kt_fill(r, R, n, -1, 1);
    double *gd = kt_doubles(n), *ud = kt_doubles(n), *Rd = kt_doubles(n);
    kt_to_double(gd, gate, n), kt_to_double(ud, up, n), kt_to_double(Rd, R, n);
    double *y_ref = kt_doubles(n), *g_gate = kt_doubles(n), *g_up = kt_doubles(n);
    for (size_t i = 0; i < n; i++) y_ref[i] = ref_y(gd[i], ud[i]);

    kern_swiglu_fwd(k, y, gate, up, n);
    double e_fwd = kt_rel(y, y_ref, n);
    check_say(e_fwd <= TOL_FWD, "swiglu fwd n=%zu gate in +-%g: rel err %.2e (tol %.1e)", n, range, e_fwd, TOL_FWD);

    kern_swiglu_bwd(k, dg, du, R, gate, up, n);
    fd_grads(g_gate, g_up, gd, ud, Rd, n);
    double e_g = kt_rel(dg, g_gate, n), e_u = kt_rel(du, g_up, n);
    check_say(e_g <= TOL_BWD && e_u <= TOL_BWD,
              "swiglu bwd n=%zu: rel err vs finite differences dgate %.2e dup %.2e (tol %.1e)", n, e_g, e_u, TOL_BWD);

    kern_swiglu_bwd(k, gate, up, R, gate, up, n); /* in place */
    check_say(kt_same_bits(gate, dg, n * sizeof *dg) && kt_same_bits(up, du, n * sizeof *du),
              "swiglu bwd n=%zu: in place gives the same bits", n);
    kt_no_error(k, "swiglu");
    free(gate), free(up), free(R), free(y), free(dg), free(du);
    free(gd), free(ud), free(Rd), free(y_ref), free(g_gate), free(g_up);
}

int main(void) {
    kt_rng r = {3};
    wp_kern *k = kt_cpu(2);
    run_case(k, &r, 91, 4);
    run_case(k, &r, 1, 3);
    run_case(k, &r, 1000, 20);
    run_case(k, &r, 70001, 8); /* large enough for the threaded path */
    kern_destroy(k);
    return check_result("kernels/swiglu");
}
