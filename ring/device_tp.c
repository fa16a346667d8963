/* Choosing the transport for a rank's buffers (device_tp.h). */
#include "device_tp.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "staged.h"
#include "wp_config.h"
#if WP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "bootstrap.h"
#include "nccl_tp.h"
#endif

static bool is_nccl(const char *transport) { return strcmp(transport, "nccl") == 0; }

int tp_device_check(const struct wp_opts *o, char *err, size_t errlen) {
    if (!is_nccl(o->transport)) return 0;
#if WP_HAVE_NCCL
    if (strcmp(o->backend, "cuda") != 0) {
        snprintf(err, errlen, "--transport nccl moves GPU memory: it needs --backend cuda (got --backend %s)", o->backend);
        return 2;
    }
    /* Without a launcher, the ranks are this machine's processes (the local launcher), each on
     * the GPU of its local rank: refuse before starting any when there are fewer GPUs. */
    int gpus = 0;
    if (!boot_launched() && o->nranks > 1 && cudaGetDeviceCount(&gpus) == cudaSuccess && gpus < o->nranks) {
        snprintf(err, errlen, "--transport nccl --nranks %lld: this machine has %d GPU%s, and NCCL cannot put two ranks "
                              "on one GPU; use --transport local to run the ranks as threads sharing it",
                 (long long)o->nranks, gpus, gpus == 1 ? "" : "s");
        return 2;
    }
    return 0;
#else
    snprintf(err, errlen, "--transport nccl: this weipipe was built without NCCL (configure with -Dnccl=enabled, "
                          "which needs -Dcuda=enabled and libnccl; local and tcp are built)");
    return 2;
#endif
}

int tp_device_open(wp_transport *wire, wp_control *ctl, wp_kern *k, const char *transport, const wp_net_opts *net,
                   wp_transport **out, char *err, size_t errlen) {
    *out = wire;
    wp_transport *made = NULL;
    int rc = 0;
    if (is_nccl(transport)) {
#if WP_HAVE_NCCL
        rc = tp_nccl_open(wire, ctl, k, net->connect_timeout, &made, err, errlen);
        if (!rc) *out = made;
        return rc;
#else
        (void)ctl, (void)net;
        snprintf(err, errlen, "--transport nccl: this weipipe was built without NCCL (configure with -Dnccl=enabled)");
        return 2;
#endif
    }
    (void)ctl, (void)net;
    if (kern_kind(k) == WP_BACKEND_CPU) return 0;
    rc = tp_staged_open(wire, k, WP_STAGE_AUTO, &made, err, errlen);
    if (!rc) *out = made;
    return rc;
}

void tp_device_close(wp_transport *t) {
#if WP_HAVE_NCCL
    if (tp_is_nccl(t)) tp_close(t);
#endif
    if (tp_is_staged(t)) tp_close(t);
}
