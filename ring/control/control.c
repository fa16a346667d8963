/* The backend-independent half of the control channel: collectives encoded as one
 * contribution per rank, rank 0's combine step, status notes and failure bookkeeping. */
#include "control_impl.h"

#include <endian.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "oom.h"

int ctl_base_init(wp_control *c, const ctl_ops *ops, int rank, int world, double timeout) {
    memset(c, 0, sizeof *c);
    c->ops = ops;
    c->rank = rank;
    c->world = world;
    c->timeout = timeout;
    c->status_at = wp_now();
    snprintf(c->status, sizeof c->status, "starting");
    c->oom0 = oom_counts();
    return pthread_mutex_init(&c->mu, NULL) == 0 ? 0 : -1;
}

void ctl_base_destroy(wp_control *c) {
    free(c->mem);
    pthread_mutex_destroy(&c->mu);
}

void ctl_note_memory(wp_control *c, const double *resident, const double *allocated, long long step) {
    pthread_mutex_lock(&c->mu);
    if (!c->mem) c->mem = calloc(2 * (size_t)c->world, sizeof *c->mem); /* none: no figure, no harm */
    if (c->mem) {
        memcpy(c->mem, resident, (size_t)c->world * sizeof *c->mem);
        memcpy(c->mem + c->world, allocated, (size_t)c->world * sizeof *c->mem);
        c->mem_step = step;
    }
    pthread_mutex_unlock(&c->mu);
}

void ctl_death_note(wp_control *c, int r, bool same_host, char *out, size_t len) {
    const wp_oom_counts now = oom_counts();
    char fig[160] = "", ev[160];
    out[0] = 0;
    pthread_mutex_lock(&c->mu);
    if (c->mem && r >= 0 && r < c->world && c->mem[r] > 0)
        snprintf(fig, sizeof fig, "it last reported %.1f MiB resident, %.1f MiB allocated at step %lld", c->mem[r] / 1048576.0,
                 c->mem[c->world + r] / 1048576.0, c->mem_step);
    const wp_oom_counts before = c->oom0;
    pthread_mutex_unlock(&c->mu);
    /* another host's counts say nothing of r: only the hedge with its last figures */
    const wp_oom_verdict v = same_host ? oom_verdict(before, now, ev, sizeof ev) : WP_OOM_UNKNOWN;
    const char *sep = fig[0] ? "; " : "";
    if (v == WP_OOM_YES) snprintf(out, len, ": killed by the OOM killer (%s)%s%s", ev, sep, fig);
    else if (v == WP_OOM_NO) snprintf(out, len, ": not killed by the OOM killer (%s)%s%s", ev, sep, fig);
    else if (v == WP_OOM_LIKELY) snprintf(out, len, ": killed, by the kernel's OOM killer most likely (%s%s%s)", ev, sep, fig);
    else if (fig[0]) snprintf(out, len, ": killed, by the kernel's OOM killer most likely (%s)", fig);
}

int ctl_rank(const wp_control *c) { return c->rank; }
int ctl_world(const wp_control *c) { return c->world; }

bool ctl_fail_local(wp_control *c, const char *why) {
    pthread_mutex_lock(&c->mu);
    bool first = !c->failed;
    if (first) {
        c->failed = true;
        snprintf(c->why, sizeof c->why, "%s", why);
    }
    wp_transport *t = c->attached;
    pthread_mutex_unlock(&c->mu);
    if (first && t) tp_abort(t, why);
    return first;
}

bool ctl_failed(wp_control *c, char *why, size_t whylen) {
    pthread_mutex_lock(&c->mu);
    bool failed = c->failed;
    if (failed && why) snprintf(why, whylen, "%s", c->why);
    pthread_mutex_unlock(&c->mu);
    return failed;
}

bool ctl_unanswered(wp_control *c, char *out, size_t outlen) {
    pthread_mutex_lock(&c->mu);
    bool any = c->unanswered[0] != 0;
    if (out && outlen) snprintf(out, outlen, "%s", c->unanswered);
    pthread_mutex_unlock(&c->mu);
    return any;
}

void ctl_attach(wp_control *c, wp_transport *t) {
    pthread_mutex_lock(&c->mu);
    c->attached = t;
    bool failed = c->failed;
    char why[sizeof c->why];
    memcpy(why, c->why, sizeof why);
    pthread_mutex_unlock(&c->mu);
    if (failed && t) tp_abort(t, why);
}

void ctl_abort(wp_control *c, const char *reason) {
    char why[512];
    snprintf(why, sizeof why, "rank %d failed: %s", c->rank, reason);
    c->ops->abort(c, why);
}

void ctl_set_status(wp_control *c, const char *fmt, ...) {
    char note[CTL_STATUS_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note, sizeof note, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->mu);
    memcpy(c->status, note, sizeof note);
    c->status_at = wp_now();
    pthread_mutex_unlock(&c->mu);
}

double ctl_status_at(wp_control *c) {
    pthread_mutex_lock(&c->mu);
    double at = c->status_at;
    pthread_mutex_unlock(&c->mu);
    return at;
}

void ctl_status_line(wp_control *c, char *out, size_t outlen) {
    pthread_mutex_lock(&c->mu);
    snprintf(out, outlen, "%s [for %.1f s]", c->status, wp_now() - c->status_at);
    pthread_mutex_unlock(&c->mu);
}

int ctl_status_grid(wp_control *c, char **grid, char *err, size_t errlen) {
    *grid = NULL;
    return c->ops->status_grid(c, grid, err, errlen);
}

void ctl_close(wp_control *c) {
    if (c) c->ops->close(c);
}

/* ---- collectives: contribution = 16-byte description + data (little-endian) ---- */

static void put_coll(uint8_t *p, const ctl_coll *d) {
    uint32_t v[4] = {htole32(d->kind), htole32(d->op), htole32(d->count), htole32(d->root)};
    memcpy(p, v, sizeof v);
}

static void get_coll(const uint8_t *p, ctl_coll *d) {
    uint32_t v[4];
    memcpy(v, p, sizeof v);
    d->kind = le32toh(v[0]);
    d->op = le32toh(v[1]);
    d->count = le32toh(v[2]);
    d->root = le32toh(v[3]);
}

static void put_double(uint8_t *p, double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    u = htole64(u);
    memcpy(p, &u, 8);
}

static double get_double(const uint8_t *p) {
    uint64_t u;
    memcpy(&u, p, 8);
    u = le64toh(u);
    double x;
    memcpy(&x, &u, 8);
    return x;
}

const char *ctl_coll_name(const ctl_coll *d, char *buf, size_t buflen) {
    static const char *ops[] = {"sum", "max", "min"};
    switch (d->kind) {
    case COLL_BARRIER: snprintf(buf, buflen, "barrier"); break;
    case COLL_ALLREDUCE:
        snprintf(buf, buflen, "allreduce(%s of %u values)", d->op < 3 ? ops[d->op] : "?", d->count);
        break;
    case COLL_BCAST: snprintf(buf, buflen, "broadcast(%u bytes from rank %u)", d->count, d->root); break;
    default: snprintf(buf, buflen, "unknown collective %u", d->kind); break;
    }
    return buf;
}

/* The data bytes rank r must contribute to d. */
static size_t contrib_data_bytes(const ctl_coll *d, int r) {
    if (d->kind == COLL_ALLREDUCE) return (size_t)d->count * 8;
    if (d->kind == COLL_BCAST) return (int)d->root == r ? d->count : 0;
    return 0;
}

static double reduce2(ctl_op op, double a, double b) {
    if (op == CTL_SUM) return a + b;
    if (isnan(a) || isnan(b)) return NAN;
    return op == CTL_MAX ? (a > b ? a : b) : (a < b ? a : b);
}

wp_result ctl_combine(int n, void *const *contribs, const size_t *sizes, void **result, size_t *result_bytes,
                uint64_t seq, char *err, size_t errlen) {
    *result = NULL;
    *result_bytes = 0;
    ctl_coll d0;
    char a[96], b[96];
    for (int r = 0; r < n; r++) {
        ctl_coll d;
        if (sizes[r] < CTL_CONTRIB_HDR) {
            snprintf(err, errlen, "collective #%llu: rank %d sent a malformed contribution", (unsigned long long)seq, r);
            return WP_FAILED;
        }
        get_coll(contribs[r], &d);
        if (r == 0) d0 = d;
        if (memcmp(&d, &d0, sizeof d) != 0) {
            snprintf(err, errlen, "collective #%llu: rank %d called %s while rank 0 called %s", (unsigned long long)seq,
                     r, ctl_coll_name(&d, a, sizeof a), ctl_coll_name(&d0, b, sizeof b));
            return WP_FAILED;
        }
        if (d.kind < COLL_BARRIER || d.kind > COLL_BCAST || (d.kind == COLL_ALLREDUCE && d.op > CTL_MIN) ||
            (d.kind == COLL_BCAST && (int)d.root >= n) || sizes[r] != CTL_CONTRIB_HDR + contrib_data_bytes(&d, r)) {
            snprintf(err, errlen, "collective #%llu: rank %d sent an inconsistent %s", (unsigned long long)seq, r,
                     ctl_coll_name(&d, a, sizeof a));
            return WP_FAILED;
        }
    }
    size_t out_bytes = d0.kind == COLL_BARRIER ? 0 : (d0.kind == COLL_ALLREDUCE ? (size_t)d0.count * 8 : d0.count);
    uint8_t *out = malloc(out_bytes ? out_bytes : 1);
    if (!out) {
        snprintf(err, errlen, "collective #%llu: out of memory", (unsigned long long)seq);
        return WP_FAILED;
    }
    if (d0.kind == COLL_ALLREDUCE) {
        for (uint32_t i = 0; i < d0.count; i++) {
            double acc = get_double((const uint8_t *)contribs[0] + CTL_CONTRIB_HDR + 8 * i);
            for (int r = 1; r < n; r++)
                acc = reduce2((ctl_op)d0.op, acc, get_double((const uint8_t *)contribs[r] + CTL_CONTRIB_HDR + 8 * i));
            put_double(out + 8 * i, acc);
        }
    } else if (d0.kind == COLL_BCAST) {
        memcpy(out, (const uint8_t *)contribs[d0.root] + CTL_CONTRIB_HDR, out_bytes);
    }
    *result = out;
    *result_bytes = out_bytes;
    return WP_OK;
}

/* Encode this rank's call, run the exchange, check the result size. */
static int run_collective(wp_control *c, const ctl_coll *d, const void *data, size_t data_bytes, void **result,
                          size_t expect_bytes, char *err, size_t errlen) {
    uint8_t *msg = malloc(CTL_CONTRIB_HDR + data_bytes);
    if (!msg) {
        snprintf(err, errlen, "rank %d: out of memory for a collective", c->rank);
        return 1;
    }
    put_coll(msg, d);
    if (data_bytes) memcpy(msg + CTL_CONTRIB_HDR, data, data_bytes);
    c->seq++;
    size_t got = 0;
    int rc = c->ops->exchange(c, msg, CTL_CONTRIB_HDR + data_bytes, result, &got, err, errlen);
    free(msg);
    if (rc != 0) return 1;
    if (got != expect_bytes) {
        char name[96];
        snprintf(err, errlen, "rank %d: %s returned %zu bytes, expected %zu", c->rank, ctl_coll_name(d, name, sizeof name),
                 got, expect_bytes);
        free(*result);
        *result = NULL;
        return 1;
    }
    return 0;
}

int ctl_allreduce(wp_control *c, ctl_op op, double *vals, int n, char *err, size_t errlen) {
    if (n < 0 || n > CTL_MAX_VALUES || (op != CTL_SUM && op != CTL_MAX && op != CTL_MIN)) {
        snprintf(err, errlen, "rank %d: allreduce of %d values (op %d): give 0..%d values and sum, max or min", c->rank,
                 n, (int)op, CTL_MAX_VALUES);
        return 1;
    }
    uint8_t *data = calloc((size_t)n + 1, 8);
    if (!data) {
        snprintf(err, errlen, "rank %d: out of memory for an allreduce", c->rank);
        return 1;
    }
    for (int i = 0; i < n; i++) put_double(data + 8 * i, vals[i]);
    ctl_coll d = {COLL_ALLREDUCE, (uint32_t)op, (uint32_t)n, 0};
    void *res = NULL;
    int rc = run_collective(c, &d, data, (size_t)n * 8, &res, (size_t)n * 8, err, errlen);
    free(data);
    if (rc == 0)
        for (int i = 0; i < n; i++) vals[i] = get_double((const uint8_t *)res + 8 * i);
    free(res);
    return rc;
}

int ctl_broadcast(wp_control *c, int root, void *buf, size_t bytes, char *err, size_t errlen) {
    if (root < 0 || root >= c->world || bytes > CTL_MAX_BCAST) {
        snprintf(err, errlen, "rank %d: broadcast of %zu bytes from rank %d: root must be a rank, at most %d bytes",
                 c->rank, bytes, root, CTL_MAX_BCAST);
        return 1;
    }
    ctl_coll d = {COLL_BCAST, 0, (uint32_t)bytes, (uint32_t)root};
    void *res = NULL;
    int rc = run_collective(c, &d, buf, root == c->rank ? bytes : 0, &res, bytes, err, errlen);
    if (rc == 0 && bytes) memcpy(buf, res, bytes);
    free(res);
    return rc;
}

int ctl_barrier(wp_control *c, char *err, size_t errlen) {
    ctl_coll d = {COLL_BARRIER, 0, 0, 0};
    void *res = NULL;
    int rc = run_collective(c, &d, NULL, 0, &res, 0, err, errlen);
    free(res);
    return rc;
}
