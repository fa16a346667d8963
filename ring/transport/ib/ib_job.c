/* A rank of a job with --transport ibverbs: the tcp rendezvous (tcp_job_open) gives the control
 * channel and the out-of-band transport, then the RDMA transport over libibverbs. Ends in the
 * transport's row of the registry (transport_table.h); without libibverbs the row stays, unbuilt,
 * and says how to build it in. */
#include "ib_transport.h"

#include "bootstrap.h"
#include "job.h"
#include "tcp.h"
#include "transport_table.h"
#include "wp_config.h"

#if WP_HAVE_IBVERBS
int rdma_job_open(const wp_boot_info *bi, const wp_net_opts *net, const ib_dev_cfg *dev, wp_transport **t,
                  wp_transport **oob, wp_control **ctl, char *err, size_t errlen) {
    *t = NULL;
    if (tcp_job_open(bi, net, oob, ctl, err, errlen) != 0) return 1;
    int rc = rdma_open_over(*oob, dev, net, t, err, errlen);
    if (rc != 0) {
        ctl_abort(*ctl, err);
        tcp_job_close(*oob, *ctl);
        *oob = NULL;
        *ctl = NULL;
        return rc;
    }
    ctl_attach(*ctl, *t);
    return 0;
}

void rdma_job_close(wp_transport *t, wp_transport *oob, wp_control *ctl) {
    ctl_close(ctl);
    tp_close(t);
    tp_close(oob);
}

static int ibverbs_open(const wp_boot_info *bi, const wp_job_cfg *cfg, tp_job_conn *c, char *err, size_t errlen) {
    return rdma_job_open(bi, &cfg->net, &cfg->ib, &c->t, &c->oob, &c->ctl, err, errlen);
}

static void ibverbs_close(tp_job_conn *c) { rdma_job_close(c->t, c->oob, c->ctl); }
#endif

const tp_row tp_row_ibverbs = {
    .name = "ibverbs",
    .meet = TP_MEET_RENDEZVOUS,
#if WP_HAVE_IBVERBS
    .built = true,
    .open = ibverbs_open,
    .close = ibverbs_close,
#endif
    .how_to_build = "configure with -Dibverbs=enabled and libibverbs-dev",
};
