/* Non-finite gradients: injection for tests, and the bound on consecutive skips (nonfinite.h). */
#include "nonfinite.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

static struct {
    bool on;
    int rank;
    int64_t first, count;
} hook;
static pthread_once_t hook_once = PTHREAD_ONCE_INIT;

static void read_hook(void) {
    const char *v = getenv("WEIPIPE_INJECT_NONFINITE");
    if (!v || !*v) return;
    int rank;
    long long first, count = 1;
    int n = -1, got = sscanf(v, "%d,%lld%n,%lld%n", &rank, &first, &n, &count, &n);
    if (got < 2 || n < 0 || v[n] != '\0' || rank < 0 || first < 0 || count == 0 || count < -1) {
        wp_warn("WEIPIPE_INJECT_NONFINITE=%s ignored: expected RANK,STEP[,COUNT]", v);
        return;
    }
    hook.on = true;
    hook.rank = rank;
    hook.first = first;
    hook.count = count;
}

bool nonfinite_inject(wp_optim *o, int n_chunks, int rank, int64_t step) {
    pthread_once(&hook_once, read_hook);
    if (!hook.on || rank != hook.rank || step < hook.first || (hook.count > 0 && step >= hook.first + hook.count))
        return false;
    for (int c = 0; c < n_chunks; c++) {
        float *g = optim_owns(o, c) ? optim_grad(o, c) : NULL;
        if (g) {
            g[0] = NAN;
            return true;
        }
    }
    return false;
}

wp_result nonfinite_bound(int64_t *run, bool skipped, int64_t max_skips, int64_t step, double loss_scale, char *err,
                    size_t errlen) {
    *run = skipped ? *run + 1 : 0;
    if (max_skips <= 0 || *run < max_skips) return 0;
    snprintf(err, errlen,
             "steps %" PRId64 "-%" PRId64 " all had non-finite gradients and were skipped (loss scale now %g): "
             "stopping after --max-skipped-steps %" PRId64 "; check the data, --lr and --loss-scale",
             step + 2 - *run, step + 1, loss_scale, max_skips);
    return 1;
}
