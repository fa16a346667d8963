/* Choosing the transport for a rank's buffers (device_tp.h). */
#include "device_tp.h"

#include "staged.h"
#include "wp_config.h"
#if WP_HAVE_NCCL
#include "nccl_transport.h"
#endif

int tp_device_open(wp_transport *wire, wp_control *ctl, wp_kern *k, const tp_row *kind, const wp_net_opts *net,
                   wp_transport **out, char *err, size_t errlen) {
    *out = wire;
    wp_transport *made = NULL;
    int rc;
    if (kind->open_device)
        rc = kind->open_device(wire, ctl, k, net, &made, err, errlen);
    else if (kern_kind(k) == WP_BACKEND_CPU)
        return 0;
    else
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
