/* optim.h's host placement (--optimizer-memory host) against device placement. The host update
 * runs the CPU kernels whatever the compute backend, so on every backend the state must be the
 * CPU reference's bit for bit: a device-placed optimizer on a CPU context. Runs with the CPU
 * backend everywhere (host vs device placement, the split real: separate allocations, a context
 * of its own, the staged copies) and, where a GPU is usable, with CUDA (pinned state, the
 * staging's async uploads, the gradient window in device memory).
 *
 * Model: 2 chunks (4097 and 1003 floats: odd, so no vector width divides them), 3 tensors each,
 * the middle one without weight decay. Per step, on each backend alike: two bf16 gradients
 * drained (optim_accumulate), an fp32 gradient added into the window a W-pass would write
 * (optim_grad, kern_accumulate on the compute context: one IEEE fp32 add per element on either
 * backend), a tied-style piece put back with add, the norm, the step, and the bf16 working copy
 * made after it (a step writes none: the next LOAD makes it).
 * Checks, bit for bit against the reference: each step's sum of squares, the uploaded working
 * copy (poisoned first), and after 3 steps masters, both moments and the zeroed gradient.
 *
 * Then the overlap (update_worker.c), timing-free: the model's tensor callback, which the step
 * calls, is a gate that holds any thread but the test's own. A host-placed step must return
 * with the update still held on the worker, the caller must be able to drain, norm and zero
 * around it (chunk 1's state, chunk 0's zeroing chained behind the step) without waiting, and
 * once the gate opens the working copy and the state must be the reference's bit for bit: a
 * LOAD after an UPDATE sees the new masters. */
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "optim.h"

static const size_t numel[2] = {4097, 1003};

static size_t m_numel(const void *ctx, int c) { (void)ctx; return numel[c]; }
/* The gate: counts the tensor callback's calls per thread kind; while armed, holds a call from
 * any thread but the test's (the update worker) until disarmed. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t main;
    bool armed, entered;
    long on_main, off_main;
} gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void gate_pass(void) {
    CHECK(!pthread_mutex_lock(&gate.mu), "pthread_mutex_lock");
    bool on_main = pthread_equal(pthread_self(), gate.main);
    if (on_main) gate.on_main++;
    else gate.off_main++;
    if (!on_main && gate.armed) {
        gate.entered = true;
        CHECK(!pthread_cond_broadcast(&gate.cv), "pthread_cond_broadcast");
        while (gate.armed) CHECK(!pthread_cond_wait(&gate.cv, &gate.mu), "pthread_cond_wait");
    }
    CHECK(!pthread_mutex_unlock(&gate.mu), "pthread_mutex_unlock");
}

static bool m_tensor(const void *ctx, int c, int i, size_t *off, bool *decay) {
    (void)ctx;
    gate_pass();
    if (i > 2) return false;
    *off = numel[c] * (size_t)i / 3;
    *decay = i != 1;
    return true;
}
static void m_init(const void *ctx, int c, uint64_t seed, float *dst) {
    (void)ctx;
    wp_rng g = rng_seeded(seed * 31 + (uint64_t)c);
    for (size_t i = 0; i < numel[c]; i++) dst[i] = 0.1f * (2.0f * (float)rng_uniform(&g) - 1.0f);
}

typedef struct {
    wp_kern *k;
    wp_optim *o;
} side;

static side open_side(wp_backend_kind kind, wp_optim_memory mem) {
    char err[512];
    wp_kern_opts ko = {.kind = kind, .compute = kind == WP_BACKEND_CUDA ? WP_BF16 : WP_F32, .threads = 2};
    side s = {.k = kern_create(&ko, err, sizeof err)};
    CHECK(s.k, "kern_create: %s", err);
    wp_optim_model m = {.ctx = NULL, .n_chunks = 2, .chunk_numel = m_numel, .tensor = m_tensor, .init_chunk = m_init};
    wp_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    wp_optim_place place = {.memory = mem, .threads = 2};
    s.o = optim_create_slices(m, s.k, (int[]){0, 1}, 2, 0, 0, &hp, &place, err, sizeof err);
    CHECK(s.o, "optim_create_slices: %s", err);
    CHECK(optim_memory(s.o) == mem, "optim_memory: %d, asked for %d", (int)optim_memory(s.o), (int)mem);
    CHECK(!optim_init_from_seed(s.o, 7), "init: %s", optim_error(s.o));
    return s;
}

/* One step's work on a side; w_host gets each chunk's bf16 working copy, sumsq each norm. */
static void step(side *s, int t, const float *const g[2][3], uint16_t *w_host[2], double sumsq[2]) {
    for (int c = 0; c < 2; c++) {
        size_t n = numel[c];
        void *g0 = gh_upload(s->k, g[c][0], n, WP_BF16), *g1 = gh_upload(s->k, g[c][1], n, WP_BF16);
        void *g2 = gh_upload(s->k, g[c][2], n, WP_F32);
        CHECK(!optim_accumulate(s->o, c, g0, WP_BF16), "accumulate: %s", optim_error(s->o));
        float *win = optim_grad(s->o, c); /* what a to_master W-pass adds into */
        CHECK(win, "optim_grad: %s", optim_error(s->o));
        kern_accumulate(s->k, win, WP_F32, g2, WP_F32, n);
        CHECK(!optim_accumulate(s->o, c, g1, WP_BF16), "accumulate after the window: %s", optim_error(s->o));
        /* a tied piece: the first 100 elements of the third gradient added again, as TIN does */
        CHECK(!optim_piece_put(s->o, c, WP_OPT_GRAD, n - 100, 100, g2, true), "piece_put: %s", optim_error(s->o));
        sumsq[c] = optim_chunk_sumsq(s->o, c);
        CHECK(!optim_step_chunk(s->o, c, 1e-3f * (float)(t + 1), 0.5f), "step: %s", optim_error(s->o));
        CHECK(!optim_zero_chunk_grad(s->o, c), "zero: %s", optim_error(s->o));
        void *w = gh_out(s->k, n * sizeof(uint16_t));
        CHECK(!optim_working_copy(s->o, c, w, WP_BF16), "working copy: %s", optim_error(s->o));
        kern_sync(s->k);
        kern_to_host(s->k, w_host[c], w, n * sizeof(uint16_t));
        kern_free(s->k, g0);
        kern_free(s->k, g1);
        kern_free(s->k, g2);
        kern_free(s->k, w);
        gh_ok(s->k, "step");
    }
}

static void compare(wp_backend_kind kind, const char *name) {
    side ref = open_side(WP_BACKEND_CPU, WP_OPTIM_MEM_DEVICE), got = open_side(kind, WP_OPTIM_MEM_HOST);
    wp_rng rg = rng_seeded(42);
    float *g[2][3];
    uint16_t *wr[2], *wg[2];
    for (int c = 0; c < 2; c++) {
        for (int j = 0; j < 3; j++) g[c][j] = gh_floats(numel[c]);
        wr[c] = malloc(numel[c] * 2);
        wg[c] = malloc(numel[c] * 2);
        CHECK(wr[c] && wg[c], "out of memory");
    }
    char what[160];
    for (int t = 0; t < 3; t++) {
        for (int c = 0; c < 2; c++)
            for (int j = 0; j < 3; j++) gh_fill(&rg, g[c][j], numel[c], 0.01f, j < 2 ? WP_BF16 : WP_F32);
        double sr[2], sg[2];
        step(&ref, t, (const float *const(*)[3])g, wr, sr);
        step(&got, t, (const float *const(*)[3])g, wg, sg);
        for (int c = 0; c < 2; c++) {
            snprintf(what, sizeof what, "%s step %d chunk %d: sum of squares %.17g (reference %.17g)", name, t + 1, c, sg[c], sr[c]);
            check_say(sg[c] == sr[c] && isfinite(sr[c]) && sr[c] > 0, "%s", what);
            snprintf(what, sizeof what, "%s step %d chunk %d: bf16 working copy", name, t + 1, c);
            gh_expect_same_bits(what, wg[c], wr[c], numel[c] * 2);
        }
    }
    static const char *const bufs[] = {"master", "exp_avg", "exp_avg_sq", "grad"};
    for (int c = 0; c < 2; c++)
        for (int b = 0; b < 4; b++) {
            float *x = gh_floats(numel[c]), *y = gh_floats(numel[c]);
            memset(x, 0xFF, numel[c] * sizeof *x);
            CHECK(!optim_get(ref.o, c, (wp_optim_buf)b, y) && !optim_get(got.o, c, (wp_optim_buf)b, x), "optim_get");
            const float *view = optim_host_view(got.o, c, (wp_optim_buf)b);
            snprintf(what, sizeof what, "%s chunk %d %s after 3 steps", name, c, bufs[b]);
            gh_expect_same_bits(what, x, y, numel[c] * sizeof *x);
            check_say(view && memcmp(view, y, numel[c] * sizeof *y) == 0, "%s: optim_host_view reads it in place", what);
            free(x);
            free(y);
        }
    check_say(optim_buffer(got.o, 0, WP_OPT_MASTER) == NULL && optim_error(got.o),
              "%s: optim_buffer refuses host-placed state", name);
    for (int c = 0; c < 2; c++) {
        for (int j = 0; j < 3; j++) free(g[c][j]);
        free(wr[c]);
        free(wg[c]);
    }
    optim_destroy(ref.o);
    optim_destroy(got.o);
    kern_destroy(ref.k);
    kern_destroy(got.k);
}

/* A chunk's gradient drained in bf16 (g on the host), then its norm. */
static double drain(side *s, int c, const float *g) {
    void *d = gh_upload(s->k, g, numel[c], WP_BF16);
    CHECK(!optim_accumulate(s->o, c, d, WP_BF16), "accumulate: %s", optim_error(s->o));
    double ss = optim_chunk_sumsq(s->o, c);
    kern_sync(s->k);
    kern_free(s->k, d);
    return ss;
}

static void overlap(wp_backend_kind kind, const char *name) {
    side ref = open_side(WP_BACKEND_CPU, WP_OPTIM_MEM_DEVICE), got = open_side(kind, WP_OPTIM_MEM_HOST);
    wp_rng rg = rng_seeded(9);
    float *g[2];
    for (int c = 0; c < 2; c++) {
        g[c] = gh_floats(numel[c]);
        gh_fill(&rg, g[c], numel[c], 0.01f, WP_BF16);
    }
    char what[200];
    /* the reference, in order on the caller's thread */
    double r0 = drain(&ref, 0, g[0]);
    void *rw = gh_out(ref.k, numel[0] * 2);
    CHECK(!optim_step_chunk(ref.o, 0, 1e-2f, 0.5f), "reference step: %s", optim_error(ref.o));
    CHECK(!optim_zero_chunk_grad(ref.o, 0), "reference zero: %s", optim_error(ref.o));
    double r1 = drain(&ref, 1, g[1]);
    CHECK(!optim_step_chunk(ref.o, 1, 1e-2f, 0.5f), "reference step: %s", optim_error(ref.o));
    CHECK(!optim_working_copy(ref.o, 0, rw, WP_BF16), "reference working copy: %s", optim_error(ref.o));
    /* the host-placed side: chunk 0's step held on the worker while the caller goes on */
    double s0 = drain(&got, 0, g[0]);
    void *w = gh_out(got.k, numel[0] * 2);
    CHECK(!pthread_mutex_lock(&gate.mu), "pthread_mutex_lock");
    gate.armed = true;
    gate.entered = false;
    long on_main = gate.on_main;
    CHECK(!pthread_mutex_unlock(&gate.mu), "pthread_mutex_unlock");
    CHECK(!optim_step_chunk(got.o, 0, 1e-2f, 0.5f), "step: %s", optim_error(got.o));
    CHECK(!pthread_mutex_lock(&gate.mu), "pthread_mutex_lock");
    bool ran_here = gate.on_main != on_main;
    CHECK(!pthread_mutex_unlock(&gate.mu), "pthread_mutex_unlock");
    snprintf(what, sizeof what, "%s: the host-placed step runs off the caller's thread", name);
    check_say(!ran_here, "%s", what);
    if (!ran_here) {
        CHECK(!pthread_mutex_lock(&gate.mu), "pthread_mutex_lock");
        while (!gate.entered) CHECK(!pthread_cond_wait(&gate.cv, &gate.mu), "pthread_cond_wait");
        CHECK(!pthread_mutex_unlock(&gate.mu), "pthread_mutex_unlock");
        /* chunk 0's update is provably not done (held in the gate): the caller's work goes on */
        CHECK(!optim_zero_chunk_grad(got.o, 0), "zero (chained): %s", optim_error(got.o));
        double s1 = drain(&got, 1, g[1]);
        check_say(s1 == r1 && s0 == r0, "%s: the norms around a pending update (%.17g %.17g, reference %.17g %.17g)",
                  name, s0, s1, r0, r1);
        CHECK(!pthread_mutex_lock(&gate.mu), "pthread_mutex_lock");
        bool still = gate.entered && gate.armed;
        gate.armed = false;
        CHECK(!pthread_cond_broadcast(&gate.cv), "pthread_cond_broadcast");
        CHECK(!pthread_mutex_unlock(&gate.mu), "pthread_mutex_unlock");
        snprintf(what, sizeof what, "%s: the caller drained and normed while chunk 0's update was pending", name);
        check_say(still, "%s", what);
    }
    /* straight after the gate opens: the masters read must be the stepped ones (the call waits
     * for the chunk's pending step) */
    float *m0 = gh_floats(numel[0]), *r0m = gh_floats(numel[0]);
    memset(m0, 0xFF, numel[0] * sizeof *m0);
    CHECK(!optim_get(got.o, 0, WP_OPT_MASTER, m0) && !optim_get(ref.o, 0, WP_OPT_MASTER, r0m), "optim_get: %s",
          optim_error(got.o));
    snprintf(what, sizeof what, "%s: chunk 0's masters read right after its pending update", name);
    gh_expect_same_bits(what, m0, r0m, numel[0] * sizeof *m0);
    free(m0);
    free(r0m);
    CHECK(!optim_step_chunk(got.o, 1, 1e-2f, 0.5f), "step: %s", optim_error(got.o));
    uint16_t *a = malloc(numel[0] * 2), *b = malloc(numel[0] * 2);
    CHECK(a && b, "out of memory");
    memset(a, 0xFF, numel[0] * 2);
    kern_to_device(got.k, w, a, numel[0] * 2); /* poisoned: the LOAD must write it all */
    CHECK(!optim_working_copy(got.o, 0, w, WP_BF16), "working copy (a LOAD after the UPDATE): %s", optim_error(got.o));
    kern_sync(got.k);
    kern_sync(ref.k);
    kern_to_host(got.k, a, w, numel[0] * 2);
    kern_to_host(ref.k, b, rw, numel[0] * 2);
    snprintf(what, sizeof what, "%s: the working copy after the pending update (the new masters)", name);
    gh_expect_same_bits(what, a, b, numel[0] * 2);
    CHECK(!optim_sync(got.o) && !optim_sync(ref.o), "optim_sync: %s", optim_error(got.o));
    static const char *const bufs[] = {"master", "exp_avg", "exp_avg_sq", "grad"};
    for (int c = 0; c < 2; c++)
        for (int bf = 0; bf < 4; bf++) {
            float *x = gh_floats(numel[c]), *y = gh_floats(numel[c]);
            memset(x, 0xFF, numel[c] * sizeof *x);
            CHECK(!optim_get(ref.o, c, (wp_optim_buf)bf, y) && !optim_get(got.o, c, (wp_optim_buf)bf, x), "optim_get");
            snprintf(what, sizeof what, "%s overlap: chunk %d %s", name, c, bufs[bf]);
            gh_expect_same_bits(what, x, y, numel[c] * sizeof *x);
            free(x);
            free(y);
        }
    CHECK(!pthread_mutex_lock(&gate.mu), "pthread_mutex_lock");
    snprintf(what, sizeof what, "%s: the host-placed steps called the model from the worker (%ld calls)", name, gate.off_main);
    check_say(gate.off_main > 0, "%s", what);
    CHECK(!pthread_mutex_unlock(&gate.mu), "pthread_mutex_unlock");
    free(a);
    free(b);
    for (int c = 0; c < 2; c++) free(g[c]);
    kern_free(ref.k, rw);
    kern_free(got.k, w);
    gh_ok(got.k, "overlap");
    optim_destroy(ref.o);
    optim_destroy(got.o);
    kern_destroy(ref.k);
    kern_destroy(got.k);
}

int main(void) {
    gate.main = pthread_self();
    compare(WP_BACKEND_CPU, "cpu");
    overlap(WP_BACKEND_CPU, "cpu");
    if (gh_require_gpu("the CUDA half of gpu/host_optim") == 0) {
        compare(WP_BACKEND_CUDA, "cuda");
        overlap(WP_BACKEND_CUDA, "cuda");
    }
    return check_result("gpu/host_optim");
}
