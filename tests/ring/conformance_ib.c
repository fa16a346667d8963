/* The RDMA transports of the conformance table (see conformance.h): ring/ibverbs.h over the
 * soft fabric (ring/ib_soft.h) or libibverbs. Ranks are threads; the local transport carries
 * the connection exchange (as tcp does in a job). Over the soft fabric the table entry also
 * states the protocol's own promises: the fabric's count of chunks, credits and work
 * requests after the matrix (none larger than a work request, one credit per chunk), the
 * exact header bytes, the double buffer a late receiver finds full, and that no staging
 * buffer is rewritten before its write completed. */
#include <string.h>

#include "check.h"
#include "conformance.h"
#include "ib_transport.h"

/* ---- running ranks ---- */

typedef struct ib_run {
    conf_transport *X;
    wp_rank_fn fn;
    void *arg;
} ib_run;

/* The RDMA transport over this rank's local one, in its place for the case's function. */
static int ib_rank(wp_rank_ctx *ctx, void *arg) {
    const ib_run *R = arg;
    conf_ib *ib = R->X->impl;
    wp_transport *oob = ctx->t, *t;
    ib_dev_cfg dc = {.port = 1, .soft_fabric = ib->fab, .soft_rank = ctx->rank};
    const char *dev = getenv("WEIPIPE_IB_DEVICE");
    if (dev) snprintf(dc.device, sizeof dc.device, "%s", dev);
    char why[sizeof ctx->err - 8];
    if (rdma_create(ib->ops, &dc, &ib->pc, 10.0, oob, &t, why, sizeof why) != 0)
        return snprintf(ctx->err, sizeof ctx->err, "open: %s", why), 1;
    ctl_attach(ctx->ctl, t);
    ctx->t = t;
    int rc = R->fn(ctx, R->arg);
    if (ctx->t) conf_close_rank(ctx); /* unless the case closed it already */
    ctx->t = oob;
    ctl_attach(ctx->ctl, oob);
    return rc;
}

static bool soft(const conf_ib *ib) { return ib->ops == &ib_soft_ops; }

static int run_ib(conf_transport *X, int n, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    conf_ib *ib = X->impl;
    if (soft(ib)) {
        /* a fresh fabric for every run: its counters are the run's */
        if (ib->fab) ib_soft_fabric_destroy(ib->fab);
        ib->fab = NULL;
        if (ib_soft_fabric_create(&ib->fab, err, errlen) != 0) return 1;
        const ib_soft_faults *f = &ib->faults;
        if (f->drop_nth || f->fail_nth || f->write_delay_s > 0 || f->send_cqe_delay_s > 0) ib_soft_set_faults(ib->fab, f);
    }
    ib_run R = {X, fn, arg};
    return rh_run_local(n, &X->net, ib_rank, &R, err, errlen);
}

static void done_ib(conf_transport *X) {
    conf_ib *ib = X->impl;
    if (ib->fab) ib_soft_fabric_destroy(ib->fab);
    free(ib);
    X->impl = NULL;
}

/* ---- what the soft fabric shows of the protocol ---- */

/* Before the receiver posted: exactly the free buffers (the double buffer) hold chunks. */
static int soft_sender_held(conf_transport *X, char *err, size_t errlen) {
    conf_ib *ib = X->impl;
    ib_soft_stats s;
    ib_soft_stats_get(ib->fab, &s);
    if (s.imm_writes != IBP_SLOTS || s.credit_writes != 0)
        return snprintf(err, errlen, "%ld chunks written and %ld credits before the receiver posted (expected exactly "
                                     "the %d free buffers, no credit)", s.imm_writes, s.credit_writes, IBP_SLOTS), 1;
    printf("before the receiver posted: %ld chunks written (the double buffer), no send complete\n", s.imm_writes);
    return 0;
}

/* The chunks and work requests the matrix's sends cost on the fabric (none to oneself), and
 * what each rank's header counter must say. */
static int soft_matrix(conf_ib *ib, const conf_matrix *M, const ib_soft_stats *s, char *err, size_t errlen) {
    size_t S = ib->pc.slot_bytes, W = ib->pc.wr_bytes, biggest = 0;
    long chunks = 0, wrs = 0;
    for (int src = 0; src < M->world; src++) {
        long mine = 0;
        for (int dst = 0; dst < M->world; dst++)
            for (int c = 0; c < CONF_NCH && dst != src; c++)
                for (int k = 0; k < CONF_PER_BOX; k++) {
                    size_t bytes = conf_matrix_size(M, src, dst, conf_channels[c], k), off = 0;
                    do {
                        size_t len = bytes - off < S ? bytes - off : S;
                        mine++;
                        wrs += (long)((IBP_HDR_BYTES + len + W - 1) / W);
                        if (len > biggest) biggest = len;
                        off += len;
                    } while (off < bytes);
                }
        chunks += mine;
        uint64_t want = (uint64_t)mine * IBP_HDR_BYTES + (uint64_t)(M->world - 1) * IBP_INFO_BYTES;
        if (M->stats[src].overhead_sent != want)
            return snprintf(err, errlen, "rank %d: overhead sent %llu, expected %ld chunk headers and the connection "
                                         "info (%llu)", src, (unsigned long long)M->stats[src].overhead_sent, mine,
                            (unsigned long long)want), 1;
    }
    size_t want_max = IBP_HDR_BYTES + biggest < W ? IBP_HDR_BYTES + biggest : W;
    printf("fabric: %ld writes (%ld with immediate, %ld credits), largest %zu B; expected %ld chunks in %ld work "
           "requests, largest %zu B\n", s->writes, s->imm_writes, s->credit_writes, s->max_write, chunks, wrs, want_max);
    if (s->credit_writes != chunks) return snprintf(err, errlen, "%ld credits for %ld chunks", s->credit_writes, chunks), 1;
    if (s->imm_writes != 2 * chunks)
        return snprintf(err, errlen, "%ld writes with immediate for %ld chunks (+ as many credits)", s->imm_writes, chunks), 1;
    if (s->writes != wrs + chunks)
        return snprintf(err, errlen, "%ld writes, expected %ld data work requests + %ld credits", s->writes, wrs, chunks), 1;
    if (s->max_write != want_max)
        return snprintf(err, errlen, "largest work request %zu B, expected %zu (limit %zu)", s->max_write, want_max, W), 1;
    return 0;
}

static int soft_after_case(conf_transport *X, const conf_report *R, char *err, size_t errlen) {
    conf_ib *ib = X->impl;
    ib_soft_stats s;
    ib_soft_stats_get(ib->fab, &s);
    if (R->matrix && soft_matrix(ib, R->matrix, &s, err, errlen) != 0) return 1;
    if (s.src_changed != 0)
        return snprintf(err, errlen, "%ld staging buffers rewritten before their write completed", s.src_changed), 1;
    return 0;
}

/* ---- opening ---- */

/* libibverbs with a device: 0; else 77 after saying why not (no device, or not built). A
 * device that fails to open fails the test. */
static int verbs_here(void) {
#if WP_HAVE_IBVERBS
    ib_dev_cfg dc = {.port = 1};
    const char *dev = getenv("WEIPIPE_IB_DEVICE");
    if (dev) snprintf(dc.device, sizeof dc.device, "%s", dev);
    ib_dev *d;
    char desc[320], err[400];
    int rc = ib_hw_ops.open(&dc, &d, desc, sizeof desc, err, sizeof err);
    if (rc == IB_NO_DEVICE) {
        printf("skip: no RDMA device here (%s); the protocol is covered over the soft fabric (ib-soft)\n", err);
        return 77;
    }
    CHECK(rc == 0, "opening the RDMA device: %s", err);
    ib_hw_ops.close(d);
    printf("verbs: %s\n", desc);
    return 0;
#else
    printf("skip: this build has no libibverbs (meson option ibverbs)\n");
    return 77;
#endif
}

int conf_open_ib(conf_transport *X, bool over_soft) {
    if (!over_soft) {
        int rc = verbs_here();
        if (rc != 0) return rc;
    }
    conf_ib *ib = calloc(1, sizeof *ib);
    CHECK(ib, "out of memory");
    ib->ops = over_soft ? &ib_soft_ops : NULL;
#if WP_HAVE_IBVERBS
    if (!over_soft) ib->ops = &ib_hw_ops;
#endif
    ib->pc = (ibp_cfg){.slot_bytes = 4096, .wr_bytes = 4096 + IBP_HDR_BYTES, .timeout = 10};
    rh_net(&X->net, 1);
    X->impl = ib;
    X->run = run_ib;
    X->done = done_ib;
    X->unit = ib->pc.slot_bytes;
    X->threads = true;
    X->framed = true;
    X->tells_culprit = true; /* through the exchange transport */
    X->gone_says = over_soft ? "failed an RDMA data write on channel 0: remote queue pair gone"
                             : "failed an RDMA data write on channel 0: ";
    if (over_soft) {
        X->sender_held = soft_sender_held;
        X->after_case = soft_after_case;
    }
    return 0;
}
