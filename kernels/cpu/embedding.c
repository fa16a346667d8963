/* Token embedding: a row gather forward, a deterministic scatter-add backward. */
#include <stdlib.h>

#include "cpu.h"

enum { COLS = 256 };

/* The embedding gets no vocabulary size, so only negative ids can be caught here. */
static bool tokens_ok(wp_kern *k, const int32_t *tokens, int T, const char *who) {
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0) {
            kern_set_error(k, "%s: tokens[%d] = %d is negative", who, t, tokens[t]);
            return false;
        }
    return true;
}

void cpu_embedding_fwd(wp_kern *k, void *y, const int32_t *tokens, const void *wte, int T, int h) {
    if (!tokens_ok(k, tokens, T, "kern_embedding_fwd")) return;
    float *yf = y;
    const float *w = wte;
#pragma omp parallel for num_threads(cpu_threads(k)) if (T >= 64) schedule(static)
    for (int t = 0; t < T; t++) memcpy(yf + (size_t)t * h, w + (size_t)tokens[t] * h, (size_t)h * sizeof(float));
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Adds dy of the tokens order[first..] that share one id to its row: fp32 sums in token order,
 * one rounding into dwte. */
static void add_group(void *dwte, wp_dtype dwtype, const uint64_t *order, int first, int count, const float *dy,
                      int h) {
    size_t row = (size_t)(order[first] >> 32) * h;
    for (int j0 = 0; j0 < h; j0 += COLS) {
        int len = h - j0 < COLS ? h - j0 : COLS;
        float acc[COLS];
        cpu_load(acc, dwte, dwtype, row + j0, (size_t)len);
        for (int i = first; i < first + count; i++) {
            const float *d = dy + (size_t)(order[i] & 0xffffffffu) * h + j0;
            for (int j = 0; j < len; j++) acc[j] += d[j];
        }
        cpu_store(dwte, dwtype, row + j0, acc, (size_t)len);
    }
}

/* Sorting (id, position) pairs groups repeated ids with their positions in token order; each
 * id's row is then owned by one thread, so the result does not depend on the threads. */
void cpu_embedding_bwd(wp_kern *k, void *dwte, wp_dtype dwtype, const int32_t *tokens, const void *dy, int T, int h) {
    if (!tokens_ok(k, tokens, T, "kern_embedding_bwd")) return;
    uint64_t *order = cpu_scratch(k, CPU_SCRATCH_INDEX, (size_t)T * sizeof *order, "kern_embedding_bwd");
    if (!order) return;
    for (int t = 0; t < T; t++) order[t] = (uint64_t)(uint32_t)tokens[t] << 32 | (uint32_t)t;
    qsort(order, (size_t)T, sizeof *order, cmp_u64);
#pragma omp parallel for num_threads(cpu_threads(k)) if (T >= 64) schedule(dynamic, 16)
    for (int i = 0; i < T; i++) {
        if (i > 0 && order[i] >> 32 == order[i - 1] >> 32) continue; /* not the first of its id */
        int count = 1;
        while (i + count < T && order[i + count] >> 32 == order[i] >> 32) count++;
        add_group(dwte, dwtype, order, i, count, dy, h);
    }
}
