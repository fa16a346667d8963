/* Completeness of the backends' dispatch tables: every slot of wp_kern_ops that a backend must
 * fill (kernels/ops_slots.h: the ops of kernels.h, memory, lifetime; the streams groups all or
 * none) is filled in the CPU table, and in the CUDA table when this build has one (the table
 * exists without a GPU). Then the check itself: a copy of a table with any one required slot
 * cleared is reported by that slot's name and refused by the check kern_create runs. */
#include "backend.h"
#include "kt.h"
#include "ops_slots.h"
#include "wp_config.h"

static const char *group_name(int g) {
    switch (g) {
    case WP_SLOT_CONTEXT: return "context";
    case WP_SLOT_MEMORY: return "memory";
    case WP_SLOT_OP: return "op";
    case WP_SLOT_EVENTS: return "events";
    case WP_SLOT_PINNED: return "pinned";
    case WP_SLOT_OPTIONAL: return "optional";
    }
    return "?";
}

static void table_complete(const wp_kern_ops *ops) {
    const char *missing = wp_kern_ops_missing(ops);
    char err[256] = "";
    int rc = wp_kern_ops_check(ops, err, sizeof err);
    check_say(!missing && rc == 0, "%s table: every required slot of %zu filled (first missing: %s)", ops->name,
             wp_kern_ops_slot_count(), missing ? missing : "none");
}

/* Every required slot, cleared in turn in a copy of `ops`, is the one reported. */
static void each_slot_cleared(const wp_kern_ops *ops) {
    int bad = 0, n = 0;
#define WP_SLOT(s, g)                                                                                                \
    if (g == WP_SLOT_CONTEXT || g == WP_SLOT_MEMORY || g == WP_SLOT_OP) {                                              \
        wp_kern_ops t = *ops;                                                                                          \
        t.s = NULL;                                                                                                    \
        char err[256] = "";                                                                                            \
        const char *m = wp_kern_ops_missing(&t);                                                                       \
        int rc = wp_kern_ops_check(&t, err, sizeof err);                                                               \
        n++;                                                                                                           \
        if (!m || strcmp(m, #s) != 0 || rc != WP_FAILED || !strstr(err, #s) || !strstr(err, ops->name)) {                     \
            bad++;                                                                                                     \
            printf("     %s without %s: reported %s, check %d \"%s\"\n", ops->name, #s, m ? m : "nothing", rc, err);   \
        }                                                                                                              \
    }
    WP_KERN_OPS_SLOTS
#undef WP_SLOT
    check_say(bad == 0, "%s table: each of its %d required slots, cleared, is reported by name and refused", ops->name,
             n);
}

static void *fake_event_create(wp_kern *k) {
    (void)k;
    return NULL;
}
static void *fake_host_alloc(wp_kern *k, size_t bytes) {
    (void)k, (void)bytes;
    return NULL;
}
static void fake_to_device_async(wp_kern *k, void *dst, const void *src, size_t bytes) {
    (void)k, (void)dst, (void)src, (void)bytes;
}

/* Groups: events all or none, pinned memory both or neither, async copies optional. */
static void groups(void) {
    wp_kern_ops t = wp_cpu_ops;
    t.event_create = fake_event_create;
    const char *m = wp_kern_ops_missing(&t);
    char err[256] = "";
    int rc = wp_kern_ops_check(&t, err, sizeof err);
    check_say(m && strcmp(m, "event_destroy") == 0 && rc == WP_FAILED && strstr(err, "event_destroy"),
             "events filled in part: reported %s (\"%s\")", m ? m : "nothing", err);
    t = wp_cpu_ops;
    t.host_alloc = fake_host_alloc;
    m = wp_kern_ops_missing(&t);
    check_say(m && strcmp(m, "host_free") == 0, "pinned memory filled in part: reported %s", m ? m : "nothing");
    t = wp_cpu_ops;
    t.to_device_async = fake_to_device_async;
    m = wp_kern_ops_missing(&t);
    check_say(!m, "an optional slot alone is complete: reported %s", m ? m : "nothing");
    t = wp_cpu_ops;
    t.name = NULL;
    m = wp_kern_ops_missing(&t);
    rc = wp_kern_ops_check(&t, err, sizeof err);
    check_say(m && strcmp(m, "name") == 0 && rc == WP_FAILED, "a table without a name: reported %s (\"%s\")", m ? m : "nothing",
             err);
}

/* The slot list: names unique; printed by group. */
static void slot_list(void) {
    size_t n = wp_kern_ops_slot_count(), ops = 0, dup = 0;
    for (size_t i = 0; i < n; i++) {
        ops += wp_kern_ops_slot_group(i) == WP_SLOT_OP;
        for (size_t j = 0; j < i; j++) dup += strcmp(wp_kern_ops_slot_name(i), wp_kern_ops_slot_name(j)) == 0;
    }
    check_say(dup == 0 && wp_kern_ops_slot_name(n) == NULL && wp_kern_ops_slot_group(n) == -1,
             "slot list: %zu slots (%zu ops of kernels.h), names unique", n, ops);
    for (int g = WP_SLOT_CONTEXT; g <= WP_SLOT_OPTIONAL; g++) {
        printf("     %-8s:", group_name(g));
        for (size_t i = 0; i < n; i++)
            if (wp_kern_ops_slot_group(i) == g) printf(" %s", wp_kern_ops_slot_name(i));
        printf("\n");
    }
}

int main(void) {
    slot_list();
    table_complete(&wp_cpu_ops);
    each_slot_cleared(&wp_cpu_ops);
#if WP_HAVE_CUDA
    table_complete(&wp_cuda_ops);
    each_slot_cleared(&wp_cuda_ops);
    /* CUDA calls are queued on a stream: without events the ring would treat them as done */
    check_say(wp_cuda_ops.event_create && wp_cuda_ops.host_alloc && wp_cuda_ops.to_device_async &&
                 wp_cuda_ops.to_host_async && wp_cuda_ops.device,
             "cuda table: fills the streams.h slots too (events, pinned memory, async copies, device)");
#else
    printf("skip the CUDA table: this build has no CUDA backend (WP_HAVE_CUDA = 0)\n");
#endif
    groups();
    /* kern_create runs the same check: a complete table still makes a context */
    wp_kern *k = kt_cpu(1);
    kern_destroy(k);
    return check_result("kernels/ops_tables");
}
