/* Ranks as threads: several contexts used at the same time from their own pthreads (each with
 * its own OpenMP team and scratch, sharing OpenBLAS) give the same bits as one context
 * running the same work alone. The work mixes GEMMs (one large enough for OpenBLAS to use its
 * threads), the LM head and attention. */
#include <pthread.h>

#include "kt.h"

enum { RANKS = 3, THREADS = 2, T = 96, H = 32, V = 50, NH = 2, HD = 16, BIG = 192, REPEATS = 3 };

typedef struct {
    int threads;
    unsigned long long seed;
    float *out; /* gemm C, then dx of the LM head, then dq of attention */
    size_t n_out;
    const char *error;
} job;

static size_t out_floats(void) { return (size_t)T * H * 3 + (size_t)BIG * BIG; }

static void work(wp_kern *k, job *j) {
    kt_rng r = {j->seed};
    float *x = kt_floats((size_t)T * H), *w = kt_floats((size_t)V * H), *q = kt_floats((size_t)T * H);
    float *kk = kt_floats((size_t)T * H), *v = kt_floats((size_t)T * H), *o = kt_floats((size_t)T * H);
    float *lse = kt_floats((size_t)NH * T), *losses = kt_floats(T), *lse2 = kt_floats(T), *dw = kt_floats((size_t)V * H);
    float *dk = kt_floats((size_t)T * H), *dv = kt_floats((size_t)T * H);
    float *a = kt_floats((size_t)BIG * BIG), *b = kt_floats((size_t)BIG * BIG);
    int32_t *targets = kt_alloc(T * sizeof *targets);
    kt_fill(&r, a, (size_t)BIG * BIG, -1, 1), kt_fill(&r, b, (size_t)BIG * BIG, -1, 1);
    kt_fill(&r, x, (size_t)T * H, -1, 1), kt_fill(&r, w, (size_t)V * H, -1, 1), kt_fill(&r, q, (size_t)T * H, -1, 1);
    kt_fill(&r, kk, (size_t)T * H, -1, 1), kt_fill(&r, v, (size_t)T * H, -1, 1);
    for (int t = 0; t < T; t++) targets[t] = (int32_t)(kt_next(&r) % V);
    float *gemm_c = j->out, *dx = j->out + (size_t)T * H, *dq = dx + (size_t)T * H, *big = dq + (size_t)T * H;
    for (int rep = 0; rep < REPEATS; rep++) {
        kern_gemm(k, false, true, T, H, H, 1.0f, x, H, q, H, 0.0f, gemm_c, WP_F32, H);
        kern_gemm(k, true, false, BIG, BIG, BIG, 1.0f, a, BIG, b, BIG, 0.0f, big, WP_F32, BIG);
        kern_lmhead_ce_fwd(k, losses, lse2, x, w, targets, T, H, V);
        kern_lmhead_ce_bwd(k, dx, NULL, dw, WP_F32, x, w, targets, lse2, 1.0f / T, T, H, V);
        kern_attention_fwd(k, o, lse, q, kk, v, 1, T, T, NH, NH, HD, NULL);
        kern_attention_bwd(k, dq, dk, dv, o, q, kk, v, o, lse, 1, T, T, NH, NH, HD, NULL);
    }
    j->error = kern_error(k) ? "kernel error" : NULL;
    free(x), free(w), free(q), free(kk), free(v), free(o), free(lse), free(losses), free(lse2), free(dw), free(dk), free(dv);
    free(a), free(b), free(targets);
}

static void *rank_main(void *arg) {
    job *j = arg;
    wp_kern *k = kt_cpu(j->threads);
    work(k, j);
    kern_destroy(k);
    return NULL;
}

int main(void) {
    job alone[RANKS], together[RANKS];
    for (int i = 0; i < RANKS; i++) {
        alone[i] = (job){THREADS, 100 + (unsigned long long)i, kt_floats(out_floats()), out_floats(), NULL};
        together[i] = alone[i];
        together[i].out = kt_floats(out_floats());
        rank_main(&alone[i]);
    }
    pthread_t tid[RANKS];
    for (int i = 0; i < RANKS; i++) {
        int rc = pthread_create(&tid[i], NULL, rank_main, &together[i]);
        CHECK(rc == 0, "pthread_create: %s", strerror(rc));
    }
    for (int i = 0; i < RANKS; i++) {
        int rc = pthread_join(tid[i], NULL);
        CHECK(rc == 0, "pthread_join: %s", strerror(rc));
    }
    for (int i = 0; i < RANKS; i++) {
        check_say(!alone[i].error && !together[i].error &&
                      kt_same_bits(alone[i].out, together[i].out, out_floats() * sizeof(float)),
                  "rank %d (%d thread(s)): concurrent run gives the same bits as running alone", i, alone[i].threads);
        free(alone[i].out), free(together[i].out);
    }
    return check_result("kernels/concurrent");
}
