/* dtype sizes, names and scalar conversions (round to nearest even), shared by all backends;
 * the bit-level code lives in cpu/cpu.h so that CPU kernels inline it in their loops. */
#include "cpu.h"

size_t wp_dtype_size(wp_dtype t) {
    switch (t) {
    case WP_F32: return 4;
    case WP_F16:
    case WP_BF16: return 2;
    }
    return 0;
}

const char *wp_dtype_name(wp_dtype t) {
    switch (t) {
    case WP_F32: return "fp32";
    case WP_F16: return "fp16";
    case WP_BF16: return "bf16";
    }
    return "unknown";
}

uint16_t wp_f32_to_f16(float x) { return cpu_f32_to_f16(x); }
float wp_f16_to_f32(uint16_t h) { return cpu_f16_to_f32(h); }
uint16_t wp_f32_to_bf16(float x) { return cpu_f32_to_bf16(x); }
float wp_bf16_to_f32(uint16_t b) { return cpu_bf16_to_f32(b); }

float wp_round_to(float x, wp_dtype t) {
    switch (t) {
    case WP_F16: return cpu_f16_to_f32(cpu_f32_to_f16(x));
    case WP_BF16: return cpu_bf16_to_f32(cpu_f32_to_bf16(x));
    case WP_F32: break;
    }
    return x;
}
