/* Replays (kernels/replay.h) on the CPU backend, which replays the dispatcher's own record of the
 * calls: the decisions (first sight eager, second recorded, then replayed), that a replay computes
 * on the buffers' current contents, that another scalar or pointer is another key, that a call
 * needing the host makes what was kept first (in order) and runs the rest as it comes, that a
 * stale epoch records again, and that fn's host code runs exactly once per kern_replay_run.
 * Every result is held bit for bit to the same calls made without a replay. */
#include "kt.h"
#include "backend.h" /* kern_replay_stale: what a backend calls when its scratch moves */
#include "replay.h"

enum { N = 257 }; /* odd: no vector width divides it */

typedef struct {
    wp_kern *k;
    float *x, *y, *out; /* backend buffers (host memory on the CPU) */
    float alpha;
    bool read_midway;   /* kern_to_host between the two halves */
    float host[N];      /* what that read saw */
    int runs;           /* fn's host code, counted */
} span;

/* out = (x + y) * alpha, then out += x: four kernels.h calls */
static wp_result work(void *p) {
    span *s = p;
    s->runs++;
    kern_add(s->k, s->out, s->x, s->y, N);
    kern_scale(s->k, s->out, WP_F32, s->alpha, N);
    if (s->read_midway) kern_to_host(s->k, s->host, s->out, sizeof s->host);
    kern_accumulate(s->k, s->out, WP_F32, s->x, WP_F32, N);
    kern_zero(s->k, s->y, 0); /* empty: refused as empty work, never kept */
    return kern_status(s->k);
}

/* The same calls made directly, on copies of the inputs: the reference. */
static void reference(wp_kern *k, const float *x, const float *y, float alpha, float *want) {
    float *rx = kern_alloc(k, N * sizeof(float)), *ry = kern_alloc(k, N * sizeof(float));
    float *ro = kern_alloc(k, N * sizeof(float));
    kern_to_device(k, rx, x, N * sizeof(float));
    kern_to_device(k, ry, y, N * sizeof(float));
    kern_add(k, ro, rx, ry, N);
    kern_scale(k, ro, WP_F32, alpha, N);
    kern_accumulate(k, ro, WP_F32, rx, WP_F32, N);
    kern_to_host(k, want, ro, N * sizeof(float));
    kern_free(k, rx), kern_free(k, ry), kern_free(k, ro);
}

static void fill(span *s, kt_rng *r) {
    float hx[N], hy[N];
    kt_fill(r, hx, N, -2, 2);
    kt_fill(r, hy, N, -2, 2);
    kern_to_device(s->k, s->x, hx, sizeof hx);
    kern_to_device(s->k, s->y, hy, sizeof hy);
}

/* One run through r with fresh inputs; checks the result against the reference and the way. */
static void step(span *s, wp_kern_replay *r, kt_rng *rng, wp_replay_how want_how, const char *want_why,
                 const char *what) {
    fill(s, rng);
    float x[N], y[N], want[N], got[N];
    kern_to_host(s->k, x, s->x, sizeof x);
    kern_to_host(s->k, y, s->y, sizeof y);
    for (int i = 0; i < N; i++) s->out[i] = NAN; /* poisoned: a replay that wrote nothing shows */
    int runs = s->runs;
    wp_replay_how how;
    const char *why;
    wp_result rc = kern_replay_run(s->k, r, work, s, &how, &why);
    kt_no_error(s->k, what);
    reference(s->k, x, y, s->alpha, want);
    kern_to_host(s->k, got, s->out, sizeof got);
    EXPECT(rc == 0, "%s: kern_replay_run returned %d", what, rc);
    check_say(how == want_how && strcmp(why, want_why) == 0, "%s: how %d (want %d), why '%s' (want '%s')", what, (int)how,
              (int)want_how, why, want_why);
    check_say(memcmp(got, want, sizeof got) == 0, "%s: the result equals the calls made directly, bit for bit", what);
    check_say(s->runs == runs + 1, "%s: fn's host code ran once (%d times)", what, s->runs - runs);
}

int main(void) {
    wp_kern *k = kt_cpu(1);
    kt_rng rng = {7};
    span s = {.k = k, .alpha = 0.75f};
    s.x = kern_alloc(k, N * sizeof(float));
    s.y = kern_alloc(k, N * sizeof(float));
    s.out = kern_alloc(k, N * sizeof(float));
    wp_kern_replay *r = kern_replay_create(k);
    CHECK(r, "kern_replay_create: %s", kern_error(k));
    check_say(!kern_replay_on_device(k), "the CPU backend replays the dispatcher's record, not device graphs");

    step(&s, r, &rng, WP_REPLAY_EAGER, "first sight", "first run");
    step(&s, r, &rng, WP_REPLAY_RECORDED, "", "second run");
    step(&s, r, &rng, WP_REPLAY_REPLAYED, "", "third run (new inputs)");
    step(&s, r, &rng, WP_REPLAY_REPLAYED, "", "fourth run (new inputs)");

    /* another scalar: another key, seen first, then recorded and replayed; the first key stays */
    s.alpha = -1.25f;
    step(&s, r, &rng, WP_REPLAY_EAGER, "first sight", "alpha changed");
    step(&s, r, &rng, WP_REPLAY_RECORDED, "", "alpha changed, second");
    step(&s, r, &rng, WP_REPLAY_REPLAYED, "", "alpha changed, third");
    s.alpha = 0.75f;
    step(&s, r, &rng, WP_REPLAY_REPLAYED, "", "alpha back: its recording replays");

    /* another buffer: another key */
    float *out2 = kern_alloc(k, N * sizeof(float)), *out1 = s.out;
    s.out = out2;
    step(&s, r, &rng, WP_REPLAY_EAGER, "first sight", "out moved");
    s.out = out1;

    /* a stale epoch (a backend's scratch moved): recorded again, then replayed */
    kern_replay_stale(k);
    step(&s, r, &rng, WP_REPLAY_RECORDED, "", "after kern_replay_stale");
    step(&s, r, &rng, WP_REPLAY_REPLAYED, "", "after kern_replay_stale, again");

    /* a read from the host midway: the kept calls are made first, in order, so the read sees
     * (x + y) * alpha; the rest runs as it comes; never recorded */
    s.read_midway = true;
    for (int t = 0; t < 3; t++) {
        step(&s, r, &rng, WP_REPLAY_EAGER, "kern_to_host", "a host read midway");
        float x[N], y[N];
        kern_to_host(k, x, s.x, sizeof x);
        kern_to_host(k, y, s.y, sizeof y);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += s.host[i] != (x[i] + y[i]) * s.alpha;
        check_say(bad == 0, "a host read midway (run %d) saw the kept calls' result (%d of %d elements differ)", t, bad, N);
    }
    s.read_midway = false;

    kern_replay_destroy(k, r);
    kern_free(k, out2);
    kern_free(k, s.x), kern_free(k, s.y), kern_free(k, s.out);
    kern_destroy(k);
    return check_result("kernels/replay");
}
