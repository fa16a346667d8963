/* A rank of a job with --transport nccl: the ranks meet by the tcp rendezvous and keep its
 * transport (tcp_row_open), and NCCL moves the device buffers once the compute context exists
 * (tp_nccl_open). Compiled in every build: the row is listed, unbuilt, without NCCL, and says
 * how to build it in. */
#include <stdio.h>

#include "bootstrap.h"
#include "job.h"
#include "tcp.h"
#include "transport_table.h"
#include "wp_config.h"
#if WP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "nccl_transport.h"

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

const tp_row tp_row_nccl = {
    .name = "nccl",
    .meet = TP_MEET_RENDEZVOUS,
    .device_memory = true,
#if WP_HAVE_NCCL
    .built = true,
    .open = tcp_row_open, /* NCCL's own set-up rides on the tcp rendezvous */
    .close = tcp_row_close,
    .check = nccl_check,
    .open_device = nccl_open_device,
#endif
    .how_to_build = "configure with -Dnccl=enabled, which needs -Dcuda=enabled and libnccl",
};
