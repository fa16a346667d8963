/* kernels/streams.h: a compute context and its transfer sibling ordered by events, as the
 * staged and NCCL transports use them. Runs with the CPU backend (everything synchronous: the
 * same calls must give the same results) and, where a GPU is usable, with CUDA, where the
 * ordering is real: the sibling copies out a buffer that the compute stream is still scaling
 * (64 doublings queued), so without the event wait the copy would read a stale value.
 *
 * Checks (exact: scaling by 2 is exact in fp32 for these magnitudes):
 *   compute -> transfer: device buffer x (n = 1, 4097, 2^20 + 3 floats, seeded in [-1, 1]),
 *     64 x kern_scale(2) on the compute context, event; the sibling waits for it and copies
 *     x into pinned memory: every value equals x0 * 2^64;
 *   transfer -> compute: the sibling uploads y0 from pinned memory, event; the compute context
 *     waits and scales by 0.5: every value equals y0 / 2;
 *   an event never recorded counts as done; both contexts name the same device;
 *   timers: three marks around queued work, after a sync: the two gaps add up to the whole
 *   (within the CUDA events' float milliseconds), none is negative, and the whole lies inside
 *   the host's span from before the first mark to after the sync (the device cannot take
 *   longer than the host waited for it); the CPU's timers read the host's clock, CUDA's the
 *   device's; a timer never recorded gives -1 and an error, never a number. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "clock.h"
#include "streams.h"

#define DOUBLINGS 64

/* Poll until e is done (the host never blocks in the transports either); false after 10 s. */
static bool await(wp_kern *k, wp_kern_event *e) {
    double t0 = wp_now();
    while (!kern_event_done(k, e))
        if (kern_error(k) || wp_now() - t0 > 10.0) return false;
    return true;
}

static void one_size(wp_kern *k, wp_kern *x, const char *backend, size_t n, wp_rng *g) {
    float *x0 = gh_floats(n), *y0 = gh_floats(n);
    gh_fill(g, x0, n, 1.0f, WP_F32);
    gh_fill(g, y0, n, 1.0f, WP_F32);
    size_t bytes = n * sizeof(float);
    float *dev = kern_alloc(k, bytes), *dev2 = kern_alloc(k, bytes);
    float *pin = kern_host_alloc(x, bytes);
    wp_kern_event *ev = kern_event_create(k), *ev2 = kern_event_create(x);
    if (!dev || !dev2 || !pin || !ev || !ev2) {
        gh_ok(k, "allocations (compute)");
        gh_ok(x, "allocations (transfer)");
    }
    kern_to_device(k, dev, x0, bytes);
    for (int i = 0; i < DOUBLINGS; i++) kern_scale(k, dev, WP_F32, 2.0f, n);
    kern_event_record(k, ev);
    kern_event_wait(x, ev);
    kern_to_host_async(x, pin, dev, bytes);
    kern_event_record(x, ev2);
    bool done = await(x, ev2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += pin[i] != ldexpf(x0[i], DOUBLINGS);
    check_say(done && bad == 0, "compute -> transfer: the copy sees all 64 doublings (%s, n = %zu)", backend, n);

    memcpy(pin, y0, bytes);
    kern_to_device_async(x, dev2, pin, bytes);
    kern_event_record(x, ev2);
    kern_event_wait(k, ev2);
    kern_scale(k, dev2, WP_F32, 0.5f, n);
    kern_to_host(k, x0, dev2, bytes);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += x0[i] != 0.5f * y0[i];
    check_say(bad == 0, "transfer -> compute: the kernel sees the upload (%s, n = %zu)", backend, n);
    gh_ok(k, "compute context");
    gh_ok(x, "transfer context");
    kern_event_destroy(k, ev);
    kern_event_destroy(x, ev2);
    kern_host_free(x, pin);
    kern_free(k, dev);
    kern_free(k, dev2);
    free(x0);
    free(y0);
}

static void timers(wp_kern *k, wp_kern *x, const char *name) {
    check_say(kern_timer_on_device(k) == (strcmp(name, "cuda") == 0), "timers on the %s clock (%s, n = 0)",
              strcmp(name, "cuda") == 0 ? "device's" : "host's", name);
    const size_t n = (1u << 20) + 3;
    float *dev = kern_alloc(k, n * sizeof(float));
    wp_kern_timer *a = kern_timer_create(k), *b = kern_timer_create(k), *c = kern_timer_create(k);
    check_say(dev && a && b && c, "timers made (%s): %s", name, kern_error(k) ? kern_error(k) : "");
    if (!dev || !a || !b || !c) return;
    kern_zero(k, dev, n * sizeof(float));
    double h0 = wp_now();
    kern_timer_record(k, a);
    for (int i = 0; i < DOUBLINGS; i++) kern_scale(k, dev, WP_F32, 2.0f, n);
    kern_timer_record(k, b);
    for (int i = 0; i < DOUBLINGS; i++) kern_scale(k, dev, WP_F32, 0.5f, n);
    kern_timer_record(k, c);
    kern_sync(k);
    double h1 = wp_now();
    double ab = NAN, bc = NAN, ac = NAN; /* poisoned: a failed read must not pass */
    ab = kern_timer_elapsed(k, a, b);
    bc = kern_timer_elapsed(k, b, c);
    ac = kern_timer_elapsed(k, a, c);
    check_say(!kern_error(k), "timers read (%s): %s", name, kern_error(k) ? kern_error(k) : "");
    check_say(ab >= 0 && bc >= 0 && ac >= 0, "no negative gap (%s): %.9g %.9g %.9g s", name, ab, bc, ac);
    check_say(fabs(ab + bc - ac) <= 1e-5 * ac + 2e-6, "the gaps add up (%s): %.9g + %.9g vs %.9g s", name, ab, bc, ac);
    check_say(ac <= h1 - h0, "inside the host's span (%s): %.9g s of %.9g s", name, ac, h1 - h0);
    wp_kern_timer *never = kern_timer_create(x);
    double got = never ? kern_timer_elapsed(x, never, never) : 0;
    check_say(never && got == -1 && kern_error(x), "a timer never recorded: -1 and an error (%s): %g, \"%s\"", name, got,
              kern_error(x) ? kern_error(x) : "");
    kern_timer_destroy(x, never);
    kern_timer_destroy(k, a);
    kern_timer_destroy(k, b);
    kern_timer_destroy(k, c);
    kern_free(k, dev);
}

static void backend(wp_backend_kind kind) {
    const char *name = kind == WP_BACKEND_CPU ? "cpu" : "cuda";
    char err[512];
    wp_kern_opts o = {.kind = kind, .compute = WP_F32, .threads = 1, .device = 0};
    wp_kern *k = kern_create(&o, err, sizeof err);
    wp_kern *x = k ? kern_create_sibling(k, err, sizeof err) : NULL;
    if (!x) {
        check_say(false, "%s contexts: %s", name, err);
        kern_destroy(k);
        return;
    }
    check_say(kern_device(k) == kern_device(x), "the sibling is on the compute context's device (%s, n = 0)", name);
    wp_kern_event *never = kern_event_create(x);
    check_say(never && kern_event_done(x, never), "an event never recorded counts as done (%s, n = 0)", name);
    kern_event_destroy(x, never);
    wp_rng g = rng_seeded(42);
    const size_t sizes[] = {1, 4097, (1u << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) one_size(k, x, name, sizes[i], &g);
    timers(k, x, name); /* last: it leaves an error in x */
    kern_destroy(x);
    kern_destroy(k);
}

int main(void) {
    char why[512];
    backend(WP_BACKEND_CPU);
    if (kern_available(WP_BACKEND_CUDA, why, sizeof why)) backend(WP_BACKEND_CUDA);
    else printf("cuda part skipped: %s\n", why);
    return check_result("streams");
}
