/* fp16 and bf16 conversions: all 65536 bit patterns round-trip (NaNs stay NaN, quieted), and
 * fp32 -> 16 bit matches a reference rounding computed in fp64 with rint() (round to nearest
 * even) on random floats over the whole range plus constructed ties and edge cases. Also the
 * CPU backend's vectorisable exp against libm. */
#include <stdint.h>

#include "cpu.h"
#include "kt.h"

typedef struct {
    const char *name;
    int mant_bits;  /* explicit fraction bits */
    int emin;       /* exponent of the smallest normal */
    double max;     /* largest finite value */
    uint16_t quiet; /* the quiet bit of a NaN */
    uint16_t (*from_f32)(float);
    float (*to_f32)(uint16_t);
} fmt16;

static const fmt16 F16 = {"fp16", 10, -14, 65504.0, 0x0200, wp_f32_to_f16, wp_f16_to_f32};
static const fmt16 BF16 = {"bf16", 7, -126, 0x1.FEp127, 0x0040, wp_f32_to_bf16, wp_bf16_to_f32};

/* The value of a 16-bit pattern, decoded from its fields with ldexp (independent of the code
 * under test). */
static double decode(const fmt16 *f, uint16_t h) {
    int ebits = 15 - f->mant_bits, bias = (1 << (ebits - 1)) - 1;
    int e = (h >> f->mant_bits) & ((1 << ebits) - 1);
    int m = h & ((1 << f->mant_bits) - 1);
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (e == (1 << ebits) - 1) return m ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexp(m, 1 - bias - f->mant_bits);
    return sign * ldexp(m + (1 << f->mant_bits), e - bias - f->mant_bits);
}

/* Round x to the format in fp64: scale to units of the last place, rint (ties to even). */
static double reference_round(const fmt16 *f, float x) {
    double v = x;
    if (isnan(v) || isinf(v) || v == 0) return v;
    int e;
    frexp(v, &e); /* v = fr * 2^e, 0.5 <= |fr| < 1 */
    int exp = e - 1 < f->emin ? f->emin : e - 1;
    double ulp = ldexp(1.0, exp - f->mant_bits);
    double r = rint(v / ulp) * ulp;
    if (fabs(r) > f->max) return v > 0 ? INFINITY : -INFINITY;
    return r;
}

static int same_value(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void roundtrip_all(const fmt16 *f) {
    int bad_trip = 0, bad_value = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float x = f->to_f32(h);
        if (!same_value(x, decode(f, h))) bad_value++;
        uint16_t back = f->from_f32(x);
        int is_nan = isnan(decode(f, h));
        if (is_nan ? back != (h | f->quiet) : back != h) bad_trip++;
    }
    check_say(bad_value == 0, "%s: all 65536 patterns decode to their exact value (%d wrong)", f->name, bad_value);
    check_say(bad_trip == 0, "%s: all 65536 patterns round-trip through fp32 (NaNs quieted; %d wrong)", f->name,
              bad_trip);
}

static int check_one(const fmt16 *f, float x, int *printed) {
    double want = reference_round(f, x), got = f->to_f32(f->from_f32(x));
    if (same_value(got, want) || (want == 0 && got == 0 && signbit(got) == signbit(x))) return 0;
    if ((*printed)++ < 5) printf("     %s(%a) = %a, reference %a\n", f->name, (double)x, got, want);
    return 1;
}

static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static void rounding(const fmt16 *f, kt_rng *r) {
    int bad = 0, printed = 0, n = 0;
    /* random bit patterns: every exponent, subnormals, inf and NaN */
    for (int i = 0; i < 2000000; i++, n++) bad += check_one(f, bits_f32((uint32_t)kt_next(r)), &printed);
    /* values near the format's range, where rounding to subnormal/inf happens */
    for (int i = 0; i < 1000000; i++, n++) {
        double mag = ldexp(1.0, (int)(kt_unit(r) * (f->mant_bits + 40)) + f->emin - f->mant_bits - 2);
        double v = mag * (1 + kt_unit(r)) * (kt_next(r) & 1 ? -1 : 1);
        if (f == &F16) v = fmod(v, 70000.0);
        bad += check_one(f, (float)v, &printed);
    }
    /* exact ties: halfway between two neighbours of the format, both parities */
    for (int i = 0; i < 200000; i++, n++) {
        uint16_t h = (uint16_t)(kt_next(r) & 0x7fff);
        double a = decode(f, h), b = decode(f, (uint16_t)(h + 1));
        if (!isfinite(a) || !isfinite(b)) continue;
        bad += check_one(f, (float)((a + b) / 2), &printed);
        bad += check_one(f, -(float)((a + b) / 2), &printed);
    }
    float edges[] = {0.0f,          -0.0f,          INFINITY,       -INFINITY,      NAN,
                     1.0f,          -1.0f,          65504.0f,       65519.996f,     65520.0f,
                     -65520.0f,     0x1p-14f,       0x1p-24f,       0x1p-25f,       0x1.000002p-25f,
                     0x1.8p-24f,    0x1.8p-25f,     0x1.fffffep127f, -0x1.fffffep127f, 0x1p-126f,
                     0x1p-149f,     0x1.ffp-127f,   0x1.FEp127f,    0x1.FFp127f,    0x1.FE8p127f,
                     3.14159265f,   1.0f / 3.0f,    0x1.0001p0f,    0x1.00008p0f,   0x1.00018p0f};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++, n++) bad += check_one(f, edges[i], &printed);
    check_say(bad == 0, "%s: rounding of %d floats (random, near range limits, ties, edges) matches rint() (%d wrong)",
              f->name, n, bad);
}

/* An independent second opinion where the compiler has a native half type. */
static void compiler_half(kt_rng *r) {
#ifdef __FLT16_MAX__
    int bad = 0;
    for (int i = 0; i < 1000000; i++) {
        float x = bits_f32((uint32_t)kt_next(r));
        _Float16 h = (_Float16)x;
        uint16_t want;
        memcpy(&want, &h, sizeof want);
        uint16_t got = wp_f32_to_f16(x);
        if (isnan(x) ? !isnan((float)h) || (got & 0x7c00) != 0x7c00 || !(got & 0x3ff) : got != want) bad++;
    }
    check_say(bad == 0, "fp16: 1e6 random floats convert like the compiler's _Float16 (%d differ)", bad);
#else
    (void)r;
    printf("note: no _Float16 in this compiler; the fp64 reference alone checks fp16 rounding\n");
#endif
}

/* cpu_expf against exp() in fp64 on a dense sweep; stated tolerance 8 ulp (2^-21 relative). */
static void fast_exp(void) {
    double worst = 0, at = 0;
    for (double x = -87.3; x <= 88.0; x += 1.0 / 4096) {
        float xf = (float)x;
        double want = exp((double)xf), got = cpu_expf(xf), rel = fabs(got - want) / want;
        if (rel > worst) worst = rel, at = xf;
    }
    check_say(worst <= 8 * 0x1p-24, "cpu_expf: max relative error %.3g at x = %.4f on [-87.3, 88] (tolerance %.3g)",
              worst, at, 8 * 0x1p-24);
    check_say(cpu_expf(-INFINITY) == 0.0f && cpu_expf(-90.0f) == 0.0f && cpu_expf(0.0f) == 1.0f &&
                  isinf(cpu_expf(89.0f)),
              "cpu_expf: exp(-inf) = exp(-90) = 0, exp(0) = 1, exp(89) = inf");
}

int main(void) {
    kt_rng r = {20240601};
    check_say(wp_dtype_size(WP_F32) == 4 && wp_dtype_size(WP_F16) == 2 && wp_dtype_size(WP_BF16) == 2,
              "dtype sizes 4/2/2");
    check_say(!strcmp(wp_dtype_name(WP_F32), "fp32") && !strcmp(wp_dtype_name(WP_F16), "fp16") &&
                  !strcmp(wp_dtype_name(WP_BF16), "bf16"),
              "dtype names");
    roundtrip_all(&F16);
    roundtrip_all(&BF16);
    rounding(&F16, &r);
    rounding(&BF16, &r);
    compiler_half(&r);
    float x = kt_uniform(&r, -3, 3);
    check_say(wp_round_to(x, WP_F32) == x && wp_round_to(x, WP_BF16) == wp_bf16_to_f32(wp_f32_to_bf16(x)) &&
                  wp_round_to(x, WP_F16) == wp_f16_to_f32(wp_f32_to_f16(x)),
              "wp_round_to agrees with the scalar conversions");
    fast_exp();
    return check_result("kernels/dtype");
}
