/* The table of transports (transport_table.h). */
#include "transport_table.h"

#include <stdio.h>
#include <string.h>

#include "bootstrap.h"
#include "job.h"
#include "ib_transport.h"
#include "wp_config.h"
#if WP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "nccl_transport.h"
#endif

static int tcp_open(const wp_boot_info *bi, const wp_job_cfg *cfg, tp_job_conn *c, char *err, size_t errlen) {
    c->oob = NULL;
    return wp_job_open_tcp(bi, &cfg->net, &c->t, &c->ctl, err, errlen) ? 1 : 0;
}

static void tcp_close(tp_job_conn *c) { wp_job_close(c->t, c->ctl); }

#if WP_HAVE_IBVERBS
static int ibverbs_open(const wp_boot_info *bi, const wp_job_cfg *cfg, tp_job_conn *c, char *err, size_t errlen) {
    return rdma_job_open(bi, &cfg->net, &cfg->ib, &c->t, &c->oob, &c->ctl, err, errlen);
}

static void ibverbs_close(tp_job_conn *c) { rdma_job_close(c->t, c->oob, c->ctl); }
#endif

#if WP_HAVE_NCCL
/* Without a launcher, the ranks are this machine's processes (the local launcher), each on the
 * GPU of its local rank: refuse before starting any when there are fewer GPUs. */
static int nccl_check(const wp_job_cfg *cfg, char *err, size_t errlen) {
    int gpus = 0;
    if (!boot_launched() && cfg->nranks > 1 && cudaGetDeviceCount(&gpus) == cudaSuccess && gpus < cfg->nranks) {
        snprintf(err, errlen, "--transport nccl --nranks %d: this machine has %d GPU%s, and NCCL cannot put two ranks "
                              "on one GPU; use --transport local to run the ranks as threads sharing it",
                 cfg->nranks, gpus, gpus == 1 ? "" : "s");
        return 2;
    }
    return 0;
}

static int nccl_open_device(wp_transport *wire, wp_control *ctl, wp_kern *k, const wp_net_opts *net,
                            wp_transport **out, char *err, size_t errlen) {
    return tp_nccl_open(wire, ctl, k, net->connect_timeout, out, err, errlen);
}
#endif

#define TP_ID_(n) TP_ROW_##n
#define TP_COMMA_ ,
enum { WP_TRANSPORTS(TP_ID_, TP_COMMA_), TP_ROWS };

static const tp_row table[TP_ROWS] = {
    [TP_ROW_local] = {.name = "local", .meet = TP_MEET_THREADS, .built = true},
    [TP_ROW_tcp] = {.name = "tcp", .meet = TP_MEET_RENDEZVOUS, .built = true, .open = tcp_open, .close = tcp_close},
    [TP_ROW_ibverbs] = {.name = "ibverbs",
                        .meet = TP_MEET_RENDEZVOUS,
#if WP_HAVE_IBVERBS
                        .built = true,
                        .open = ibverbs_open,
                        .close = ibverbs_close,
#endif
                        .how_to_build = "configure with -Dibverbs=enabled and libibverbs-dev"},
    [TP_ROW_nccl] = {.name = "nccl",
                     .meet = TP_MEET_RENDEZVOUS,
                     .device_memory = true,
#if WP_HAVE_NCCL
                     .built = true,
                     .open = tcp_open, /* NCCL's own set-up rides on the tcp rendezvous */
                     .close = tcp_close,
                     .check = nccl_check,
                     .open_device = nccl_open_device,
#endif
                     .how_to_build = "configure with -Dnccl=enabled, which needs -Dcuda=enabled and libnccl"},
};

const tp_row *tp_table_row(int i) { return i >= 0 && i < TP_ROWS ? &table[i] : NULL; }

const tp_row *tp_table_find(const char *name) {
    for (int i = 0; i < TP_ROWS; i++)
        if (strcmp(table[i].name, name) == 0) return &table[i];
    return NULL;
}

const tp_row *tp_table_pick(const char *name, char *err, size_t errlen) {
    const tp_row *k = tp_table_find(name);
    if (!k) {
        snprintf(err, errlen, "--transport: '%s' is not one of {%s}", name, WP_TRANSPORT_CHOICES);
        return NULL;
    }
    if (!k->built) {
        snprintf(err, errlen, "--transport %s: not built into this weipipe (%s)", name, k->how_to_build);
        return NULL;
    }
    return k;
}
