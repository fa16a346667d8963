/* Every op of kernels.h, table-driven (in the spirit of ggml's test-backend-ops): one row per
 * op x shape x the dtypes the op takes, shapes small and odd (not multiples of the backends'
 * tiles, blocks or vector widths). For every row:
 *
 *   CPU half (runs everywhere): the CPU backend against an fp64 reference written here, a
 *   straightforward loop over the definition in kernels.h (no blocking, no online softmax).
 *   CUDA half (where kern_available says a CUDA device is usable): the CUDA backend against
 *   the CPU backend on the same inputs, once per compute dtype (fp16, bf16, fp32), the inputs
 *   rounded to that dtype before either backend sees them.
 *
 * Inputs are random from fixed seeds (one per row, the same for both halves).
 *
 * Error measure. For every output element the reference also computes a magnitude m: the same
 * formula with every term taken in absolute value (for sums of products |a||b|; for softmax
 * outputs the weights times the size of the scores, which is what a rounding of a score is
 * relative to). Forward error analysis bounds the error of a sum by (a few roundings) * m, not
 * by |result|, which may cancel. The printed error of an output is
 *     max_i |got_i - ref_i| / (u * m_i)
 * in units u of the output's storage dtype (fp32 2^-24, bf16 2^-8, fp16 2^-11; 2^-53 for the
 * fp64 sum of squares), next to the row's tolerance in the same units. Exact ops (conversions,
 * copies, one fp32 operation rounded once) have tolerance 0: the result must be the reference
 * bit for bit.
 *
 * CPU tolerances: each op's rule c(K) in units of fp32's u = 2^-24 (listed in ops[] below and
 * printed at the end), K the op's reduction length; an output stored in bf16/fp16 adds one
 * rounding of that dtype. Rules are c * sqrt(K) + d: rounding errors of a K-term fp32 sum grow
 * like sqrt(K) on random data (the worst case is K), plus a fixed number of roundings. An
 * output stored in 16 bits measures close to 1 u of its dtype by construction (one rounding
 * to nearest reaches nearly its bound over a few thousand values).
 *
 * CUDA tolerances, in units of the compute dtype's u (fp16 2^-11, bf16 2^-8, fp32 2^-24):
 * the roundings to the compute dtype inside the CUDA kernel (e.g. attention's P before P V),
 * one rounding of the output's storage on each side where it is 16-bit, the CPU's own
 * tolerance, and (2K + 16) * 2^-24 for fp32 arithmetic in another order: tensor cores add with
 * truncation, so their errors grow linearly in the depth K, and CUDA's expf/logf are not
 * libm's. Exact ops must match the CPU result bit for bit (rounded to the GPU's storage). */
#include "kt.h"
#include "ops_slots.h"

#define U32 0x1p-24
#define U64 0x1p-53

static double unit_of(wp_dtype t) { return t == WP_F16 ? 0x1p-11 : t == WP_BF16 ? 0x1p-8 : U32; }

/* ---- fp64 rounding to a storage format, independent of kernels/dtype.c ---- */

/* x rounded to nearest even with p significand bits, normal exponents >= emin (below that a
 * fixed quantum: subnormals), overflow past the largest finite value to inf. */
static double round_bits(double x, int p, int emin, int emax) {
    if (x == 0 || !isfinite(x)) return x;
    int e;
    frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    int lead = e - 1 < emin ? emin : e - 1;
    double q = ldexp(1.0, lead - (p - 1));
    double r = nearbyint(x / q) * q; /* x / q is exact; nearbyint rounds to even */
    double max = ldexp(2.0 - ldexp(1.0, 1 - p), emax);
    return fabs(r) > max ? copysign(INFINITY, x) : r;
}

static double round_to(double x, wp_dtype t) {
    switch (t) {
    case WP_F32: return round_bits(x, 24, -126, 127);
    case WP_F16: return round_bits(x, 11, -14, 15);
    case WP_BF16: return round_bits(x, 8, -126, 127);
    }
    return x;
}

/* ---- a row: its buffers, inputs, reference ---- */

enum { MAX_ARGS = 10, MAX_DIMS = 7, CT = 3 /* dtype code: the backend's compute dtype */ };

typedef enum { IN, OUT, INOUT } arg_role;

typedef struct {
    const char *name;
    arg_role role;
    bool ct;        /* stored in the backend's compute dtype */
    wp_dtype dtype; /* storage when not ct */
    bool ints;      /* int32 (tokens, targets) */
    bool f64;       /* a double the call returns (sum of squares), no buffer */
    size_t n;       /* elements; 0: the call gets NULL (an optional output left out) */
    float *init;    /* host values, representable in the storage dtype; OUT: NaN (all must be written) */
    int32_t *iv;
    double *ref, *mag; /* outputs: fp64 reference and error magnitude */
} arg;

struct op_desc;

typedef struct {
    const struct op_desc *op;
    const int *d; /* the shape's dimensions */
    int code;     /* the op's dtype argument (or CT), or a dtype pair */
    wp_dtype ct;  /* compute dtype the ct inputs are rounded to (fp32 for the CPU half) */
    int nargs;
    arg a[MAX_ARGS];
    double K;   /* reduction length of the tolerance rules */
    float f[4]; /* scalars of the call */
    double f64_got;
    char what[160];
} tcase;

typedef struct op_desc {
    const char *name; /* the op of kernels.h, which is its slot in wp_kern_ops */
    const int (*shapes)[MAX_DIMS];
    int nshapes;
    const int *codes; /* dtype codes; NULL: the op takes none */
    int ncodes;
    void (*build)(tcase *c, kt_rng *r);
    void (*call)(wp_kern *k, tcase *c, void **buf);
    void (*reference)(tcase *c);
    double (*cpu_tol)(const tcase *c); /* units of 2^-24 (2^-53 for an fp64 result); NULL: exact */
    double gpu_ct;                     /* roundings to the compute dtype inside the CUDA kernel */
    const char *rule;
} op_desc;

static wp_dtype storage(const tcase *c, const arg *a) { return a->ct ? c->ct : a->dtype; }

static arg *add_arg(tcase *c, const char *name, arg_role role, bool ct, wp_dtype dtype, size_t n) {
    arg *a = &c->a[c->nargs++];
    *a = (arg){.name = name, .role = role, .ct = ct, .dtype = dtype, .n = n};
    if (n) {
        a->init = kt_floats(n);
        if (role == OUT)
            for (size_t i = 0; i < n; i++) a->init[i] = NAN;
        if (role != IN) a->ref = kt_doubles(n), a->mag = kt_doubles(n);
    }
    return a;
}

static arg *add_ints(tcase *c, const char *name, size_t n) {
    arg *a = &c->a[c->nargs++];
    *a = (arg){.name = name, .role = IN, .ints = true, .n = n, .iv = kt_alloc(n * sizeof(int32_t))};
    return a;
}

static void add_f64_result(tcase *c, const char *name) {
    arg *a = &c->a[c->nargs++];
    *a = (arg){.name = name, .role = OUT, .f64 = true, .n = 1, .ref = kt_doubles(1), .mag = kt_doubles(1)};
}

/* uniform in [lo, hi), rounded to the argument's storage */
static void fill(tcase *c, arg *a, kt_rng *r, double lo, double hi) {
    for (size_t i = 0; i < a->n; i++) a->init[i] = (float)round_to(lo + (hi - lo) * kt_unit(r), storage(c, a));
}

/* sign * [1, 2) * 2^e, e uniform in [emin, emax]: many binades (subnormal and overflowing fp16
 * included when asked) */
static void fill_wide(tcase *c, arg *a, kt_rng *r, int emin, int emax) {
    for (size_t i = 0; i < a->n; i++) {
        double x = ldexp(1 + kt_unit(r), emin + (int)(kt_next(r) % (unsigned)(emax - emin + 1)));
        a->init[i] = (float)round_to(kt_next(r) & 1 ? -x : x, storage(c, a));
    }
}

static void free_case(tcase *c) {
    for (int i = 0; i < c->nargs; i++) free(c->a[i].init), free(c->a[i].iv), free(c->a[i].ref), free(c->a[i].mag);
}

static double in(const arg *a, size_t i) { return a->init[i]; }
static double sq(double x) { return x * x; }
static const char *dname(wp_dtype t) { return wp_dtype_name(t); }
static wp_dtype code_dtype(const tcase *c, int code) { return code == CT ? c->ct : (wp_dtype)code; }
static const char *code_name(int code) { return code == CT ? "ct" : wp_dtype_name((wp_dtype)code); }

/* ---- elementwise ---- */

/* convert, accumulate: code = dt * 3 + st */
static void build_convert(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    wp_dtype dt = (wp_dtype)(c->code / 3), st = (wp_dtype)(c->code % 3);
    arg *src = add_arg(c, "src", IN, false, st, n);
    add_arg(c, "dst", OUT, false, dt, n);
    fill_wide(c, src, r, -27, 16); /* fp16: underflow to zero, subnormals, overflow to inf */
    snprintf(c->what, sizeof c->what, "%s <- %s n=%zu", dname(dt), dname(st), n);
}
static void call_convert(wp_kern *k, tcase *c, void **b) {
    kern_convert(k, b[1], c->a[1].dtype, b[0], c->a[0].dtype, c->a[0].n);
}
static void ref_convert(tcase *c) {
    arg *src = &c->a[0], *dst = &c->a[1];
    for (size_t i = 0; i < src->n; i++) dst->ref[i] = round_to(in(src, i), dst->dtype), dst->mag[i] = fabs(dst->ref[i]);
}

static void build_accumulate(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    wp_dtype dt = (wp_dtype)(c->code / 3), st = (wp_dtype)(c->code % 3);
    arg *dst = add_arg(c, "dst", INOUT, false, dt, n), *src = add_arg(c, "src", IN, false, st, n);
    fill_wide(c, dst, r, -8, 8);
    fill_wide(c, src, r, -8, 8);
    snprintf(c->what, sizeof c->what, "%s += %s n=%zu", dname(dt), dname(st), n);
}
static void call_accumulate(wp_kern *k, tcase *c, void **b) {
    kern_accumulate(k, b[0], c->a[0].dtype, b[1], c->a[1].dtype, c->a[0].n);
}
/* kernels.h: computed in fp32, rounded once to dt (the fp64 sum of two such floats is exact) */
static void ref_accumulate(tcase *c) {
    arg *dst = &c->a[0], *src = &c->a[1];
    for (size_t i = 0; i < dst->n; i++) {
        dst->ref[i] = round_to(round_to(in(dst, i) + in(src, i), WP_F32), dst->dtype);
        dst->mag[i] = fabs(dst->ref[i]);
    }
}

static void build_scale(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    arg *x = add_arg(c, "x", INOUT, false, (wp_dtype)c->code, n);
    fill_wide(c, x, r, -10, 10);
    c->f[0] = (float)(-3 + 6 * kt_unit(r));
    snprintf(c->what, sizeof c->what, "%s n=%zu a=%.4f", dname(x->dtype), n, c->f[0]);
}
static void call_scale(wp_kern *k, tcase *c, void **b) { kern_scale(k, b[0], c->a[0].dtype, c->f[0], c->a[0].n); }
/* x * a in fp32 (exact in fp64), rounded to fp32 and then to t */
static void ref_scale(tcase *c) {
    arg *x = &c->a[0];
    for (size_t i = 0; i < x->n; i++)
        x->ref[i] = round_to(round_to(in(x, i) * c->f[0], WP_F32), x->dtype), x->mag[i] = fabs(x->ref[i]);
}

static void build_sumsq(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    arg *x = add_arg(c, "x", IN, false, (wp_dtype)c->code, n);
    fill(c, x, r, -4, 4);
    add_f64_result(c, "sumsq");
    c->K = (double)n;
    snprintf(c->what, sizeof c->what, "%s n=%zu", dname(x->dtype), n);
}
static void call_sumsq(wp_kern *k, tcase *c, void **b) { c->f64_got = kern_sumsq(k, b[0], c->a[0].dtype, c->a[0].n); }
/* squares of fp32 values are exact in fp64; Neumaier's compensated sum */
static void ref_sumsq(tcase *c) {
    double s = 0, comp = 0;
    for (size_t i = 0; i < c->a[0].n; i++) {
        double t = sq(in(&c->a[0], i)), y = s + t;
        comp += fabs(s) >= t ? (s - y) + t : (t - y) + s;
        s = y;
    }
    c->a[1].ref[0] = c->a[1].mag[0] = s + comp;
}
/* fp64 sum of n non-negative terms, any order: relative error <= (n - 1) u64 */
static double tol_sumsq(const tcase *c) { return c->K; }

static void build_add(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    add_arg(c, "y", OUT, true, WP_F32, n);
    fill(c, add_arg(c, "a", IN, true, WP_F32, n), r, -5, 5);
    fill(c, add_arg(c, "b", IN, true, WP_F32, n), r, -5, 5);
    snprintf(c->what, sizeof c->what, "n=%zu", n);
}
static void call_add(wp_kern *k, tcase *c, void **b) { kern_add(k, b[0], b[1], b[2], c->a[0].n); }
static void ref_add(tcase *c) {
    for (size_t i = 0; i < c->a[0].n; i++)
        c->a[0].ref[i] = round_to(in(&c->a[1], i) + in(&c->a[2], i), WP_F32), c->a[0].mag[i] = fabs(c->a[0].ref[i]);
}

/* memory ops of kernels.h that move values: copy and zero */
static void build_copy(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    add_arg(c, "dst", OUT, false, WP_F32, n);
    fill(c, add_arg(c, "src", IN, false, WP_F32, n), r, -1, 1);
    snprintf(c->what, sizeof c->what, "%zu bytes", n * 4);
}
static void call_copy(wp_kern *k, tcase *c, void **b) { kern_copy(k, b[0], b[1], c->a[0].n * 4); }
static void ref_copy(tcase *c) {
    for (size_t i = 0; i < c->a[0].n; i++) c->a[0].ref[i] = in(&c->a[1], i), c->a[0].mag[i] = fabs(c->a[0].ref[i]);
}

static void build_zero(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    fill(c, add_arg(c, "x", INOUT, false, WP_F32, n), r, 1, 2);
    snprintf(c->what, sizeof c->what, "%zu bytes", n * 4);
}
static void call_zero(wp_kern *k, tcase *c, void **b) { kern_zero(k, b[0], c->a[0].n * 4); }
static void ref_zero(tcase *c) {
    for (size_t i = 0; i < c->a[0].n; i++) c->a[0].ref[i] = c->a[0].mag[i] = 0;
}

/* ---- GEMM ---- */

/* shape: m, n, k, trans_a, trans_b, pad (extra row stride); code: C's dtype. Forward-style
 * rows (C in ct) use beta = 0 with NaN in C, which must not be read; gradient-style rows
 * (fp32, bf16 C) accumulate with beta != 0. A's and B's padding holds NaN. */
enum { G_A, G_B, G_C };
static void gemm_dims(const tcase *c, int *lda, int *ldb, int *ldc, int *arows, int *brows) {
    int m = c->d[0], n = c->d[1], kk = c->d[2], ta = c->d[3], tb = c->d[4], pad = c->d[5];
    *arows = ta ? kk : m, *brows = tb ? n : kk;
    *lda = (ta ? m : kk) + pad, *ldb = (tb ? kk : n) + 2 * pad, *ldc = n + pad;
}
static void build_gemm(tcase *c, kt_rng *r) {
    int m = c->d[0], n = c->d[1], kk = c->d[2], ta = c->d[3], tb = c->d[4], lda, ldb, ldc, ar, br;
    gemm_dims(c, &lda, &ldb, &ldc, &ar, &br);
    wp_dtype ctype = code_dtype(c, c->code);
    arg *A = add_arg(c, "A", IN, true, WP_F32, (size_t)ar * lda),
        *B = add_arg(c, "B", IN, true, WP_F32, (size_t)br * ldb);
    arg *C = add_arg(c, "C", INOUT, c->code == CT, ctype, (size_t)m * ldc);
    fill(c, A, r, -1, 1);
    fill(c, B, r, -1, 1);
    fill(c, C, r, -1, 1);
    for (int i = 0; i < ar; i++)
        for (int j = ta ? m : kk; j < lda; j++) A->init[(size_t)i * lda + j] = NAN;
    for (int i = 0; i < br; i++)
        for (int j = tb ? kk : n; j < ldb; j++) B->init[(size_t)i * ldb + j] = NAN;
    c->f[0] = c->code == WP_F32 ? 0.7f : 1.0f;                         /* alpha */
    c->f[1] = c->code == CT ? 0.0f : c->code == WP_F32 ? -0.5f : 1.0f; /* beta */
    if (c->f[1] == 0.0f)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) C->init[(size_t)i * ldc + j] = NAN;
    c->K = kk;
    snprintf(c->what, sizeof c->what, "%s%s m=%d n=%d k=%d pad=%d C %s alpha=%g beta=%g", ta ? "T" : "N",
             tb ? "T" : "N", m, n, kk, c->d[5], code_name(c->code), c->f[0], c->f[1]);
}
static void call_gemm(wp_kern *k, tcase *c, void **b) {
    int lda, ldb, ldc, ar, br;
    gemm_dims(c, &lda, &ldb, &ldc, &ar, &br);
    kern_gemm(k, c->d[3], c->d[4], c->d[0], c->d[1], c->d[2], c->f[0], b[G_A], lda, b[G_B], ldb, c->f[1], b[G_C],
              storage(c, &c->a[G_C]), ldc);
}
static void ref_gemm(tcase *c) {
    int m = c->d[0], n = c->d[1], kk = c->d[2], ta = c->d[3], tb = c->d[4], lda, ldb, ldc, ar, br;
    gemm_dims(c, &lda, &ldb, &ldc, &ar, &br);
    const arg *A = &c->a[G_A], *B = &c->a[G_B];
    arg *C = &c->a[G_C];
    double alpha = c->f[0], beta = c->f[1];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++) {
            size_t at = (size_t)i * ldc + j;
            if (j >= n) { /* padding: untouched */
                C->ref[at] = in(C, at), C->mag[at] = fabs(C->ref[at]);
                continue;
            }
            double s = 0, mag = 0;
            for (int q = 0; q < kk; q++) {
                double a = in(A, ta ? (size_t)q * lda + i : (size_t)i * lda + q);
                double bb = in(B, tb ? (size_t)j * ldb + q : (size_t)q * ldb + j);
                s += a * bb, mag += fabs(a * bb);
            }
            double c0 = beta == 0 ? 0 : in(C, at);
            C->ref[at] = alpha * s + beta * c0;
            C->mag[at] = fabs(alpha) * mag + fabs(beta * c0);
        }
}
/* fp32 dot products of K terms (BLAS or the blocked loops), then alpha and beta */
static double tol_gemm(const tcase *c) { return 2 * sqrt(c->K) + 4; }

/* ---- RMSNorm ---- */

static double ref_rstd(const arg *x, int t, int h, double eps) {
    double ss = 0;
    for (int j = 0; j < h; j++) ss += sq(in(x, (size_t)t * h + j));
    return 1 / sqrt(ss / h + eps);
}

/* shape: T, h */
static void build_rmsnorm_fwd(tcase *c, kt_rng *r) {
    int T = c->d[0], h = c->d[1];
    add_arg(c, "y", OUT, true, WP_F32, (size_t)T * h);
    add_arg(c, "rstd", OUT, false, WP_F32, T);
    fill(c, add_arg(c, "x", IN, true, WP_F32, (size_t)T * h), r, -2, 2);
    fill(c, add_arg(c, "w", IN, true, WP_F32, h), r, 0.5, 1.5);
    c->f[0] = 1e-5f;
    c->K = h;
    snprintf(c->what, sizeof c->what, "T=%d h=%d", T, h);
}
static void call_rmsnorm_fwd(wp_kern *k, tcase *c, void **b) {
    kern_rmsnorm_fwd(k, b[0], b[1], b[2], b[3], c->d[0], c->d[1], c->f[0]);
}
static void ref_rmsnorm_fwd(tcase *c) {
    int T = c->d[0], h = c->d[1];
    arg *y = &c->a[0], *rstd = &c->a[1], *x = &c->a[2], *w = &c->a[3];
    for (int t = 0; t < T; t++) {
        double rs = ref_rstd(x, t, h, c->f[0]);
        rstd->ref[t] = rstd->mag[t] = rs;
        for (int j = 0; j < h; j++) {
            size_t at = (size_t)t * h + j;
            y->ref[at] = in(x, at) * rs * in(w, j), y->mag[at] = fabs(y->ref[at]);
        }
    }
}
/* fp32 sum of squares over h (K), then /h, +eps, sqrt, 1/: rstd; y = x * rstd * w */
static double tol_rmsnorm_fwd(const tcase *c) { return 2 * sqrt(c->K) + 6; }

/* rstd for the backward: the fp64 one of x, rounded to fp32 (what the forward would give) */
static void set_rstd(arg *rstd, const arg *x, int T, int h) {
    for (int t = 0; t < T; t++) rstd->init[t] = (float)ref_rstd(x, t, h, 1e-5);
}

/* shape: T, h, accumulate */
static void build_rmsnorm_bwd_input(tcase *c, kt_rng *r) {
    int T = c->d[0], h = c->d[1], acc = c->d[2];
    arg *dx = add_arg(c, "dx", acc ? INOUT : OUT, true, WP_F32, (size_t)T * h);
    if (acc) fill(c, dx, r, -1, 1);
    fill(c, add_arg(c, "dy", IN, true, WP_F32, (size_t)T * h), r, -1, 1);
    arg *x = add_arg(c, "x", IN, true, WP_F32, (size_t)T * h);
    fill(c, x, r, -2, 2);
    fill(c, add_arg(c, "w", IN, true, WP_F32, h), r, 0.5, 1.5);
    set_rstd(add_arg(c, "rstd", IN, false, WP_F32, T), x, T, h);
    c->K = h;
    snprintf(c->what, sizeof c->what, "T=%d h=%d%s", T, h, acc ? " (+=)" : "");
}
static void call_rmsnorm_bwd_input(wp_kern *k, tcase *c, void **b) {
    kern_rmsnorm_bwd_input(k, b[0], c->d[2], b[1], b[2], b[3], b[4], c->d[0], c->d[1]);
}
/* dx_j = r w_j dy_j - r^3 x_j / h * sum_i dy_i w_i x_i (+ dx0), r the given rstd */
static void ref_rmsnorm_bwd_input(tcase *c) {
    int T = c->d[0], h = c->d[1], acc = c->d[2];
    arg *dx = &c->a[0], *dy = &c->a[1], *x = &c->a[2], *w = &c->a[3], *rstd = &c->a[4];
    for (int t = 0; t < T; t++) {
        double rs = in(rstd, t), dot = 0, dotm = 0;
        for (int j = 0; j < h; j++) {
            size_t at = (size_t)t * h + j;
            dot += in(dy, at) * in(w, j) * in(x, at), dotm += fabs(in(dy, at) * in(w, j) * in(x, at));
        }
        for (int j = 0; j < h; j++) {
            size_t at = (size_t)t * h + j;
            double g = rs * in(w, j) * in(dy, at) - rs * rs * rs * in(x, at) / h * dot;
            double mg = fabs(rs * in(w, j) * in(dy, at)) + fabs(rs * rs * rs * in(x, at) / h) * dotm;
            dx->ref[at] = (acc ? in(dx, at) : 0) + g;
            dx->mag[at] = (acc ? fabs(in(dx, at)) : 0) + mg;
        }
    }
}
/* fp32 dot over h (K), then a few products and one difference */
static double tol_rmsnorm_bwd_input(const tcase *c) { return 2 * sqrt(c->K) + 8; }

/* shape: T, h; code: dw's dtype */
static void build_rmsnorm_bwd_weight(tcase *c, kt_rng *r) {
    int T = c->d[0], h = c->d[1];
    fill(c, add_arg(c, "dw", INOUT, false, (wp_dtype)c->code, h), r, -1, 1);
    fill(c, add_arg(c, "dy", IN, true, WP_F32, (size_t)T * h), r, -1, 1);
    arg *x = add_arg(c, "x", IN, true, WP_F32, (size_t)T * h);
    fill(c, x, r, -2, 2);
    set_rstd(add_arg(c, "rstd", IN, false, WP_F32, T), x, T, h);
    c->K = T;
    snprintf(c->what, sizeof c->what, "T=%d h=%d dw %s (+=)", T, h, code_name(c->code));
}
static void call_rmsnorm_bwd_weight(wp_kern *k, tcase *c, void **b) {
    kern_rmsnorm_bwd_weight(k, b[0], c->a[0].dtype, b[1], b[2], b[3], c->d[0], c->d[1]);
}
static void ref_rmsnorm_bwd_weight(tcase *c) {
    int T = c->d[0], h = c->d[1];
    arg *dw = &c->a[0], *dy = &c->a[1], *x = &c->a[2], *rstd = &c->a[3];
    for (int j = 0; j < h; j++) {
        double s = in(dw, j), m = fabs(in(dw, j));
        for (int t = 0; t < T; t++) {
            double term = in(dy, (size_t)t * h + j) * in(x, (size_t)t * h + j) * in(rstd, t);
            s += term, m += fabs(term);
        }
        dw->ref[j] = s, dw->mag[j] = m;
    }
}
/* fp32 sum over the T rows (K) of two-product terms, added to dw once */
static double tol_rmsnorm_bwd_weight(const tcase *c) { return 2 * sqrt(c->K) + 4; }

/* ---- RoPE ---- */

/* shape: b, s, nheads, hd, pos0, theta (0: 1e4, 1: 5e5) */
static void build_rope(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0] * c->d[1] * c->d[2] * c->d[3];
    fill(c, add_arg(c, "x", INOUT, true, WP_F32, n), r, -1, 1);
    c->f[0] = c->d[5] ? 500000.0f : 10000.0f;
    c->K = 1;
    snprintf(c->what, sizeof c->what, "b=%d s=%d heads=%d hd=%d pos0=%d theta=%g", c->d[0], c->d[1], c->d[2], c->d[3],
             c->d[4], c->f[0]);
}
static void call_rope_fwd(wp_kern *k, tcase *c, void **b) {
    kern_rope_fwd(k, b[0], c->d[0], c->d[1], c->d[2], c->d[3], c->d[4], c->f[0]);
}
static void call_rope_bwd(wp_kern *k, tcase *c, void **b) {
    kern_rope_bwd(k, b[0], c->d[0], c->d[1], c->d[2], c->d[3], c->d[4], c->f[0]);
}
/* x_i, x_{i+hd/2} turned by +angle (fwd) or -angle (bwd), angle = pos * theta^(-2i/hd) */
static void ref_rope(tcase *c, double sign) {
    int b = c->d[0], s = c->d[1], nh = c->d[2], hd = c->d[3], pos0 = c->d[4], half = hd / 2;
    arg *x = &c->a[0];
    for (int row = 0; row < b * s; row++)
        for (int hh = 0; hh < nh; hh++)
            for (int i = 0; i < half; i++) {
                double angle = (double)(pos0 + row % s) * pow((double)c->f[0], -2.0 * i / hd);
                double cs = cos(angle), sn = sign * sin(angle);
                size_t a1 = ((size_t)row * nh + hh) * hd + i, a2 = a1 + half;
                double x1 = in(x, a1), x2 = in(x, a2);
                x->ref[a1] = x1 * cs - x2 * sn, x->mag[a1] = fabs(x1 * cs) + fabs(x2 * sn);
                x->ref[a2] = x2 * cs + x1 * sn, x->mag[a2] = fabs(x2 * cs) + fabs(x1 * sn);
            }
}
static void ref_rope_fwd(tcase *c) { ref_rope(c, 1); }
static void ref_rope_bwd(tcase *c) { ref_rope(c, -1); }
/* cos and sin rounded to fp32, two products, one sum */
static double tol_rope(const tcase *c) {
    (void)c;
    return 4;
}

/* ---- attention ---- */

/* shape: b, sq, skv, nh, nkv, hd, docs: 0 plain causal, else document masks with about one
 * document start in `docs` queries (qlo, the first key each query sees) */
typedef struct {
    int b, sq, skv, nh, nkv, hd, rep;
    double scale;
    const int32_t *qlo; /* NULL: causal */
} attn_dims;

static attn_dims attn_of(const tcase *c) {
    attn_dims a = {c->d[0], c->d[1], c->d[2], c->d[3], c->d[4], c->d[5], c->d[3] / c->d[4], 1 / sqrt(c->d[5]), NULL};
    return a;
}
/* The case's qlo argument (the last one), when it has document masks. */
static attn_dims attn_of_masked(const tcase *c) {
    attn_dims a = attn_of(c);
    if (c->d[6]) a.qlo = c->a[c->nargs - 1].iv;
    return a;
}
static void *attn_qlo_buf(const tcase *c, void **b) { return c->d[6] ? b[c->nargs - 1] : NULL; }
/* Documents: a new one starts at a query with probability 1/docs; the first query's document
 * may start anywhere before it (a segment continuing an earlier document). */
static void attn_add_qlo(tcase *c, kt_rng *r) {
    attn_dims a = attn_of(c);
    int docs = c->d[6];
    if (!docs) return;
    arg *lo = add_ints(c, "qlo", (size_t)a.b * a.sq);
    for (int bi = 0; bi < a.b; bi++) {
        int off = a.skv - a.sq, cur = (int)(kt_next(r) % (unsigned)(off + 1));
        for (int i = 0; i < a.sq; i++) {
            if (kt_next(r) % (unsigned)docs == 0) cur = off + i;
            lo->iv[(size_t)bi * a.sq + i] = cur;
        }
    }
}
static int attn_lo(const attn_dims *a, int bi, int i) { return a->qlo ? a->qlo[(size_t)bi * a->sq + i] : 0; }
static size_t q_at(const attn_dims *a, int bi, int i, int j) { return ((size_t)(bi * a->sq + i) * a->nh + j) * a->hd; }
static size_t kv_at(const attn_dims *a, int bi, int kk, int g) {
    return ((size_t)(bi * a->skv + kk) * a->nkv + g) * a->hd;
}

/* Scores of query (bi, i, head j) against its visible keys lo..pos: s[kk] (scaled) and the size
 * of their terms, smag = max over keys of scale * sum |q_d k_d|. */
static int attn_scores(const attn_dims *a, const arg *q, const arg *k, int bi, int i, int j, double *s, double *smag,
                       int *lo) {
    int pos = a->skv - a->sq + i, g = j / a->rep;
    *smag = 0;
    *lo = attn_lo(a, bi, i);
    for (int kk = *lo; kk <= pos; kk++) {
        double acc = 0, m = 0;
        for (int d = 0; d < a->hd; d++) {
            double t = in(q, q_at(a, bi, i, j) + d) * in(k, kv_at(a, bi, kk, g) + d);
            acc += t, m += fabs(t);
        }
        s[kk] = acc * a->scale;
        *smag = fmax(*smag, m * a->scale);
    }
    return pos;
}

/* fp64 forward: o, lse and their magnitudes (any may be NULL) */
static void attn_forward(const attn_dims *a, const arg *q, const arg *k, const arg *v, double *o, double *om,
                         double *lse, double *lm) {
    double *s = kt_doubles(a->skv);
    for (int bi = 0; bi < a->b; bi++)
        for (int j = 0; j < a->nh; j++)
            for (int i = 0; i < a->sq; i++) {
                double smag, mx = -INFINITY, sum = 0;
                int lo, pos = attn_scores(a, q, k, bi, i, j, s, &smag, &lo);
                for (int kk = lo; kk <= pos; kk++) mx = fmax(mx, s[kk]);
                for (int kk = lo; kk <= pos; kk++) sum += exp(s[kk] - mx);
                double l = mx + log(sum);
                size_t li = ((size_t)bi * a->nh + j) * a->sq + i;
                if (lse) lse[li] = l, lm[li] = fabs(l) + smag + 1;
                for (int d = 0; d < a->hd; d++) {
                    double acc = 0, m = 0;
                    for (int kk = lo; kk <= pos; kk++) {
                        double p = exp(s[kk] - l), vv = in(v, kv_at(a, bi, kk, j / a->rep) + d);
                        acc += p * vv, m += p * fabs(vv);
                    }
                    if (o) o[q_at(a, bi, i, j) + d] = acc, om[q_at(a, bi, i, j) + d] = m * (1 + smag);
                }
            }
    free(s);
}

static void attn_inputs(tcase *c, kt_rng *r, size_t nq, size_t nkv) {
    fill(c, add_arg(c, "q", IN, true, WP_F32, nq), r, -2, 2); /* scores of a few units */
    fill(c, add_arg(c, "k", IN, true, WP_F32, nkv), r, -2, 2);
    fill(c, add_arg(c, "v", IN, true, WP_F32, nkv), r, -1, 1);
}

static void attn_what(tcase *c) {
    attn_dims a = attn_of(c);
    c->K = a.hd + (double)a.rep * a.skv;
    snprintf(c->what, sizeof c->what, "b=%d sq=%d skv=%d nh=%d nkv=%d hd=%d%s", a.b, a.sq, a.skv, a.nh, a.nkv, a.hd,
             c->d[6] ? " doc-mask" : "");
}

enum { AF_O, AF_LSE, AF_Q, AF_K, AF_V };
static void build_attention_fwd(tcase *c, kt_rng *r) {
    attn_dims a = attn_of(c);
    size_t nq = (size_t)a.b * a.sq * a.nh * a.hd, nkv = (size_t)a.b * a.skv * a.nkv * a.hd;
    add_arg(c, "o", OUT, true, WP_F32, nq);
    add_arg(c, "lse", OUT, false, WP_F32, (size_t)a.b * a.nh * a.sq);
    attn_inputs(c, r, nq, nkv);
    attn_add_qlo(c, r);
    attn_what(c);
}
static void call_attention_fwd(wp_kern *k, tcase *c, void **b) {
    attn_dims a = attn_of(c);
    kern_attention_fwd(k, b[AF_O], b[AF_LSE], b[AF_Q], b[AF_K], b[AF_V], a.b, a.sq, a.skv, a.nh, a.nkv, a.hd,
                       attn_qlo_buf(c, b));
}
/* explicit softmax over the visible keys; o's magnitude sum_k P_k |v_k| (1 + smag): a score
 * rounding of u * smag changes P_k by that relative amount */
static void ref_attention_fwd(tcase *c) {
    attn_dims a = attn_of_masked(c);
    attn_forward(&a, &c->a[AF_Q], &c->a[AF_K], &c->a[AF_V], c->a[AF_O].ref, c->a[AF_O].mag, c->a[AF_LSE].ref,
                 c->a[AF_LSE].mag);
}
/* fp32 dot products over hd and sums over up to skv keys (K = hd + rep * skv) */
static double tol_attention(const tcase *c) { return 2 * sqrt(c->K) + 8; }

enum { AB_DQ, AB_DK, AB_DV, AB_DO, AB_Q, AB_K, AB_V, AB_O, AB_LSE };
static void build_attention_bwd(tcase *c, kt_rng *r) {
    attn_dims a = attn_of(c);
    size_t nq = (size_t)a.b * a.sq * a.nh * a.hd, nkv = (size_t)a.b * a.skv * a.nkv * a.hd,
           nl = (size_t)a.b * a.nh * a.sq;
    add_arg(c, "dq", OUT, true, WP_F32, nq);
    add_arg(c, "dk", OUT, true, WP_F32, nkv);
    add_arg(c, "dv", OUT, true, WP_F32, nkv);
    fill(c, add_arg(c, "dout", IN, true, WP_F32, nq), r, -1, 1);
    attn_inputs(c, r, nq, nkv);
    /* o and lse: the fp64 forward of these inputs, rounded to their storage */
    arg *o = add_arg(c, "o", IN, true, WP_F32, nq), *lse = add_arg(c, "lse", IN, false, WP_F32, nl);
    attn_add_qlo(c, r);
    a = attn_of_masked(c);
    double *od = kt_doubles(nq), *om = kt_doubles(nq), *ld = kt_doubles(nl), *lm = kt_doubles(nl);
    attn_forward(&a, &c->a[AB_Q], &c->a[AB_K], &c->a[AB_V], od, om, ld, lm);
    for (size_t i = 0; i < nq; i++) o->init[i] = (float)round_to(od[i], storage(c, o));
    for (size_t i = 0; i < nl; i++) lse->init[i] = (float)ld[i];
    free(od), free(om), free(ld), free(lm);
    attn_what(c);
}
static void call_attention_bwd(wp_kern *k, tcase *c, void **b) {
    attn_dims a = attn_of(c);
    kern_attention_bwd(k, b[AB_DQ], b[AB_DK], b[AB_DV], b[AB_DO], b[AB_Q], b[AB_K], b[AB_V], b[AB_O], b[AB_LSE], a.b,
                       a.sq, a.skv, a.nh, a.nkv, a.hd, attn_qlo_buf(c, b));
}
/* From the given o and lse: P = exp(s - lse), dP = dO V^T, D = rowsum(dO o), dS = P (dP - D);
 * dq = scale dS K, dk = scale dS^T Q (over the heads sharing the kv head), dv = P^T dO.
 * dS's magnitude P (|dO||V| + |dO||o|) (1 + smag). */
static void ref_attention_bwd(tcase *c) {
    attn_dims a = attn_of_masked(c);
    arg *dq = &c->a[AB_DQ], *dk = &c->a[AB_DK], *dv = &c->a[AB_DV], *dout = &c->a[AB_DO], *q = &c->a[AB_Q];
    arg *k = &c->a[AB_K], *v = &c->a[AB_V], *o = &c->a[AB_O], *lse = &c->a[AB_LSE];
    for (size_t i = 0; i < dq->n; i++) dq->ref[i] = dq->mag[i] = 0;
    for (size_t i = 0; i < dk->n; i++) dk->ref[i] = dk->mag[i] = dv->ref[i] = dv->mag[i] = 0;
    double *s = kt_doubles(a.skv);
    for (int bi = 0; bi < a.b; bi++)
        for (int j = 0; j < a.nh; j++)
            for (int i = 0; i < a.sq; i++) {
                double smag;
                int lo, pos = attn_scores(&a, q, k, bi, i, j, s, &smag, &lo), g = j / a.rep;
                double l = in(lse, ((size_t)bi * a.nh + j) * a.sq + i), D = 0, Dm = 0;
                size_t qi = q_at(&a, bi, i, j);
                for (int d = 0; d < a.hd; d++)
                    D += in(dout, qi + d) * in(o, qi + d), Dm += fabs(in(dout, qi + d) * in(o, qi + d));
                for (int kk = lo; kk <= pos; kk++) {
                    size_t ki = kv_at(&a, bi, kk, g);
                    double p = exp(s[kk] - l), dp = 0, dpm = 0;
                    for (int d = 0; d < a.hd; d++)
                        dp += in(dout, qi + d) * in(v, ki + d), dpm += fabs(in(dout, qi + d) * in(v, ki + d));
                    double ds = p * (dp - D), dsm = p * (dpm + Dm) * (1 + smag);
                    for (int d = 0; d < a.hd; d++) {
                        dq->ref[qi + d] += a.scale * ds * in(k, ki + d),
                            dq->mag[qi + d] += a.scale * dsm * fabs(in(k, ki + d));
                        dk->ref[ki + d] += a.scale * ds * in(q, qi + d),
                            dk->mag[ki + d] += a.scale * dsm * fabs(in(q, qi + d));
                        dv->ref[ki + d] += p * in(dout, qi + d),
                            dv->mag[ki + d] += p * fabs(in(dout, qi + d)) * (1 + smag);
                    }
                }
            }
    free(s);
}

/* ---- SwiGLU ---- */

static double sigmoid(double x) { return 1 / (1 + exp(-x)); }

/* shape: n */
static void build_swiglu_fwd(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    add_arg(c, "y", OUT, true, WP_F32, n);
    fill(c, add_arg(c, "gate", IN, true, WP_F32, n), r, -8, 8);
    fill(c, add_arg(c, "up", IN, true, WP_F32, n), r, -2, 2);
    c->K = 1;
    snprintf(c->what, sizeof c->what, "n=%zu", n);
}
static void call_swiglu_fwd(wp_kern *k, tcase *c, void **b) { kern_swiglu_fwd(k, b[0], b[1], b[2], c->a[0].n); }
static void ref_swiglu_fwd(tcase *c) {
    for (size_t i = 0; i < c->a[0].n; i++) {
        double g = in(&c->a[1], i);
        c->a[0].ref[i] = g * sigmoid(g) * in(&c->a[2], i), c->a[0].mag[i] = fabs(c->a[0].ref[i]);
    }
}
/* exp to a few ulp, 1 + e, a division and two products */
static double tol_swiglu_fwd(const tcase *c) {
    (void)c;
    return 8;
}

static void build_swiglu_bwd(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    add_arg(c, "dgate", OUT, true, WP_F32, n);
    add_arg(c, "dup", OUT, true, WP_F32, n);
    fill(c, add_arg(c, "dy", IN, true, WP_F32, n), r, -1, 1);
    fill(c, add_arg(c, "gate", IN, true, WP_F32, n), r, -8, 8);
    fill(c, add_arg(c, "up", IN, true, WP_F32, n), r, -2, 2);
    c->K = 1;
    snprintf(c->what, sizeof c->what, "n=%zu", n);
}
static void call_swiglu_bwd(wp_kern *k, tcase *c, void **b) {
    kern_swiglu_bwd(k, b[0], b[1], b[2], b[3], b[4], c->a[0].n);
}
/* dgate = dy up s (1 + g (1 - s)), dup = dy g s; dgate's magnitude |dy up| s (1 + |g|): 1 - s
 * loses s's relative accuracy when s is near 1 */
static void ref_swiglu_bwd(tcase *c) {
    arg *dg = &c->a[0], *du = &c->a[1], *dy = &c->a[2], *gate = &c->a[3], *up = &c->a[4];
    for (size_t i = 0; i < dg->n; i++) {
        double g = in(gate, i), s = sigmoid(g), d = in(dy, i), u = in(up, i);
        dg->ref[i] = d * u * s * (1 + g * (1 - s)), dg->mag[i] = fabs(d * u) * s * (1 + fabs(g));
        du->ref[i] = d * g * s, du->mag[i] = fabs(du->ref[i]);
    }
}
static double tol_swiglu_bwd(const tcase *c) {
    (void)c;
    return 16;
}

/* ---- embedding ---- */

/* shape: T, h, V; tokens repeat (a quarter of the vocabulary is drawn), the last row too */
static void tokens(tcase *c, kt_rng *r, int T, int V) {
    arg *tok = add_ints(c, "tokens", T);
    for (int t = 0; t < T; t++) tok->iv[t] = t % 5 == 4 ? V - 1 : (int32_t)(kt_next(r) % (unsigned)(V < 8 ? V : V / 4));
}
static void build_embedding_fwd(tcase *c, kt_rng *r) {
    int T = c->d[0], h = c->d[1], V = c->d[2];
    add_arg(c, "y", OUT, true, WP_F32, (size_t)T * h);
    tokens(c, r, T, V);
    fill(c, add_arg(c, "wte", IN, true, WP_F32, (size_t)V * h), r, -1, 1);
    snprintf(c->what, sizeof c->what, "T=%d h=%d V=%d", T, h, V);
}
static void call_embedding_fwd(wp_kern *k, tcase *c, void **b) {
    kern_embedding_fwd(k, b[0], b[1], b[2], c->d[0], c->d[1]);
}
static void ref_embedding_fwd(tcase *c) {
    int T = c->d[0], h = c->d[1];
    for (int t = 0; t < T; t++)
        for (int j = 0; j < h; j++) {
            size_t at = (size_t)t * h + j;
            c->a[0].ref[at] = in(&c->a[2], (size_t)c->a[1].iv[t] * h + j), c->a[0].mag[at] = fabs(c->a[0].ref[at]);
        }
}

/* code: dw's dtype */
static void build_embedding_bwd(tcase *c, kt_rng *r) {
    int T = c->d[0], h = c->d[1], V = c->d[2];
    fill(c, add_arg(c, "dwte", INOUT, false, (wp_dtype)c->code, (size_t)V * h), r, -1, 1);
    tokens(c, r, T, V);
    fill(c, add_arg(c, "dy", IN, true, WP_F32, (size_t)T * h), r, -1, 1);
    c->K = T;
    snprintf(c->what, sizeof c->what, "T=%d h=%d V=%d dw %s (+=)", T, h, V, code_name(c->code));
}
static void call_embedding_bwd(wp_kern *k, tcase *c, void **b) {
    kern_embedding_bwd(k, b[0], c->a[0].dtype, b[1], b[2], c->d[0], c->d[1]);
}
static void ref_embedding_bwd(tcase *c) {
    int T = c->d[0], h = c->d[1];
    arg *dw = &c->a[0], *tok = &c->a[1], *dy = &c->a[2];
    for (size_t i = 0; i < dw->n; i++) dw->ref[i] = in(dw, i), dw->mag[i] = fabs(in(dw, i));
    for (int t = 0; t < T; t++)
        for (int j = 0; j < h; j++) {
            size_t at = (size_t)tok->iv[t] * h + j;
            dw->ref[at] += in(dy, (size_t)t * h + j), dw->mag[at] += fabs(in(dy, (size_t)t * h + j));
        }
}
/* fp32 sums over a token's occurrences (at most T = K), added once */
static double tol_embedding_bwd(const tcase *c) { return 2 * sqrt(c->K) + 2; }

/* ---- LM head + cross-entropy ---- */

/* logits of row t: z[v] = x_t . w_v; returns the largest sum |x||w| of the row */
static double logits_of(const tcase *c, const arg *x, const arg *w, int t, double *z) {
    int h = c->d[1], V = c->d[2];
    double zm = 0;
    for (int v = 0; v < V; v++) {
        double acc = 0, m = 0;
        for (int j = 0; j < h; j++) {
            double p = in(x, (size_t)t * h + j) * in(w, (size_t)v * h + j);
            acc += p, m += fabs(p);
        }
        z[v] = acc, zm = fmax(zm, m);
    }
    return zm;
}
static double lse_of(const double *z, int V) {
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, z[v]);
    for (int v = 0; v < V; v++) s += exp(z[v] - mx);
    return mx + log(s);
}

static void lm_inputs(tcase *c, kt_rng *r) {
    int T = c->d[0], h = c->d[1], V = c->d[2];
    fill(c, add_arg(c, "x", IN, true, WP_F32, (size_t)T * h), r, -1, 1);
    fill(c, add_arg(c, "w_head", IN, true, WP_F32, (size_t)V * h), r, -0.5, 0.5);
    arg *tg = add_ints(c, "targets", T);
    for (int t = 0; t < T; t++) tg->iv[t] = t % 5 == 3 ? -1 : (int32_t)(kt_next(r) % (unsigned)V);
}

/* shape: T, h, V (T = 130 spans two of the CPU's 128-row blocks) */
enum { LF_LOSS, LF_LSE, LF_X, LF_W, LF_TGT };
static void build_lmhead_ce_fwd(tcase *c, kt_rng *r) {
    int T = c->d[0], h = c->d[1], V = c->d[2];
    add_arg(c, "losses", OUT, false, WP_F32, T);
    add_arg(c, "lse", OUT, false, WP_F32, T);
    lm_inputs(c, r);
    c->K = h + V;
    snprintf(c->what, sizeof c->what, "T=%d h=%d V=%d", T, h, V);
}
static void call_lmhead_ce_fwd(wp_kern *k, tcase *c, void **b) {
    kern_lmhead_ce_fwd(k, b[LF_LOSS], b[LF_LSE], b[LF_X], b[LF_W], b[LF_TGT], c->d[0], c->d[1], c->d[2]);
}
/* lse's magnitude |lse| + max_v sum|x||w| + 1 (a logit's rounding shifts it by that); a
 * masked loss must be exactly 0 */
static void ref_lmhead_ce_fwd(tcase *c) {
    int T = c->d[0], V = c->d[2];
    arg *loss = &c->a[LF_LOSS], *lse = &c->a[LF_LSE];
    const int32_t *tg = c->a[LF_TGT].iv;
    double *z = kt_doubles(V);
    for (int t = 0; t < T; t++) {
        double zm = logits_of(c, &c->a[LF_X], &c->a[LF_W], t, z), l = lse_of(z, V);
        lse->ref[t] = l, lse->mag[t] = fabs(l) + zm + 1;
        loss->ref[t] = tg[t] < 0 ? 0 : l - z[tg[t]];
        loss->mag[t] = tg[t] < 0 ? 0 : lse->mag[t] + fabs(z[tg[t]]);
    }
    free(z);
}
/* fp32 logits (dot over h), max and sum of exp over V, a log: K = h + V */
static double tol_lmhead(const tcase *c) { return 2 * sqrt(c->K) + 8; }

/* shape: T, h, V, outputs (0: dw_head fused, 1: dlogits_out and dw_head, 2: dlogits_out only);
 * code: dw's dtype */
enum { LB_DX, LB_DL, LB_DW, LB_X, LB_W, LB_TGT, LB_LSE };
static void build_lmhead_ce_bwd(tcase *c, kt_rng *r) {
    int T = c->d[0], h = c->d[1], V = c->d[2], mode = c->d[3];
    add_arg(c, "dx", OUT, true, WP_F32, (size_t)T * h);
    add_arg(c, "dlogits", OUT, true, WP_F32, mode ? (size_t)T * V : 0);
    arg *dw = add_arg(c, "dw_head", INOUT, false, (wp_dtype)c->code, mode < 2 ? (size_t)V * h : 0);
    if (dw->n) fill(c, dw, r, -1, 1);
    lm_inputs(c, r);
    arg *lse = add_arg(c, "lse", IN, false, WP_F32, T);
    double *z = kt_doubles(V);
    for (int t = 0; t < T; t++) {
        logits_of(c, &c->a[LB_X], &c->a[LB_W], t, z);
        lse->init[t] = (float)lse_of(z, V);
    }
    free(z);
    c->f[0] = 0.37f; /* dloss */
    c->K = h + V + T;
    static const char *modes[3] = {"dw fused", "dlogits + dw", "dlogits only"};
    snprintf(c->what, sizeof c->what, "T=%d h=%d V=%d %s dw %s", T, h, V, modes[mode], code_name(c->code));
}
static void call_lmhead_ce_bwd(wp_kern *k, tcase *c, void **b) {
    kern_lmhead_ce_bwd(k, b[LB_DX], b[LB_DL], b[LB_DW], c->a[LB_DW].dtype, b[LB_X], b[LB_W], b[LB_TGT], b[LB_LSE],
                       c->f[0], c->d[0], c->d[1], c->d[2]);
}
/* From the given lse: dlogits = (exp(z - lse) - onehot) dloss, 0 on masked rows; magnitude
 * |dloss| (p (1 + max sum|x||w|) + onehot). dx = dlogits W, dw += dlogits^T x. */
static void ref_lmhead_ce_bwd(tcase *c) {
    int T = c->d[0], h = c->d[1], V = c->d[2];
    arg *dx = &c->a[LB_DX], *dl = &c->a[LB_DL], *dw = &c->a[LB_DW], *x = &c->a[LB_X], *w = &c->a[LB_W];
    const int32_t *tg = c->a[LB_TGT].iv;
    double dloss = c->f[0], *z = kt_doubles(V), *g = kt_doubles(V), *gm = kt_doubles(V);
    for (size_t i = 0; i < dx->n; i++) dx->ref[i] = dx->mag[i] = 0;
    for (size_t i = 0; i < dw->n; i++) dw->ref[i] = in(dw, i), dw->mag[i] = fabs(in(dw, i));
    for (int t = 0; t < T; t++) {
        double zm = logits_of(c, x, w, t, z), l = in(&c->a[LB_LSE], t);
        for (int v = 0; v < V; v++) {
            double p = exp(z[v] - l), hot = v == tg[t];
            g[v] = tg[t] < 0 ? 0 : (p - hot) * dloss;
            gm[v] = tg[t] < 0 ? 0 : fabs(dloss) * (p * (1 + zm) + hot);
            if (dl->n) dl->ref[(size_t)t * V + v] = g[v], dl->mag[(size_t)t * V + v] = gm[v];
        }
        for (int v = 0; v < V; v++)
            for (int j = 0; j < h; j++) {
                size_t xi = (size_t)t * h + j, wi = (size_t)v * h + j;
                dx->ref[xi] += g[v] * in(w, wi), dx->mag[xi] += gm[v] * fabs(in(w, wi));
                if (dw->n) dw->ref[wi] += g[v] * in(x, xi), dw->mag[wi] += gm[v] * fabs(in(x, xi));
            }
    }
    free(z), free(g), free(gm);
}

/* shape: T, h, V. Forward and backward in one pass: losses as lmhead_ce_fwd's, dx and the fp32
 * dw_head (+=) as lmhead_ce_bwd's from the exact lse. */
enum { LFB_LOSS, LFB_DX, LFB_DW, LFB_X, LFB_W, LFB_TGT };
static void build_lmhead_ce_fwd_bwd(tcase *c, kt_rng *r) {
    int T = c->d[0], h = c->d[1], V = c->d[2];
    add_arg(c, "losses", OUT, false, WP_F32, T);
    add_arg(c, "dx", OUT, true, WP_F32, (size_t)T * h);
    fill(c, add_arg(c, "dw_head", INOUT, false, WP_F32, (size_t)V * h), r, -1, 1);
    lm_inputs(c, r);
    c->f[0] = 0.37f; /* dloss */
    c->K = h + V + T;
    snprintf(c->what, sizeof c->what, "T=%d h=%d V=%d", T, h, V);
}
static void call_lmhead_ce_fwd_bwd(wp_kern *k, tcase *c, void **b) {
    kern_lmhead_ce_fwd_bwd(k, b[LFB_LOSS], b[LFB_DX], b[LFB_DW], b[LFB_X], b[LFB_W], b[LFB_TGT], c->f[0], c->d[0],
                           c->d[1], c->d[2]);
}
static void ref_lmhead_ce_fwd_bwd(tcase *c) {
    int T = c->d[0], h = c->d[1], V = c->d[2];
    arg *loss = &c->a[LFB_LOSS], *dx = &c->a[LFB_DX], *dw = &c->a[LFB_DW], *x = &c->a[LFB_X], *w = &c->a[LFB_W];
    const int32_t *tg = c->a[LFB_TGT].iv;
    double dloss = c->f[0], *z = kt_doubles(V), *g = kt_doubles(V), *gm = kt_doubles(V);
    for (size_t i = 0; i < dx->n; i++) dx->ref[i] = dx->mag[i] = 0;
    for (size_t i = 0; i < dw->n; i++) dw->ref[i] = in(dw, i), dw->mag[i] = fabs(in(dw, i));
    for (int t = 0; t < T; t++) {
        double zm = logits_of(c, x, w, t, z), l = lse_of(z, V), lm = fabs(l) + zm + 1;
        loss->ref[t] = tg[t] < 0 ? 0 : l - z[tg[t]];
        loss->mag[t] = tg[t] < 0 ? 0 : lm + fabs(z[tg[t]]);
        for (int v = 0; v < V; v++) {
            double p = exp(z[v] - l), hot = v == tg[t];
            g[v] = tg[t] < 0 ? 0 : (p - hot) * dloss;
            gm[v] = tg[t] < 0 ? 0 : fabs(dloss) * (p * (1 + lm) + hot);
        }
        for (int v = 0; v < V; v++)
            for (int j = 0; j < h; j++) {
                size_t xi = (size_t)t * h + j, wi = (size_t)v * h + j;
                dx->ref[xi] += g[v] * in(w, wi), dx->mag[xi] += gm[v] * fabs(in(w, wi));
                dw->ref[wi] += g[v] * in(x, xi), dw->mag[wi] += gm[v] * fabs(in(x, xi));
            }
    }
    free(z), free(g), free(gm);
}

/* ---- AdamW ---- */

/* shape: n; code: w_out's dtype. One step (t = 3) with grad scaling and weight decay. */
enum { AD_MASTER, AD_M, AD_V, AD_GRAD, AD_W };
static void build_adamw(tcase *c, kt_rng *r) {
    size_t n = (size_t)c->d[0];
    fill(c, add_arg(c, "master", INOUT, false, WP_F32, n), r, -1, 1);
    fill(c, add_arg(c, "m", INOUT, false, WP_F32, n), r, -0.01, 0.01);
    fill(c, add_arg(c, "v", INOUT, false, WP_F32, n), r, 0, 1e-4);
    fill(c, add_arg(c, "grad", IN, false, WP_F32, n), r, -0.2, 0.2);
    add_arg(c, "w_out", OUT, false, (wp_dtype)c->code, n);
    /* every 8th element: moments so small that eps matters in sqrt(v) + eps */
    for (size_t i = 3; i < n; i += 8) {
        c->a[AD_M].init[i] = (float)(1e-9 * (2 * kt_unit(r) - 1));
        c->a[AD_V].init[i] = (float)(1e-15 * kt_unit(r));
        c->a[AD_GRAD].init[i] = (float)(1e-7 * (2 * kt_unit(r) - 1));
    }
    c->K = 1;
    snprintf(c->what, sizeof c->what, "n=%zu w_out %s", n, code_name(c->code));
}
static const float AD_LR = 1e-3f, AD_B1 = 0.9f, AD_B2 = 0.95f, AD_EPS = 1e-8f, AD_WD = 0.1f, AD_SCALE = 0.5f;
static float ad_bc(float beta) { return 1.0f - beta * beta * beta; }
static void call_adamw(wp_kern *k, tcase *c, void **b) {
    kern_adamw(k, b[AD_MASTER], b[AD_M], b[AD_V], b[AD_GRAD], AD_SCALE, b[AD_W], c->a[AD_W].dtype, c->a[0].n, AD_LR,
               AD_B1, AD_B2, AD_EPS, AD_WD, ad_bc(AD_B1), ad_bc(AD_B2));
}
/* adamw_multi: the same buffers cut into three pieces [n p / 3, n (p + 1) / 3) (empty ones left
 * out), the middle one without weight decay, as a chunk's norm between two matrices */
static float ad_multi_wd(size_t i, size_t n) { return i >= n / 3 && i < 2 * n / 3 ? 0.0f : AD_WD; }
static void call_adamw_multi(wp_kern *k, tcase *c, void **b) {
    const size_t n = c->a[0].n, ws = wp_dtype_size(c->a[AD_W].dtype);
    wp_adamw_piece host[3];
    int np = 0;
    for (int p = 0; p < 3; p++) {
        size_t lo = n * p / 3, hi = n * (p + 1) / 3;
        if (hi > lo)
            host[np++] = (wp_adamw_piece){.master = (float *)b[AD_MASTER] + lo, .m = (float *)b[AD_M] + lo,
                                          .v = (float *)b[AD_V] + lo, .grad = (const float *)b[AD_GRAD] + lo,
                                          .w_out = (char *)b[AD_W] + lo * ws, .n = hi - lo, .first = lo,
                                          .weight_decay = ad_multi_wd(lo, n)};
    }
    wp_adamw_piece *dev = kern_alloc(k, sizeof host); /* the pieces live in backend memory */
    if (!dev) return;
    kern_to_device(k, dev, host, (size_t)np * sizeof *host);
    kern_adamw_multi(k, dev, np, n, AD_SCALE, c->a[AD_W].dtype, AD_LR, AD_B1, AD_B2, AD_EPS, ad_bc(AD_B1), ad_bc(AD_B2));
    kern_sync(k);
    kern_free(k, dev);
}
static float ad_single_wd(size_t i, size_t n) { return (void)i, (void)n, AD_WD; }
/* the update of kernels.h in fp64 (hyperparameters as the fp32 values passed); the master's
 * magnitude carries m's through the ratio m / sqrt(v) */
static void ref_adamw_by(tcase *c, float (*wd_of)(size_t i, size_t n)) {
    arg *ms = &c->a[AD_MASTER], *m = &c->a[AD_M], *v = &c->a[AD_V], *gr = &c->a[AD_GRAD], *w = &c->a[AD_W];
    double b1 = AD_B1, b2 = AD_B2, bc1 = ad_bc(AD_B1), bc2 = ad_bc(AD_B2);
    for (size_t i = 0; i < ms->n; i++) {
        const double wd = wd_of(i, ms->n);
        double g = in(gr, i) * (double)AD_SCALE, m0 = in(m, i), v0 = in(v, i), w0 = in(ms, i);
        double m1 = b1 * m0 + (1 - b1) * g, m1m = fabs(b1 * m0) + fabs((1 - b1) * g);
        double v1 = b2 * v0 + (1 - b2) * g * g;
        double den = sqrt(v1 / bc2) + (double)AD_EPS;
        double w1 = w0 - (double)AD_LR * (m1 / bc1 / den + wd * w0);
        double w1m = fabs(w0) + (double)AD_LR * (m1m / bc1 / den + wd * fabs(w0));
        m->ref[i] = m1, m->mag[i] = m1m;
        v->ref[i] = v->mag[i] = v1;
        ms->ref[i] = w->ref[i] = w1, ms->mag[i] = w->mag[i] = w1m;
    }
}
static void ref_adamw(tcase *c) { ref_adamw_by(c, ad_single_wd); }
static void ref_adamw_multi(tcase *c) { ref_adamw_by(c, ad_multi_wd); }
#define build_adamw_multi build_adamw
/* a fixed chain of about six fp32 operations per value */
static double tol_adamw(const tcase *c) {
    (void)c;
    return 8;
}

/* ---- the table ---- */

static const int sizes_small[][MAX_DIMS] = {{1}, {7}, {1000}, {4099}};
static const int codes_pairs[] = {0, 1, 2, 3, 4, 5, 6, 7, 8}; /* dt * 3 + st */
static const int codes_all[] = {WP_F32, WP_F16, WP_BF16};
static const int codes_grad[] = {WP_F32, WP_BF16};
static const int codes_gemm[] = {CT, WP_F32, WP_BF16};
static const int shapes_gemm[][MAX_DIMS] = {
    {1, 1, 1, 0, 0, 0}, {7, 13, 5, 1, 0, 1}, {17, 33, 65, 0, 1, 0}, {33, 17, 64, 1, 1, 3}, {65, 70, 129, 0, 0, 2}};
static const int shapes_norm[][MAX_DIMS] = {{1, 5}, {7, 33}, {16, 64}, {5, 257}};
static const int shapes_norm_acc[][MAX_DIMS] = {{1, 5, 0}, {7, 33, 1}, {16, 64, 0}, {5, 257, 1}};
static const int shapes_rope[][MAX_DIMS] = {
    {2, 7, 3, 6, 0, 0}, {1, 5, 2, 8, 100, 1}, {1, 3, 2, 64, 16381, 0}, {3, 9, 4, 2, 0, 0}, {1, 4, 1, 130, 7, 1}};
static const int shapes_attn[][MAX_DIMS] = {
    {2, 7, 7, 4, 2, 6},     /* grouped heads, tiny head size */
    {1, 5, 11, 2, 1, 8},    /* queries are the last 5 of 11 positions */
    {1, 1, 1, 1, 1, 3},     /* one token */
    {1, 70, 100, 2, 2, 16}, /* two query tiles, two key tiles, a tensor-core head size on CUDA */
    {1, 65, 65, 3, 1, 64},  /* a tile plus one row, three heads on one kv head */
    /* document masks: short documents in a tile; long ones over 3 x 3 tiles (whole tiles skipped);
     * a segment's queries continuing an earlier document */
    {2, 9, 9, 2, 1, 8, 3},
    {1, 150, 150, 2, 1, 16, 40},
    {2, 70, 130, 2, 2, 16, 25},
};
static const int sizes_swiglu[][MAX_DIMS] = {{1}, {91}, {1000}, {4099}};
static const int shapes_emb[][MAX_DIMS] = {{1, 5, 3}, {7, 12, 37}, {64, 33, 40}, {200, 65, 16}};
static const int shapes_lm[][MAX_DIMS] = {{1, 3, 5}, {7, 12, 37}, {20, 9, 61}, {130, 16, 50}, {3, 24, 257}};
static const int shapes_lm_bwd[][MAX_DIMS] = {
    {1, 3, 5, 0}, {7, 12, 37, 1}, {20, 9, 61, 2}, {130, 16, 50, 1}, {3, 24, 257, 0}};
static const int sizes_adamw[][MAX_DIMS] = {{1}, {7}, {1001}, {4099}};
static const int sizes_mem[][MAX_DIMS] = {{1}, {1001}};

#define N(x) (int)(sizeof(x) / sizeof((x)[0]))
#define SHAPES(s) s, N(s)
#define CODES(c) c, N(c)
#define NOCODES NULL, 0
#define FNS(op) build_##op, call_##op, ref_##op

static const op_desc ops[] = {
    {"copy", SHAPES(sizes_mem), NOCODES, FNS(copy), NULL, 0, "exact"},
    {"zero", SHAPES(sizes_mem), NOCODES, FNS(zero), NULL, 0, "exact"},
    {"convert", SHAPES(sizes_small), CODES(codes_pairs), FNS(convert), NULL, 0, "exact (fp64 round to nearest even)"},
    {"accumulate", SHAPES(sizes_small), CODES(codes_pairs), FNS(accumulate), NULL, 0, "exact: dt(fp32(dst + src))"},
    {"scale", SHAPES(sizes_small), CODES(codes_all), FNS(scale), NULL, 0, "exact: t(fp32(x * a))"},
    {"sumsq", SHAPES(sizes_small), CODES(codes_all), FNS(sumsq), tol_sumsq, 0, "K u64 relative, K = n"},
    {"add", SHAPES(sizes_small), NOCODES, FNS(add), NULL, 0, "exact: fp32(a + b)"},
    {"gemm", SHAPES(shapes_gemm), CODES(codes_gemm), FNS(gemm), tol_gemm, 0,
     "2 sqrt(K) + 4 of |alpha| sum|a||b| + |beta c0|, K = k"},
    {"rmsnorm_fwd", SHAPES(shapes_norm), NOCODES, FNS(rmsnorm_fwd), tol_rmsnorm_fwd, 0,
     "2 sqrt(K) + 6 relative, K = h"},
    {"rmsnorm_bwd_input", SHAPES(shapes_norm_acc), NOCODES, FNS(rmsnorm_bwd_input), tol_rmsnorm_bwd_input, 0,
     "2 sqrt(K) + 8 of the terms' sizes, K = h"},
    {"rmsnorm_bwd_weight", SHAPES(shapes_norm), CODES(codes_grad), FNS(rmsnorm_bwd_weight), tol_rmsnorm_bwd_weight, 0,
     "2 sqrt(K) + 4 of |dw0| + sum|terms|, K = T"},
    {"rope_fwd", SHAPES(shapes_rope), NOCODES, build_rope, call_rope_fwd, ref_rope_fwd, tol_rope, 0,
     "4 of |x1 cos| + |x2 sin|"},
    {"rope_bwd", SHAPES(shapes_rope), NOCODES, build_rope, call_rope_bwd, ref_rope_bwd, tol_rope, 0,
     "4 of |x1 cos| + |x2 sin|"},
    {"attention_fwd", SHAPES(shapes_attn), NOCODES, FNS(attention_fwd), tol_attention, 2,
     "2 sqrt(K) + 8 of sum P|v| (1 + score size), K = hd + rep skv"},
    {"attention_bwd", SHAPES(shapes_attn), NOCODES, FNS(attention_bwd), tol_attention, 2,
     "2 sqrt(K) + 8 of the dS-term sizes, K = hd + rep skv"},
    {"swiglu_fwd", SHAPES(sizes_swiglu), NOCODES, FNS(swiglu_fwd), tol_swiglu_fwd, 0, "8 relative"},
    {"swiglu_bwd", SHAPES(sizes_swiglu), NOCODES, FNS(swiglu_bwd), tol_swiglu_bwd, 0,
     "16 of |dy up| s (1 + |g|), |dup|"},
    {"embedding_fwd", SHAPES(shapes_emb), NOCODES, FNS(embedding_fwd), NULL, 0, "exact (a gather)"},
    {"embedding_bwd", SHAPES(shapes_emb), CODES(codes_grad), FNS(embedding_bwd), tol_embedding_bwd, 0,
     "2 sqrt(K) + 2 of |dw0| + sum|dy|, K = T"},
    {"lmhead_ce_fwd", SHAPES(shapes_lm), NOCODES, FNS(lmhead_ce_fwd), tol_lmhead, 0,
     "2 sqrt(K) + 8 of |lse| + max sum|x||w| + 1, K = h + V"},
    {"lmhead_ce_bwd", SHAPES(shapes_lm_bwd), CODES(codes_grad), FNS(lmhead_ce_bwd), tol_lmhead, 1,
     "2 sqrt(K) + 8 of the dlogits-term sizes, K = h + V + T"},
    {"lmhead_ce_fwd_bwd", SHAPES(shapes_lm), NOCODES, FNS(lmhead_ce_fwd_bwd), tol_lmhead, 1,
     "2 sqrt(K) + 8 of the loss and dlogits-term sizes (lse computed, not given), K = h + V + T"},
    {"adamw", SHAPES(sizes_adamw), CODES(codes_all), FNS(adamw), tol_adamw, 0, "8 of the update's term sizes"},
    {"adamw_multi", SHAPES(sizes_adamw), CODES(codes_all), FNS(adamw_multi), tol_adamw, 0,
     "8 of the update's term sizes (three pieces, one launch)"},
};
enum { NOPS = N(ops) };

/* ---- running a row on a backend ---- */

typedef struct {
    float *out[MAX_ARGS]; /* outputs widened to fp32 */
    double f64;
} result;

/* a's values as the bytes of dtype t (or int32) */
static void *staged(const arg *a, wp_dtype t) {
    size_t es = a->ints ? 4 : wp_dtype_size(t);
    unsigned char *h = kt_alloc(a->n * es);
    if (a->ints)
        memcpy(h, a->iv, a->n * 4);
    else if (t == WP_F32)
        memcpy(h, a->init, a->n * 4);
    else
        for (size_t i = 0; i < a->n; i++) {
            uint16_t v = t == WP_F16 ? wp_f32_to_f16(a->init[i]) : wp_f32_to_bf16(a->init[i]);
            memcpy(h + 2 * i, &v, 2);
        }
    return h;
}

static result run_on(wp_kern *k, tcase *c) {
    result res = {{NULL}, 0};
    void *buf[MAX_ARGS] = {NULL};
    wp_dtype ct = kern_compute_dtype(k);
    wp_dtype keep = c->ct;
    c->ct = ct; /* storage of ct arguments in this backend */
    for (int i = 0; i < c->nargs; i++) {
        arg *a = &c->a[i];
        if (a->f64 || !a->n) continue;
        wp_dtype t = storage(c, a);
        size_t bytes = a->n * (a->ints ? 4 : wp_dtype_size(t));
        buf[i] = kern_alloc(k, bytes);
        void *h = staged(a, t);
        kern_to_device(k, buf[i], h, bytes);
        free(h);
    }
    c->op->call(k, c, buf);
    kern_sync(k);
    res.f64 = c->f64_got;
    for (int i = 0; i < c->nargs; i++) {
        arg *a = &c->a[i];
        if (a->role == IN || a->f64 || !a->n) continue;
        wp_dtype t = storage(c, a);
        unsigned char *h = kt_alloc(a->n * wp_dtype_size(t));
        kern_to_host(k, h, buf[i], a->n * wp_dtype_size(t));
        res.out[i] = kt_floats(a->n);
        for (size_t j = 0; j < a->n; j++) {
            uint16_t v;
            if (t == WP_F32)
                memcpy(&res.out[i][j], h + 4 * j, 4);
            else
                memcpy(&v, h + 2 * j, 2), res.out[i][j] = t == WP_F16 ? wp_f16_to_f32(v) : wp_bf16_to_f32(v);
        }
        free(h);
    }
    for (int i = 0; i < c->nargs; i++) kern_free(k, buf[i]);
    c->ct = keep;
    return res;
}

static void free_result(result *r) {
    for (int i = 0; i < MAX_ARGS; i++) free(r->out[i]);
}

/* |got - ref| / (u * mag); 0 when equal (infinities, exact zeros), inf when not finite */
static double err_units(double got, double ref, double mag, double u) {
    if (got == ref) return 0;
    if (!isfinite(got) || !isfinite(ref)) return INFINITY;
    return mag > 0 ? fabs(got - ref) / (u * mag) : INFINITY;
}

/* ---- the two halves ---- */

typedef struct {
    int rows, fails;
    double worst, worst32; /* largest error / tolerance (tolerance 0: 0 or inf); of outputs stored in fp32 */
} op_stats;

static op_stats cpu_stats[NOPS], gpu_stats[NOPS];

static unsigned long long row_seed(int op, int shape, int code) {
    return 0x5eed0000ull + (unsigned long long)op * 1000003ull + (unsigned long long)shape * 1009ull +
           (unsigned long long)code;
}

static void make_case(tcase *c, const op_desc *op, int si, int code, wp_dtype ct, unsigned long long seed) {
    memset(c, 0, sizeof *c);
    c->op = op, c->d = op->shapes[si], c->code = code, c->ct = ct, c->K = 1;
    kt_rng r = {seed};
    op->build(c, &r);
    op->reference(c);
}

static void note(op_stats *s, bool ok, double ratio, double ratio32) {
    s->rows++;
    s->fails += !ok;
    if (!(ratio <= s->worst)) s->worst = ratio;
    if (!(ratio32 <= s->worst32)) s->worst32 = ratio32;
}

static double ratio_of(double err, double tol) { return tol > 0 ? err / tol : err == 0 ? 0 : INFINITY; }

static void cpu_row(wp_kern *cpu, const op_desc *op, int oi, int si, int code) {
    tcase c;
    make_case(&c, op, si, code, WP_F32, row_seed(oi, si, code));
    result res = run_on(cpu, &c);
    const char *e = kern_error(cpu);
    char line[512];
    int len = snprintf(line, sizeof line, "cpu  %s %s:", op->name, c.what);
    bool ok = !e;
    double worst = e ? INFINITY : 0, worst32 = worst;
    for (int i = 0; i < c.nargs && !e; i++) {
        const arg *a = &c.a[i];
        if (a->role == IN || !a->n) continue;
        double u = a->f64 ? U64 : unit_of(storage(&c, a)), err = 0;
        double tol = op->cpu_tol ? op->cpu_tol(&c) * (a->f64 ? 1 : U32 / u) : 0;
        if (!a->f64 && u > U32 && op->cpu_tol) tol += 1 + op->cpu_tol(&c) * U32; /* rounding to 16 bits */
        if (a->f64)
            err = err_units(res.f64, a->ref[0], a->mag[0], u);
        else
            for (size_t j = 0; j < a->n; j++) err = fmax(err, err_units(res.out[i][j], a->ref[j], a->mag[j], u));
        ok = ok && err <= tol;
        worst = fmax(worst, ratio_of(err, tol));
        if (u <= U32) worst32 = fmax(worst32, ratio_of(err, tol));
        len += snprintf(line + len, sizeof line - (size_t)len, " %s %.3g u (tol %.3g u)", a->name, err, tol);
        if (len >= (int)sizeof line) len = (int)sizeof line - 1;
    }
    if (e)
        check_say(0, "%s kernel error: %s", line, e);
    else
        check_say(ok, "%s", line);
    note(&cpu_stats[oi], ok, worst, worst32);
    free_result(&res);
    free_case(&c);
}

static void gpu_row(wp_kern *cpu, wp_kern *gpu, const op_desc *op, int oi, int si, int code) {
    wp_dtype ct = kern_compute_dtype(gpu);
    tcase c;
    make_case(&c, op, si, code, ct, row_seed(oi, si, code)); /* inputs rounded to ct */
    result rc = run_on(cpu, &c), rg = run_on(gpu, &c);
    const char *e = kern_error(gpu);
    char line[512];
    int len = snprintf(line, sizeof line, "cuda %s %s [%s]:", op->name, c.what, dname(ct));
    bool ok = !e;
    double worst = e ? INFINITY : 0, worst32 = worst, uct = unit_of(ct);
    for (int i = 0; i < c.nargs && !e; i++) {
        const arg *a = &c.a[i];
        if (a->role == IN || !a->n) continue;
        double err = 0, tol;
        if (a->f64) { /* both within the CPU's bound of the fp64 value */
            tol = 2 * op->cpu_tol(&c);
            err = err_units(rg.f64, rc.f64, a->mag[0], U64);
        } else {
            wp_dtype tg = storage(&c, a), tc = a->ct ? WP_F32 : a->dtype;
            if (!op->cpu_tol) { /* exact: the CPU's result in the GPU's storage, bit for bit */
                tol = 0;
                for (size_t j = 0; j < a->n; j++)
                    err = fmax(err, err_units(rg.out[i][j], round_to(rc.out[i][j], tg), a->mag[j], uct));
            } else {
                tol = op->gpu_ct + (tg != WP_F32 ? unit_of(tg) / uct : 0) + (tc != WP_F32 ? unit_of(tc) / uct : 0) +
                      (op->cpu_tol(&c) + 2 * c.K + 16) * U32 / uct;
                for (size_t j = 0; j < a->n; j++)
                    err = fmax(err, err_units(rg.out[i][j], rc.out[i][j], a->mag[j], uct));
            }
        }
        ok = ok && err <= tol;
        worst = fmax(worst, ratio_of(err, tol));
        if (a->f64 || storage(&c, a) == WP_F32) worst32 = fmax(worst32, ratio_of(err, tol));
        len += snprintf(line + len, sizeof line - (size_t)len, " %s %.3g u (tol %.3g u)", a->name, err, tol);
        if (len >= (int)sizeof line) len = (int)sizeof line - 1;
    }
    if (e)
        check_say(0, "%s kernel error: %s", line, e);
    else
        check_say(ok, "%s", line);
    note(&gpu_stats[oi], ok, worst, worst32);
    free_result(&rc), free_result(&rg);
    free_case(&c);
}

/* Every op of kernels.h (the op slots of wp_kern_ops) and the memory ops that move values
 * have rows here. */
static void coverage(void) {
    int missing = 0;
    for (size_t i = 0; i < wp_kern_ops_slot_count(); i++) {
        const char *name = wp_kern_ops_slot_name(i);
        int g = wp_kern_ops_slot_group(i);
        if (g != WP_SLOT_OP && strcmp(name, "copy") != 0 && strcmp(name, "zero") != 0) continue;
        bool found = false;
        for (int o = 0; o < NOPS; o++) found = found || strcmp(ops[o].name, name) == 0;
        if (!found) printf("     no rows for kern_%s\n", name), missing++;
    }
    int unknown = 0;
    for (int o = 0; o < NOPS; o++) {
        bool found = false;
        for (size_t i = 0; i < wp_kern_ops_slot_count(); i++)
            found = found || strcmp(ops[o].name, wp_kern_ops_slot_name(i)) == 0;
        if (!found) printf("     rows for %s, which is no slot of wp_kern_ops\n", ops[o].name), unknown++;
    }
    check_say(missing == 0 && unknown == 0,
             "every op of kernels.h has rows in this table (%d ops, %d missing, %d unknown)", NOPS, missing, unknown);
}

static void summary(const char *half, const op_stats *st, bool gpu) {
    printf("\n%s half: op, rows, failed, largest error / tolerance (all outputs, fp32 outputs), tolerance rule\n",
           half);
    printf("  (%s)\n", gpu ? "u = the compute dtype's; CUDA's roundings to it (listed), one u of each 16-bit output "
                             "storage, the CPU rule and (2K + 16) 2^-24"
                           : "u = 2^-24, one u more for 16-bit outputs");
    for (int o = 0; o < NOPS; o++) {
        if (!st[o].rows) continue;
        printf("  %-20s %3d %3d  %8.3g %8.3g  ", ops[o].name, st[o].rows, st[o].fails, st[o].worst, st[o].worst32);
        if (gpu && !ops[o].cpu_tol)
            printf("bit for bit with the CPU\n");
        else if (gpu && ops[o].build == build_sumsq)
            printf("twice the CPU rule: %s\n", ops[o].rule);
        else if (gpu)
            printf("%g roundings + CPU rule: %s\n", ops[o].gpu_ct, ops[o].rule);
        else
            printf("%s\n", ops[o].rule);
    }
}

int main(void) {
    coverage();
    wp_kern *cpu = kt_cpu(2);
    for (int o = 0; o < NOPS; o++)
        for (int s = 0; s < ops[o].nshapes; s++)
            for (int ci = 0; ci < (ops[o].codes ? ops[o].ncodes : 1); ci++)
                cpu_row(cpu, &ops[o], o, s, ops[o].codes ? ops[o].codes[ci] : 0);
    summary("CPU", cpu_stats, false);

    char why[256];
    if (!kern_available(WP_BACKEND_CUDA, why, sizeof why)) {
        printf("\nskip the CUDA half (CUDA against the CPU): %s\n", why);
    } else {
        const wp_dtype cts[] = {WP_F16, WP_BF16, WP_F32};
        for (int t = 0; t < 3; t++) {
            wp_kern_opts o = {.kind = WP_BACKEND_CUDA, .compute = cts[t], .threads = 1, .device = 0};
            char err[256];
            wp_kern *gpu = kern_create(&o, err, sizeof err);
            if (!gpu) {
                check_say(0, "cuda context (%s): %s", dname(cts[t]), err);
                continue;
            }
            for (int op = 0; op < NOPS; op++)
                for (int s = 0; s < ops[op].nshapes; s++)
                    for (int ci = 0; ci < (ops[op].codes ? ops[op].ncodes : 1); ci++) {
                        gpu_row(cpu, gpu, &ops[op], op, s, ops[op].codes ? ops[op].codes[ci] : 0);
                    }
            kern_destroy(gpu);
        }
        summary("CUDA", gpu_stats, true);
    }
    kt_no_error(cpu, "ops");
    kern_destroy(cpu);
    return check_result("kernels/ops");
}
