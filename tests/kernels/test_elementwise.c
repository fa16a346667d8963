/* Elementwise kernels over every dtype pair: convert, accumulate and scale are checked bit for
 * bit against the scalar conversions (fp32 arithmetic, one rounding), sum of squares against
 * fp64 (and for inf/NaN propagation and thread-count independence), add exactly. Sizes cross
 * the kernels' block and threading thresholds. Outputs larger than the last-level cache are
 * written with non-temporal stores: a context that streams every output runs the same checks,
 * and convert (and zero, threaded) into buffers at every alignment. */
#include "cpu.h"
#include "kt.h"

static const wp_dtype dtypes[] = {WP_F32, WP_F16, WP_BF16};

static void *buf_of(wp_dtype t, size_t n) { return kt_alloc(n * wp_dtype_size(t)); }

static float get(const void *p, wp_dtype t, size_t i) {
    if (t == WP_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == WP_F16 ? wp_f16_to_f32(h) : wp_bf16_to_f32(h);
}

static void put(void *p, wp_dtype t, size_t i, float x) {
    if (t == WP_F32) ((float *)p)[i] = x;
    else ((uint16_t *)p)[i] = t == WP_F16 ? wp_f32_to_f16(x) : wp_f32_to_bf16(x);
}

static void fill(kt_rng *r, void *p, wp_dtype t, size_t n, float range) {
    for (size_t i = 0; i < n; i++) put(p, t, i, kt_uniform(r, -range, range));
}

/* bitwise comparison through get(): NaN never expected here */
static size_t count_diff(const void *p, wp_dtype t, const float *want, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float g = get(p, t, i);
        bad += memcmp(&g, &want[i], sizeof g) != 0;
    }
    return bad;
}

static void convert_accumulate_scale(wp_kern *k, kt_rng *r, size_t n) {
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            wp_dtype dt = dtypes[a], st = dtypes[b];
            void *src = buf_of(st, n), *dst = buf_of(dt, n);
            float *want = kt_floats(n);
            fill(r, src, st, n, 100);
            fill(r, dst, dt, n, 100);
            for (size_t i = 0; i < n; i++) want[i] = wp_round_to(get(dst, dt, i) + get(src, st, i), dt);
            kern_accumulate(k, dst, dt, src, st, n);
            size_t bad_acc = count_diff(dst, dt, want, n);
            for (size_t i = 0; i < n; i++) want[i] = wp_round_to(get(src, st, i), dt);
            kern_convert(k, dst, dt, src, st, n);
            size_t bad_conv = count_diff(dst, dt, want, n);
            check_say(bad_acc == 0 && bad_conv == 0, "convert/accumulate %s <- %s n=%zu: %zu / %zu elements differ",
                      wp_dtype_name(dt), wp_dtype_name(st), n, bad_conv, bad_acc);
            free(src), free(dst), free(want);
        }
    for (int a = 0; a < 3; a++) {
        wp_dtype t = dtypes[a];
        void *x = buf_of(t, n);
        float *want = kt_floats(n), s = kt_uniform(r, -3, 3);
        fill(r, x, t, n, 10);
        for (size_t i = 0; i < n; i++) want[i] = wp_round_to(get(x, t, i) * s, t);
        kern_scale(k, x, t, s, n);
        size_t bad = count_diff(x, t, want, n);
        check_say(bad == 0, "scale %s n=%zu by %g: %zu elements differ", wp_dtype_name(t), n, s, bad);
        free(x), free(want);
    }
}

static void sumsq(wp_kern *k, wp_kern *k3, kt_rng *r, size_t n) {
    for (int a = 0; a < 3; a++) {
        wp_dtype t = dtypes[a];
        void *x = buf_of(t, n);
        fill(r, x, t, n, 4);
        double ref = 0;
        for (size_t i = 0; i < n; i++) ref += (double)get(x, t, i) * get(x, t, i);
        double got = kern_sumsq(k, x, t, n), got3 = kern_sumsq(k3, x, t, n);
        /* fp64 sums of exact fp64 squares: error below n * 2^-53 relative */
        double tol = (double)n * 0x1p-53;
        check_say(fabs(got - ref) <= tol * ref && got == got3,
                  "sumsq %s n=%zu: rel err %.2e (tol %.1e), 1 and 3 threads identical", wp_dtype_name(t), n,
                  fabs(got - ref) / ref, tol);
        put(x, t, n / 2, INFINITY);
        double with_inf = kern_sumsq(k, x, t, n);
        put(x, t, n / 3, NAN);
        double with_nan = kern_sumsq(k, x, t, n);
        check_say(isinf(with_inf) && isnan(with_nan), "sumsq %s n=%zu: an inf gives inf (%g), a NaN gives NaN (%g)",
                  wp_dtype_name(t), n, with_inf, with_nan);
        free(x);
    }
}

static void add(wp_kern *k, kt_rng *r, size_t n) {
    float *a = kt_floats(n), *b = kt_floats(n), *y = kt_floats(n);
    kt_fill(r, a, n, -5, 5);
    kt_fill(r, b, n, -5, 5);
    kern_add(k, y, a, b, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += y[i] != a[i] + b[i];
    kern_add(k, a, a, b, n); /* aliasing y = a */
    check_say(bad == 0 && kt_same_bits(a, y, n * sizeof *a), "add n=%zu: exact (%zu differ), in place identical", n, bad);
    free(a), free(b), free(y);
}

/* The bulk conversions (vectorised, F16C where the CPU has it) against the scalar ones bit for
 * bit: every fp16 and bf16 pattern to fp32, and to fp16/bf16 the fp32 patterns at and around
 * every fp16 value and halfway point (ties, subnormals, overflow, NaN payloads) plus a stride
 * through all 2^32. */
static void conversion_bits(wp_kern *k) {
    enum { N16 = 65536, AROUND = 10 };
    static const int32_t delta[AROUND] = {0, 1, -1, 0x1000, 0xfff, 0x1001, 0x8000, 0x7fff, 0x8001, 0x10000};
    size_t nf = 2 * N16 * AROUND + (1u << 20);
    uint16_t *h = kt_alloc(N16 * sizeof *h), *o16 = kt_alloc(nf * sizeof *o16);
    float *f = kt_floats(N16 > nf ? N16 : nf);
    uint32_t *bits = kt_alloc(nf * sizeof *bits);
    for (int t = 0; t < 2; t++) { /* 16 bits -> fp32, every pattern */
        wp_dtype st = t ? WP_BF16 : WP_F16;
        for (size_t i = 0; i < N16; i++) h[i] = (uint16_t)i;
        kern_convert(k, f, WP_F32, h, st, N16);
        size_t bad = 0;
        for (size_t i = 0; i < N16; i++) {
            float want = t ? wp_bf16_to_f32(h[i]) : wp_f16_to_f32(h[i]);
            bad += memcmp(&want, &f[i], sizeof want) != 0;
        }
        check_say(bad == 0, "convert %s -> fp32, all 65536 patterns: %zu differ from the scalar conversion",
                  wp_dtype_name(st), bad);
    }
    size_t n = 0;
    for (uint32_t i = 0; i < N16; i++)
        for (int d = 0; d < AROUND; d++) {
            float x = wp_f16_to_f32((uint16_t)i), y = wp_bf16_to_f32((uint16_t)i);
            uint32_t ux, uy;
            memcpy(&ux, &x, sizeof ux);
            memcpy(&uy, &y, sizeof uy);
            bits[n++] = ux + (uint32_t)delta[d];
            bits[n++] = uy + (uint32_t)delta[d];
        }
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) bits[n++] = (uint32_t)u;
    memcpy(f, bits, n * sizeof *f);
    for (int t = 0; t < 2; t++) {
        wp_dtype dt = t ? WP_BF16 : WP_F16;
        kern_convert(k, o16, dt, f, WP_F32, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += o16[i] != (t ? wp_f32_to_bf16(f[i]) : wp_f32_to_f16(f[i]));
        check_say(bad == 0, "convert fp32 -> %s, %zu patterns (ties, subnormals, NaNs, a stride of 4099): %zu differ",
                  wp_dtype_name(dt), n, bad);
    }
    free(h);
    free(o16);
    free(f);
    free(bits);
}

/* convert from fp32 and zero at every byte offset a 16-byte store can straddle, against the
 * scalar conversions and memset; the bytes around the output must stay as they were. */
static void streamed_offsets(wp_kern *k, kt_rng *r, size_t n) {
    enum { PAD = 64 };
    float *src = kt_floats(n);
    kt_fill(r, src, n, -70000, 70000);
    unsigned char *out = kt_alloc(n * 4 + 2 * PAD), *want = kt_alloc(n * 4 + 2 * PAD);
    size_t bad = 0, checks = 0;
    for (int a = 0; a < 3; a++)
        for (size_t off = 0; off < 16; off += wp_dtype_size(dtypes[a]), checks += 2) {
            wp_dtype dt = dtypes[a];
            size_t bytes = n * wp_dtype_size(dt);
            memset(out, 0xa5, bytes + 2 * PAD);
            memset(want, 0xa5, bytes + 2 * PAD);
            for (size_t i = 0; i < n; i++) put(want + PAD + off, dt, i, src[i]);
            kern_convert(k, out + PAD + off, dt, src, WP_F32, n);
            bad += memcmp(out, want, bytes + 2 * PAD) != 0;
            memset(want + PAD + off, 0, bytes);
            kern_zero(k, out + PAD + off, bytes);
            bad += memcmp(out, want, bytes + 2 * PAD) != 0;
        }
    check_say(bad == 0, "streamed convert and zero n=%zu at every offset: %zu of %zu differ", n, bad, checks);
    free(src), free(out), free(want);
}

int main(void) {
    kt_rng r = {23};
    wp_kern *k = kt_cpu(2), *k3 = kt_cpu(3), *ks = kt_cpu(2);
    cpu_of(ks)->stream_min = 0;
    size_t sizes[] = {1, 7, 2049, 70001, 300007};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        convert_accumulate_scale(k, &r, sizes[i]);
        convert_accumulate_scale(ks, &r, sizes[i]);
        sumsq(k, k3, &r, sizes[i]);
        add(k, &r, sizes[i]);
        streamed_offsets(ks, &r, sizes[i]);
    }
    streamed_offsets(ks, &r, (size_t)3 << 20); /* zeroed in shares on both threads */
    conversion_bits(k);
    conversion_bits(ks);
    kt_no_error(ks, "elementwise, streamed");
    kern_destroy(ks);
    kt_no_error(k, "elementwise");
    kern_destroy(k);
    kern_destroy(k3);
    return check_result("kernels/elementwise");
}
