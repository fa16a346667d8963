/* Flags of the ring layer: network, RDMA device, transport and job layout (adapters.h). */
#include <stdio.h>
#include <string.h>

#include "adapters.h"

wp_result net_cfg_from_opts(const wp_opts *o, wp_net_opts *n, char *err, size_t errlen) {
    tp_net_defaults(n);
    if (o->tcp_streams < 1 || o->tcp_streams > 64)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--tcp-streams %lld: give 1 to 64 sockets per peer", (long long)o->tcp_streams);
    if (!(o->connect_timeout > 0) || !(o->timeout > 0))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--%s must be positive", o->connect_timeout > 0 ? "timeout" : "connect-timeout");
    if (o->link_bandwidth < 0 || o->link_latency < 0 || o->node_link_bandwidth < 0 || o->node_link_latency < 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--link-bandwidth, --link-latency and the --node-link-* flags cannot be negative");
    if (o->ranks_per_node < 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--ranks-per-node %lld cannot be negative", (long long)o->ranks_per_node);
    n->tcp_streams = (int)o->tcp_streams;
    snprintf(n->bind, sizeof n->bind, "%s", o->bind);
    n->bind_given = o->set[FLAG_bind];
    n->connect_timeout = o->connect_timeout;
    n->timeout = o->timeout;
    n->link_bandwidth = o->link_bandwidth;
    n->link_latency = o->link_latency;
    n->ranks_per_node = (int)o->ranks_per_node;
    n->node_link_bandwidth = o->node_link_bandwidth;
    n->node_link_latency = o->node_link_latency;
    return 0;
}

wp_result ib_dev_cfg_from_opts(const wp_opts *o, ib_dev_cfg *dev, char *err, size_t errlen) {
    memset(dev, 0, sizeof *dev);
    if (strlen(o->ib_device) >= sizeof dev->device)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--ib-device '%.40s...' is too long", o->ib_device);
    if (o->ib_port < 1 || o->ib_port > 255)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--ib-port %lld: ports are numbered 1 to 255", (long long)o->ib_port);
    if (o->ib_gid_index < 0 || o->ib_gid_index > 255)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--ib-gid-index %lld: give 0 to 255", (long long)o->ib_gid_index);
    snprintf(dev->device, sizeof dev->device, "%s", o->ib_device);
    dev->port = (int)o->ib_port;
    dev->gid_index = (int)o->ib_gid_index;
    return 0;
}

wp_result job_cfg_from_opts(const wp_opts *o, wp_job_cfg *cfg, char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    /* the row's own name: built or not, tp_table_pick words the refusal */
    cfg->transport = tp_table_pick(tp_table_row((int)o->transport)->name, err, errlen);
    if (!cfg->transport) return WP_BAD_INPUT;
    if (o->nranks < 1 || o->nranks > 4096) return wp_fail(WP_BAD_INPUT, err, errlen, "--nranks: %lld must be 1..4096", (long long)o->nranks);
    cfg->nranks = (int)o->nranks;
    cfg->nranks_given = o->set[FLAG_nranks];
    wp_result rc = net_cfg_from_opts(o, &cfg->net, err, errlen);
    if (rc == 0) rc = ib_dev_cfg_from_opts(o, &cfg->ib, err, errlen);
    cfg->cuda_backend = o->backend == WP_BACKEND_CUDA;
    cfg->launch_grace = o->timeout;
    return rc;
}
