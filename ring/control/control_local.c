/* The control channel of a local world: collectives and status in shared memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "local_world.h"

static wp_local_world *world_of(wp_control *c) { return ((local_ctl *)c)->w; }

/* Ranks that have not contributed to the current collective, as "1, 3". */
static void missing_ranks(wp_local_world *w, char *out, size_t outlen) {
    size_t used = 0;
    out[0] = 0;
    for (int r = 0; r < w->n && used + 16 < outlen; r++)
        if (!w->contrib[r]) used += (size_t)snprintf(out + used, outlen - used, "%s%d", used ? ", " : "", r);
}

/* The last rank to arrive combines (in rank order, like rank 0 over tcp) and wakes the rest. */
static void finish_collective(wp_local_world *w, uint64_t seq) {
    free(w->result);
    w->result = NULL;
    w->result_err[0] = 0;
    if (ctl_combine(w->n, w->contrib, w->contrib_bytes, &w->result, &w->result_bytes, seq, w->result_err,
                    sizeof w->result_err) != 0 && !w->result_err[0])
        snprintf(w->result_err, sizeof w->result_err, "collective #%llu failed", (unsigned long long)seq);
    for (int r = 0; r < w->n; r++) {
        free(w->contrib[r]);
        w->contrib[r] = NULL;
    }
    w->narrived = 0;
    w->coll_gen++;
    pthread_cond_broadcast(&w->sync.cv);
}

static int wait_collective(wp_local_world *w, wp_control *c, uint64_t gen, char *err, size_t errlen) {
    double deadline = wp_now() + c->timeout;
    while (w->coll_gen == gen) {
        if (w->fail.failed) {
            char why[512];
            ctl_failed(c, why, sizeof why);
            snprintf(err, errlen, "%s (rank %d was in collective #%llu)", why, c->rank, (unsigned long long)c->seq);
            return 1;
        }
        if (wp_now() >= deadline) {
            char missing[256];
            missing_ranks(w, missing, sizeof missing);
            tp_fail_locked(&w->tps[c->rank].base, -1, "collective #%llu: rank(s) %s did not arrive within %g s",
                           (unsigned long long)c->seq, missing, c->timeout);
            continue;
        }
        wp_sync_wait_until(&w->sync, deadline);
    }
    return 0;
}

static int local_exchange(wp_control *c, const void *contrib, size_t bytes, void **result, size_t *result_bytes,
                          char *err, size_t errlen) {
    wp_local_world *w = world_of(c);
    void *copy = malloc(bytes);
    if (!copy) {
        snprintf(err, errlen, "rank %d: out of memory in a collective", c->rank);
        return 1;
    }
    memcpy(copy, contrib, bytes);
    pthread_mutex_lock(&w->sync.mu);
    uint64_t gen = w->coll_gen;
    int rc = 0;
    if (w->fail.failed) {
        free(copy);
        rc = wait_collective(w, c, gen, err, errlen);
    } else {
        w->contrib[c->rank] = copy;
        w->contrib_bytes[c->rank] = bytes;
        if (++w->narrived == w->n) finish_collective(w, c->seq);
        else rc = wait_collective(w, c, gen, err, errlen);
    }
    if (rc == 0 && w->result_err[0]) {
        snprintf(err, errlen, "%s", w->result_err);
        tp_fail_locked(&w->tps[c->rank].base, -1, "%s", w->result_err);
        rc = 1;
    }
    if (rc == 0) {
        *result_bytes = w->result_bytes;
        *result = malloc(w->result_bytes ? w->result_bytes : 1);
        if (*result) memcpy(*result, w->result, w->result_bytes);
        else {
            snprintf(err, errlen, "rank %d: out of memory in a collective", c->rank);
            rc = 1;
        }
    }
    pthread_mutex_unlock(&w->sync.mu);
    return rc;
}

/* Every rank's note is in memory: no rank has to answer. */
static int local_status_grid(wp_control *c, char **grid, char *err, size_t errlen) {
    wp_local_world *w = world_of(c);
    size_t cap = (size_t)w->n * (CTL_STATUS_MAX + 64) + 1, used = 0;
    char *g = malloc(cap);
    if (!g) {
        snprintf(err, errlen, "rank %d: out of memory for the status grid", c->rank);
        return 1;
    }
    g[0] = 0;
    for (int r = 0; r < w->n; r++) {
        char line[CTL_STATUS_MAX + 48];
        ctl_status_line(&w->ctls[r].base, line, sizeof line);
        used += (size_t)snprintf(g + used, cap - used, "rank %d: %s\n", r, line);
    }
    *grid = g;
    return 0;
}

static void local_abort(wp_control *c, const char *why) {
    wp_local_world *w = world_of(c);
    pthread_mutex_lock(&w->sync.mu);
    tp_fail_locked(&w->tps[c->rank].base, -1, "%s", why);
    pthread_mutex_unlock(&w->sync.mu);
    for (int r = 0; r < w->n; r++) ctl_fail_local(&w->ctls[r].base, why);
}

static void local_ctl_close(wp_control *c) { (void)c; }

static const ctl_ops local_ctl_ops = {
    .exchange = local_exchange,
    .status_grid = local_status_grid,
    .abort = local_abort,
    .close = local_ctl_close,
};

int local_ctl_init(wp_local_world *w, int rank, char *err, size_t errlen) {
    if (ctl_base_init(&w->ctls[rank].base, &local_ctl_ops, rank, w->n, w->net.timeout) != 0) {
        snprintf(err, errlen, "local control: cannot create a lock");
        return -1;
    }
    w->ctls[rank].w = w;
    return 0;
}

void local_ctl_free_state(wp_local_world *w) {
    for (int r = 0; r < w->n; r++) {
        free(w->contrib[r]);
        if (w->ctls[r].w) ctl_base_destroy(&w->ctls[r].base);
    }
    free(w->result);
}
