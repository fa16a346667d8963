/* What the RDMA transport (ring/ibverbs.h over ring/ib_proto.h) does beyond the transport
 * interface, on the soft fabric (ring/ib_soft.h). The cases every transport passes (the
 * matrix, a late receiver, reuse of one slot, silence, mismatched sizes, a peer gone) are the
 * conformance suite's (tests/ring/conformance.h), whose table holds ib-soft and ib-verbs; its
 * ib-soft entry checks the fabric's counters after each case. Here:
 *
 * usage: test_ib MODE [SLOT_BYTES WR_BYTES]
 *   matrix SLOT WR   the conformance matrix with these staging-buffer and work-request sizes:
 *                    chunking (none larger than WR; one credit per chunk; the exact header
 *                    bytes; no staging buffer reused before its write completed)
 *   ordering SLOT WR the matrix with send completions held back until after the receiver's
 *                    credit came back (completion ordering), and with writes landing late
 *   timeout          a write that vanishes: the sender fails naming the peer within the
 *                    completion timeout; the receiver learns it through the exchange channel
 *   errors           a write completing with an error: fails naming the peer and the error
 *   config           bad protocol settings are refused by rdma_create with the reason
 *   job              a launched rank with --transport ibverbs (wp_job_run): without a
 *                    device exit code 2 and "no RDMA device: ..."; with one a self transfer;
 *                    --ib-port 0 refused with exit code 2 */
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "conformance.h"
#include "adapters.h"
#include "job.h"
#include "ib_transport.h"

/* ---- timeout, errors: faults of the fabric ---- */

static void mode_timeout(conf_transport *X, conf_ib *ib) {
    /* The third write of rank 0 vanishes (and its queue pair stays dead): chunk 2 of 6. */
    ib->faults = (ib_soft_faults){.rank = 0, .drop_nth = 3};
    ib->pc.timeout = 0.4;
    size_t bytes = 6 * ib->pc.slot_bytes - 3;
    /* The completion timeout (0.4 s) fired, not the wait's silence timeout (20 s). */
    conf_fail F = {.name = "timeout", .culprit = 1, .channel = 0, .send_bytes = bytes, .recv_bytes = bytes, .sender_posts = true,
                   .wait_s = 20,
                   .says = {{"{1} did not confirm the RDMA write of give@0", "within 0.4 s"},
                            {"did not confirm the RDMA write"}}};
    conf_expect_failure(X, &F);
}

static void mode_errors(conf_transport *X, conf_ib *ib) {
    ib->faults = (ib_soft_faults){.rank = 0, .fail_nth = 2};
    size_t bytes = 3 * ib->pc.slot_bytes;
    conf_fail F = {.name = "errors", .culprit = 1, .channel = 6, .send_bytes = bytes, .recv_bytes = bytes, .sender_posts = true,
                   .wait_s = 20,
                   .says = {{"{1} failed an RDMA data write on channel 6: error injected by the test fabric"},
                            {"failed an RDMA data write on channel 6"}}};
    conf_expect_failure(X, &F);
}

/* ---- config: rdma_create refuses bad protocol settings ---- */

static int config_rank(wp_rank_ctx *ctx, void *arg) {
    ib_soft_fabric *fab = arg;
    struct {
        size_t slot, wr;
        double timeout;
        const char *says;
    } bad[] = {{0, 100, 1, "staging buffer of 0 bytes"},
               {4096, 0, 1, "work request of 0 bytes"},
               {1u << 20, 64, 1, "send queue entries per peer"},
               {4096, 4096, 0, "timeout 0 s must be positive"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ibp_cfg pc = {.slot_bytes = bad[i].slot, .wr_bytes = bad[i].wr, .timeout = bad[i].timeout};
        wp_transport *t = NULL;
        ib_dev_cfg dc = {.port = 1, .soft_fabric = fab, .soft_rank = ctx->rank};
        int rc = rdma_create(&ib_soft_ops, &dc, &pc, 1.0, ctx->t, &t, ctx->err, sizeof ctx->err);
        RANK_CHECK(ctx, rc == 1 && !t && strstr(ctx->err, bad[i].says), "case %zu: rc %d, message: %s", i, rc, ctx->err);
        if (ctx->rank == 0) printf("refused: %s\n", ctx->err);
    }
    ctx->err[0] = 0;
    return 0;
}

static void mode_config(void) {
    char err[800];
    ib_soft_fabric *fab;
    CHECK(ib_soft_fabric_create(&fab, err, sizeof err) == 0, "fabric: %s", err);
    wp_net_opts net;
    rh_net(&net, 1);
    CHECK(rh_run_local(1, &net, config_rank, fab, err, sizeof err) == 0, "%s", err);
    ib_soft_fabric_destroy(fab);
}

/* ---- job: a launched rank with --transport ibverbs ---- */

#if WP_HAVE_IBVERBS
static int job_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    char out[1001], in[1001];
    rh_fill(out, sizeof out, 7);
    wp_request *s, *r;
    RANK_CHECK(ctx, tp_post_recv(ctx->t, 0, 1, in, sizeof in, "in", &r, ctx->err, sizeof ctx->err) == 0, "%s", ctx->err);
    RANK_CHECK(ctx, tp_post_send(ctx->t, 0, 1, out, sizeof out, "out", &s, ctx->err, sizeof ctx->err) == 0, "%s", ctx->err);
    RANK_CHECK(ctx, tp_wait(&s, 5, ctx->err, sizeof ctx->err) == 0 && tp_wait(&r, 5, ctx->err, sizeof ctx->err) == 0,
               "%s", ctx->err);
    RANK_CHECK(ctx, memcmp(in, out, sizeof in) == 0, "self message differs");
    RANK_CHECK(ctx, strcmp(tp_kind(ctx->t), "ibverbs") == 0, "transport %s", tp_kind(ctx->t));
    return 0;
}

static int run_job(const char *const *flags, int nflags, char *err, size_t errlen) {
    char port[16];
    snprintf(port, sizeof port, "%d", rh_free_port());
    CHECK(setenv("RANK", "0", 1) == 0 && setenv("WORLD_SIZE", "1", 1) == 0 && setenv("LOCAL_RANK", "0", 1) == 0 &&
              setenv("MASTER_ADDR", "127.0.0.1", 1) == 0 && setenv("MASTER_PORT", port, 1) == 0 &&
              setenv("WEIPIPE_SECRET", RH_SECRET, 1) == 0 && setenv("WEIPIPE_JOB_ID", RH_JOB, 1) == 0,
          "setenv failed");
    char *argv[8] = {"train", "--transport", "ibverbs", "--connect-timeout", "5"};
    for (int i = 0; i < nflags; i++) argv[5 + i] = (char *)flags[i];
    wp_opts o;
    int rc = cli_parse(5 + nflags, argv, &o, err, errlen); /* a value outside its range (flag_bounds.c): 2 */
    if (rc) return rc;
    wp_job_cfg cfg; /* bad device flags: 2 naming the flag, as train says it */
    rc = job_cfg_from_opts(&o, &cfg, err, errlen);
    return rc ? rc : wp_job_run(&cfg, job_rank, NULL, err, errlen);
}
#endif

/* Without a device: exit code 2 and "no RDMA device: <why>"; with one: a self transfer. Bad
 * flags: exit code 2 naming the flag, device or not. */
static int mode_job(void) {
#if WP_HAVE_IBVERBS
    char err[800];
    ib_dev_cfg dc = {.port = 1};
    ib_dev *d;
    char desc[320], why[400];
    bool have = ib_hw_ops.open(&dc, &d, desc, sizeof desc, why, sizeof why) == 0;
    if (have) ib_hw_ops.close(d);
    int rc = run_job(NULL, 0, err, sizeof err);
    printf("job: exit code %d%s%s\n", rc, rc ? ": " : "", rc ? err : "");
    if (have) CHECK(rc == 0, "a self transfer over the device failed: %s", err);
    else CHECK(rc == 2 && strncmp(err, "no RDMA device: ", 16) == 0, "expected exit code 2 and \"no RDMA device\"");
    const char *bad_port[] = {"--ib-port", "0"};
    rc = run_job(bad_port, 2, err, sizeof err);
    printf("job --ib-port 0: exit code %d: %s\n", rc, err);
    CHECK(rc == 2 && (strstr(err, "--ib-port 0") || strstr(err, "--ib-port: 0 is out of range")),
          "expected exit code 2 naming --ib-port");
    return 0;
#else
    printf("skip: this build has no libibverbs (meson option ibverbs)\n");
    return 77;
#endif
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_ib matrix|ordering SLOT WR | timeout|errors|config|job\n");
        return 2;
    }
    const char *mode = argv[1];
    if (strcmp(mode, "job") == 0) return mode_job();
    if (strcmp(mode, "config") == 0) {
        mode_config();
    } else {
        conf_transport X;
        CHECK(conf_open(&X, "ib-soft") == 0, "no ib-soft transport");
        conf_ib *ib = X.impl;
        if (argc > 3) {
            ib->pc.slot_bytes = (size_t)atol(argv[2]);
            ib->pc.wr_bytes = (size_t)atol(argv[3]);
            X.unit = ib->pc.slot_bytes;
        }
        if (strcmp(mode, "matrix") == 0) {
            conf_find_case("matrix")->run(&X);
        } else if (strcmp(mode, "ordering") == 0) {
            ib->faults = (ib_soft_faults){.rank = -1, .send_cqe_delay_s = 0.0003, .write_delay_s = 0.0001};
            conf_find_case("matrix")->run(&X);
        } else if (strcmp(mode, "timeout") == 0) {
            mode_timeout(&X, ib);
        } else if (strcmp(mode, "errors") == 0) {
            mode_errors(&X, ib);
        } else {
            fprintf(stderr, "unknown mode %s\n", mode);
            return 2;
        }
        conf_close(&X);
    }
    printf("ok: %s\n", mode);
    return 0;
}
