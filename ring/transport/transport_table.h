/* The transports, in one table (as NCCL lists its transports): each row says how the ranks of a
 * job meet, whether the transport moves accelerator memory itself, whether this build has it,
 * and how a rank opens and closes it. Each transport defines its own row, `tp_row_<name>`, at
 * the end of transport/<name>/<name>_job.c; WP_TRANSPORTS below is the one list of them (the
 * recipe for a new transport: docs/transports.md "A new transport").
 *
 * A row is what --transport X means to a job. The vtable of one open transport (tp_ops in
 * transport_impl.h) is a different thing: the device layers (staged, layered, nccl) have one
 * without being a --transport choice, and nccl's row opens tcp's. `weipipe train` (through the job runner, job.h), the
 * --transport flag's choices and the device layer (device_tp.h) all read this table: nothing
 * else compares transport names.
 *
 *   local    threads of one process; buffers handed over in memory, paced like a link
 *   tcp      processes that meet at MASTER_ADDR:MASTER_PORT (bootstrap.h); TCP sockets
 *   ibverbs  processes; the tcp rendezvous, then RDMA over libibverbs (ib_transport.h)
 *   nccl     processes; the tcp rendezvous, then NCCL moves the GPU buffers (nccl_transport.h) */
#ifndef WP_RING_TRANSPORT_TABLE_H
#define WP_RING_TRANSPORT_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "control.h"
#include "kernels.h"
#include "transport.h"

/* The rows, in --help order. The flag's choices string is made from this same list. */
#define WP_TRANSPORTS(X, SEP) X(local) SEP X(tcp) SEP X(ibverbs) SEP X(nccl)
#define WP_TP_STR_(n) #n
#define WP_TP_BAR_ "|"
#define WP_TRANSPORT_CHOICES WP_TRANSPORTS(WP_TP_STR_, WP_TP_BAR_) /* "local|tcp|ibverbs|nccl" */

typedef enum { TP_MEET_THREADS, TP_MEET_RENDEZVOUS } tp_meet;

struct wp_boot_info;
struct wp_job_cfg;

/* What a launched rank holds open for the whole job: the transport its executor uses, the
 * control channel, and the out-of-band transport under it when there is one (ibverbs). */
typedef struct tp_job_conn {
    wp_transport *t;
    wp_transport *oob;
    wp_control *ctl;
} tp_job_conn;

typedef struct tp_row {
    const char *name;     /* the --transport value */
    tp_meet meet;         /* threads of one process, or processes meeting by rendezvous */
    bool device_memory;   /* moves accelerator buffers itself; else a device backend stages them */
    bool built;           /* compiled into this weipipe */
    const char *how_to_build; /* when !built: the configure option that brings it in */
    /* TP_MEET_RENDEZVOUS: open this rank's connections after the launcher variables were read
     * (bi). Returns 0, 1 or 2 (bad usage: a flag, no device) with a message. */
    int (*open)(const struct wp_boot_info *bi, const struct wp_job_cfg *cfg, tp_job_conn *c, char *err,
                size_t errlen);
    void (*close)(tp_job_conn *c);
    /* Flag combinations this transport cannot run, found before any rank starts (or NULL). */
    int (*check)(const struct wp_job_cfg *cfg, char *err, size_t errlen);
    /* device_memory transports: the layer over the rank's wire once its compute context exists.
     * Collective: every rank calls it at the same point. */
    int (*open_device)(wp_transport *wire, wp_control *ctl, wp_kern *k, const wp_net_opts *net, wp_transport **out,
                       char *err, size_t errlen);
} tp_row;

/* The row named `name`, or NULL (unknown names; built or not, every row is listed). */
const tp_row *tp_table_find(const char *name);
/* Row i in --help order, NULL past the end. */
const tp_row *tp_table_row(int i);
/* The row by name when it is built; NULL with "--transport X: ..." (unknown, or how to build it
 * in) in err otherwise. */
const tp_row *tp_table_pick(const char *name, char *err, size_t errlen);

#endif
