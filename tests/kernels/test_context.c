/* What a context reports beside its kernels: the device a rank opens (kern_pick_device: 4 ranks
 * on a 1-GPU machine share it; --device wins) and the memory it holds (kern_memory: every
 * kern_alloc block counted at its size until kern_free, the peak kept), checked against a
 * ledger kept here over a seeded random sequence of allocations and frees. */
#include "kt.h"

static void device_pick(void) {
    static const struct {
        int requested, local_rank, visible, want;
    } cases[] = {
        {-1, 0, 1, 0}, {-1, 3, 1, 0},  /* 4 processes, 1 GPU: all on device 0 */
        {-1, 5, 4, 1}, {-1, 7, 8, 7},  /* round-robin over the visible devices */
        {2, 5, 4, 2},  {0, 3, 1, 0},   /* --device wins */
        {-1, 1, 0, 1},                 /* none visible: the local rank (opening it names the cause) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = kern_pick_device(cases[i].requested, cases[i].local_rank, cases[i].visible);
        check_say(got == cases[i].want, "kern_pick_device(%d, local rank %d, %d visible) = %d (want %d)",
                  cases[i].requested, cases[i].local_rank, cases[i].visible, got, cases[i].want);
    }
}

static void memory(void) {
    wp_kern *k = kt_cpu(1);
    kt_rng g = {42};
    enum { SLOTS = 300 };
    void *p[SLOTS] = {0};
    size_t sz[SLOTS] = {0}, ledger = 0, peak = 0, now, got_peak;
    int bad = 0;
    for (int step = 0; step < 5000 && !bad; step++) {
        int i = (int)(kt_next(&g) % SLOTS);
        if (p[i]) {
            kern_free(k, p[i]);
            ledger -= sz[i];
            p[i] = NULL;
        } else {
            sz[i] = 1 + kt_next(&g) % 4096;
            p[i] = kern_alloc(k, sz[i]);
            if (!p[i]) bad = 1;
            ledger += sz[i];
        }
        if (ledger > peak) peak = ledger;
        kern_memory(k, &now, &got_peak);
        if (now != ledger || got_peak != peak) bad = 2;
    }
    kern_memory(k, &now, &got_peak);
    check_say(!bad, "kern_memory over 5000 random allocations and frees: now %zu (ledger %zu), peak %zu (ledger %zu)",
              now, ledger, got_peak, peak);
    for (int i = 0; i < SLOTS; i++) kern_free(k, p[i]);
    kern_memory(k, &now, &got_peak);
    check_say(now == 0 && got_peak == peak, "after freeing everything: now %zu, peak %zu kept", now, got_peak);
    kern_destroy(k);
}

int main(void) {
    device_pick();
    memory();
    return check_result("kernels/context");
}
