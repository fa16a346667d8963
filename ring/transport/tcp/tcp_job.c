/* A rank of a job with --transport tcp (or a transport riding on it: ibverbs, nccl): the
 * rendezvous (rendezvous.h) tells every rank the others' data addresses, and its connections
 * become the control channel. Ends in the transport's row of the registry (transport_table.h). */
#include "tcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bootstrap.h"
#include "control_tcp.h"
#include "job.h"
#include "rendezvous.h"
#include "transport_table.h"

static void free_addrs(char **addrs, int world) {
    for (int r = 0; addrs && r < world; r++) free(addrs[r]);
    free(addrs);
}

int tcp_job_open(const wp_boot_info *bi, const wp_net_opts *net, wp_transport **t, wp_control **ctl, char *err,
                 size_t errlen) {
    *t = NULL;
    *ctl = NULL;
    int world = bi->world;
    int lfd = bi->rank == 0 && bi->listen_inherited ? bi->listen_fd : -1; /* ours to close */
    int *fds = malloc((size_t)world * sizeof *fds);
    char **addrs = calloc((size_t)world, sizeof *addrs);
    if (!fds || !addrs) {
        if (lfd >= 0) close(lfd);
        free(fds);
        free(addrs);
        snprintf(err, errlen, "rank %d: out of memory for the rendezvous", bi->rank);
        return 1;
    }
    for (int r = 0; r < world; r++) fds[r] = -1;
    int rc = tcp_create(net, bi->rank, world, bi->job_id, bi->secret, t, err, errlen);
    if (rc == 0)
        rc = rdv_exchange(bi, net, *t, lfd, fds, addrs, err, errlen); /* closes lfd */
    else if (lfd >= 0)
        close(lfd); /* never reached */
    for (int r = 0; rc == 0 && r < world; r++)
        if (!addrs[r]) {
            snprintf(err, errlen, "rank %d: out of memory for the address table", bi->rank);
            rc = 1;
        }
    if (rc == 0) rc = tcp_set_peers(*t, addrs, err, errlen);
    if (rc == 0) {
        rc = ctl_tcp_start(bi->rank, world, fds, addrs, net->timeout, ctl, err, errlen);
        for (int r = 0; r < world; r++) fds[r] = -1; /* owned by the control channel now */
    }
    for (int r = 0; r < world; r++)
        if (fds[r] >= 0) close(fds[r]);
    free(fds);
    free_addrs(addrs, world);
    if (rc != 0) {
        tp_close(*t);
        *t = NULL;
        return rc == 2 ? 2 : 1; /* 2: bad input (a malformed variable) */
    }
    ctl_attach(*ctl, *t);
    return 0;
}

void tcp_job_close(wp_transport *t, wp_control *ctl) {
    ctl_close(ctl);
    tp_close(t);
}

int tcp_row_open(const wp_boot_info *bi, const wp_job_cfg *cfg, tp_job_conn *c, char *err, size_t errlen) {
    c->oob = NULL;
    return tcp_job_open(bi, &cfg->net, &c->t, &c->ctl, err, errlen);
}

void tcp_row_close(tp_job_conn *c) { tcp_job_close(c->t, c->ctl); }

const tp_row tp_row_tcp = {
    .name = "tcp",
    .meet = TP_MEET_RENDEZVOUS,
    .built = true,
    .open = tcp_row_open,
    .close = tcp_row_close,
};
