/* CUDA elementwise kernels against the CPU backend: conversions (every 16-bit pattern, and
 * random and edge-case floats, bit for bit), accumulate / scale / add (bit for bit: one fp32
 * operation and one rounding on both sides), SwiGLU (expf may differ by an ulp: bound u),
 * sum of squares (fp64, inf/NaN propagate), AdamW (fp32; the GPU contracts to FMA). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

static const wp_dtype all_types[] = {WP_F32, WP_F16, WP_BF16};

/* widen every 16-bit pattern of t on the GPU and on the host; NaNs need only stay NaN */
static void check_widen_all_patterns(gh_pair *p, wp_dtype t) {
    uint16_t *bits = malloc(65536 * sizeof *bits);
    float *got = gh_floats(65536);
    for (int i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
    void *src = gh_out(p->gpu, 65536 * 2), *dst = gh_out(p->gpu, 65536 * 4);
    kern_to_device(p->gpu, src, bits, 65536 * 2);
    kern_convert(p->gpu, dst, WP_F32, src, t, 65536);
    kern_to_host(p->gpu, got, dst, 65536 * 4);
    gh_ok(p->gpu, "widen");
    int bad = 0;
    for (int i = 0; i < 65536 && !bad; i++) {
        float want = t == WP_F16 ? wp_f16_to_f32(bits[i]) : wp_bf16_to_f32(bits[i]);
        if (isnan(want) ? !isnan(got[i]) : memcmp(&want, &got[i], 4) != 0) {
            check_say(false, "%s -> f32 of 0x%04x: got %a, want %a", wp_dtype_name(t), i, got[i], want);
            bad = 1;
        }
    }
    if (!bad) check_say(true, "%s -> f32: all 65536 patterns match the host conversion", wp_dtype_name(t));
    kern_free(p->gpu, src);
    kern_free(p->gpu, dst);
    free(bits);
    free(got);
}

/* random floats over a wide exponent range plus edge cases, narrowed on GPU vs host */
static void check_narrow(gh_pair *p, wp_dtype t) {
    enum { N = 200000 };
    float *x = gh_floats(N);
    wp_rng g = rng_seeded(11 + t);
    const float edges[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65520.0f, 65519.99f, 0x1p-24f, 0x1p-25f,
                           0x1.8p-25f, 0x1p-14f, 0x1.ff8p-15f, 3.3895314e38f, 0x1.fffffep127f, 0x1p-133f,
                           1.0f + 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 0x3p-11f, 1.0f + 0x3p-8f};
    size_t ne = sizeof edges / sizeof edges[0];
    memcpy(x, edges, sizeof edges);
    for (size_t i = ne; i < N; i++) x[i] = (float)((2 * rng_uniform(&g) - 1) * ldexp(1.0, (int)rng_below(&g, 80) - 40));
    void *src = gh_upload(p->gpu, x, N, WP_F32), *dst = gh_out(p->gpu, N * 2);
    uint16_t *got = malloc(N * 2);
    kern_convert(p->gpu, dst, t, src, WP_F32, N);
    kern_to_host(p->gpu, got, dst, N * 2);
    gh_ok(p->gpu, "narrow");
    int bad = 0;
    for (size_t i = 0; i < N && !bad; i++) {
        uint16_t want = t == WP_F16 ? wp_f32_to_f16(x[i]) : wp_f32_to_bf16(x[i]);
        if (got[i] != want) {
            check_say(false, "f32 -> %s of %a: got 0x%04x, want 0x%04x", wp_dtype_name(t), x[i], got[i], want);
            bad = 1;
        }
    }
    if (!bad) check_say(true, "f32 -> %s: %d values (incl. %zu edge cases) match the host bit for bit", wp_dtype_name(t), N, ne);
    kern_free(p->gpu, src);
    kern_free(p->gpu, dst);
    free(got);
    free(x);
}

/* dst(dt) += src(st), and x(t) *= a: identical bits to the CPU backend */
static void check_accumulate_scale(gh_pair *p, wp_dtype dt, wp_dtype st, size_t n) {
    wp_rng g = rng_seeded(100 + 3 * dt + st);
    float *d0 = gh_floats(n), *s0 = gh_floats(n), *ref = gh_floats(n), *got = gh_floats(n);
    gh_fill(&g, d0, n, 3.0f, dt);
    gh_fill(&g, s0, n, 3.0f, st);
    char what[96];
    for (int op = 0; op < 2; op++) {
        void *cd = gh_upload(p->cpu, d0, n, dt), *cs = gh_upload(p->cpu, s0, n, st);
        void *gd = gh_upload(p->gpu, d0, n, dt), *gs = gh_upload(p->gpu, s0, n, st);
        if (op == 0) {
            kern_accumulate(p->cpu, cd, dt, cs, st, n);
            kern_accumulate(p->gpu, gd, dt, gs, st, n);
            snprintf(what, sizeof what, "accumulate %s += %s, n=%zu", wp_dtype_name(dt), wp_dtype_name(st), n);
        } else {
            kern_scale(p->cpu, cd, dt, -1.37f, n);
            kern_scale(p->gpu, gd, dt, -1.37f, n);
            snprintf(what, sizeof what, "scale %s, n=%zu", wp_dtype_name(dt), n);
        }
        gh_download(p->cpu, ref, cd, n, dt);
        gh_download(p->gpu, got, gd, n, dt);
        gh_expect(what, got, ref, n, 0.0);
        kern_free(p->cpu, cd);
        kern_free(p->cpu, cs);
        kern_free(p->gpu, gd);
        kern_free(p->gpu, gs);
        if (st != dt) break; /* scale once per dtype */
    }
    free(d0), free(s0), free(ref), free(got);
}

/* y = a + b and SwiGLU fwd/bwd on ct buffers; the CPU result rounded to ct is the reference */
static void check_add_swiglu(wp_dtype ct, size_t n) {
    gh_pair p;
    gh_open(&p, ct);
    wp_rng g = rng_seeded(200 + ct);
    float *a = gh_floats(n), *b = gh_floats(n), *dy = gh_floats(n), *ref = gh_floats(n), *got = gh_floats(n);
    gh_fill(&g, a, n, 6.0f, ct);
    gh_fill(&g, b, n, 2.0f, ct);
    gh_fill(&g, dy, n, 1.0f, ct);
    const double u = gh_unit_roundoff(ct);
    void *ca = gh_upload(p.cpu, a, n, WP_F32), *cb = gh_upload(p.cpu, b, n, WP_F32), *cdy = gh_upload(p.cpu, dy, n, WP_F32);
    void *ga = gh_upload(p.gpu, a, n, ct), *gb = gh_upload(p.gpu, b, n, ct), *gdy = gh_upload(p.gpu, dy, n, ct);
    void *cy = gh_out(p.cpu, n * 4), *cy2 = gh_out(p.cpu, n * 4);
    void *gy = gh_out(p.gpu, n * wp_dtype_size(ct)), *gy2 = gh_out(p.gpu, n * wp_dtype_size(ct));
    char what[96];

    kern_add(p.cpu, cy, ca, cb, n);
    kern_add(p.gpu, gy, ga, gb, n);
    gh_download(p.cpu, ref, cy, n, WP_F32);
    for (size_t i = 0; i < n; i++) ref[i] = wp_round_to(ref[i], ct);
    gh_download(p.gpu, got, gy, n, ct);
    snprintf(what, sizeof what, "add %s n=%zu (bit for bit)", wp_dtype_name(ct), n);
    gh_expect(what, got, ref, n, 0.0);

    /* SwiGLU: one rounding per output; expf on the GPU and in libm may differ by an ulp */
    const double bound = u + 4e-6;
    kern_swiglu_fwd(p.cpu, cy, ca, cb, n);
    kern_swiglu_fwd(p.gpu, gy, ga, gb, n);
    gh_download(p.cpu, ref, cy, n, WP_F32);
    gh_download(p.gpu, got, gy, n, ct);
    snprintf(what, sizeof what, "swiglu_fwd %s n=%zu", wp_dtype_name(ct), n);
    gh_expect(what, got, ref, n, bound);
    kern_swiglu_bwd(p.cpu, cy, cy2, cdy, ca, cb, n);
    kern_swiglu_bwd(p.gpu, gy, gy2, gdy, ga, gb, n);
    gh_download(p.cpu, ref, cy, n, WP_F32);
    gh_download(p.gpu, got, gy, n, ct);
    snprintf(what, sizeof what, "swiglu_bwd dgate %s n=%zu", wp_dtype_name(ct), n);
    gh_expect(what, got, ref, n, bound);
    gh_download(p.cpu, ref, cy2, n, WP_F32);
    gh_download(p.gpu, got, gy2, n, ct);
    snprintf(what, sizeof what, "swiglu_bwd dup %s n=%zu", wp_dtype_name(ct), n);
    gh_expect(what, got, ref, n, bound);

    void *bufs_c[] = {ca, cb, cdy, cy, cy2}, *bufs_g[] = {ga, gb, gdy, gy, gy2};
    for (int i = 0; i < 5; i++) kern_free(p.cpu, bufs_c[i]), kern_free(p.gpu, bufs_g[i]);
    free(a), free(b), free(dy), free(ref), free(got);
    gh_close(&p);
}

/* fp64 sum of squares: summation order differs, so 1e-12 relative; inf and NaN propagate */
static void check_sumsq(gh_pair *p, wp_dtype t, size_t n) {
    wp_rng g = rng_seeded(300 + t);
    float *x = gh_floats(n);
    gh_fill(&g, x, n, 10.0f, t);
    void *cx = gh_upload(p->cpu, x, n, t), *gx = gh_upload(p->gpu, x, n, t);
    double want = kern_sumsq(p->cpu, cx, t, n), got = kern_sumsq(p->gpu, gx, t, n);
    gh_ok(p->gpu, "sumsq");
    double rel = fabs(got - want) / want;
    check_say(rel <= 1e-12, "sumsq %s n=%zu: %.17g vs CPU %.17g, rel %.3g (bound 1e-12)", wp_dtype_name(t), n, got, want,
              rel);
    const float specials[3][2] = {{INFINITY, 1.0f}, {NAN, 1.0f}, {INFINITY, NAN}};
    for (int c = 0; c < 3; c++) {
        float xs[2] = {specials[c][0], specials[c][1]};
        x[n / 3] = xs[0];
        x[n - 1] = xs[1];
        void *gs = gh_upload(p->gpu, x, n, t);
        double r = kern_sumsq(p->gpu, gs, t, n);
        check_say(c == 0 ? isinf(r) && r > 0 : isnan(r), "sumsq %s with %g and %g: %g", wp_dtype_name(t), xs[0], xs[1], r);
        kern_free(p->gpu, gs);
    }
    kern_free(p->cpu, cx);
    kern_free(p->gpu, gx);
    free(x);
}

/* AdamW: fp32 masters and moments within fp32 rounding (FMA contraction on the GPU),
 * the working copy within one rounding of wtype */
static void check_adamw(gh_pair *p, wp_dtype wtype, size_t n) {
    wp_rng g = rng_seeded(400 + wtype);
    float *init[4], *ref = gh_floats(n), *got = gh_floats(n);
    for (int i = 0; i < 4; i++) init[i] = gh_floats(n);
    gh_fill(&g, init[0], n, 0.5f, WP_F32); /* master */
    gh_fill(&g, init[1], n, 0.01f, WP_F32); /* m */
    for (size_t i = 0; i < n; i++) init[2][i] = (float)(1e-4 * rng_uniform(&g)); /* v >= 0 */
    gh_fill(&g, init[3], n, 0.1f, WP_F32);  /* grad */
    void *c[4], *gg[4];
    for (int i = 0; i < 4; i++) c[i] = gh_upload(p->cpu, init[i], n, WP_F32), gg[i] = gh_upload(p->gpu, init[i], n, WP_F32);
    void *cw = gh_out(p->cpu, n * wp_dtype_size(wtype)), *gw = gh_out(p->gpu, n * wp_dtype_size(wtype));
    const float b1 = 0.9f, b2 = 0.95f, bc1 = 1 - powf(b1, 3), bc2 = 1 - powf(b2, 3);
    kern_adamw(p->cpu, c[0], c[1], c[2], c[3], 0.5f, cw, wtype, n, 1e-3f, b1, b2, 1e-8f, 0.1f, bc1, bc2);
    kern_adamw(p->gpu, gg[0], gg[1], gg[2], gg[3], 0.5f, gw, wtype, n, 1e-3f, b1, b2, 1e-8f, 0.1f, bc1, bc2);
    const char *names[3] = {"master", "m", "v"};
    char what[96];
    for (int i = 0; i < 3; i++) {
        gh_download(p->cpu, ref, c[i], n, WP_F32);
        gh_download(p->gpu, got, gg[i], n, WP_F32);
        snprintf(what, sizeof what, "adamw %s (w_out %s) n=%zu", names[i], wp_dtype_name(wtype), n);
        gh_expect(what, got, ref, n, 1e-6);
    }
    gh_download(p->cpu, ref, cw, n, wtype);
    gh_download(p->gpu, got, gw, n, wtype);
    snprintf(what, sizeof what, "adamw w_out %s n=%zu", wp_dtype_name(wtype), n);
    gh_expect(what, got, ref, n, gh_unit_roundoff(wtype) + 1e-6);
    for (int i = 0; i < 4; i++) kern_free(p->cpu, c[i]), kern_free(p->gpu, gg[i]), free(init[i]);
    kern_free(p->cpu, cw);
    kern_free(p->gpu, gw);
    free(ref), free(got);
}

int main(void) {
    int rc = gh_require_gpu("gpu/elementwise");
    if (rc) return rc;
    gh_pair p;
    gh_open(&p, WP_F32);
    check_widen_all_patterns(&p, WP_F16);
    check_widen_all_patterns(&p, WP_BF16);
    check_narrow(&p, WP_F16);
    check_narrow(&p, WP_BF16);
    const size_t sizes[] = {1, 1000, 1 << 20 | 77};
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 3; d++)
            for (int s = 0; s < 3; s++) check_accumulate_scale(&p, all_types[d], all_types[s], sizes[i]);
    for (int d = 0; d < 3; d++) {
        check_sumsq(&p, all_types[d], 3000017);
        check_adamw(&p, all_types[d], 100003);
    }
    gh_close(&p);
    for (int d = 0; d < 3; d++) {
        check_add_swiglu(all_types[d], 7);
        check_add_swiglu(all_types[d], 500009);
    }
    return check_result("gpu/elementwise");
}
