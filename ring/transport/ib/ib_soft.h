/* A software RDMA fabric implementing ib_ops.h inside one process, for the unit tests of the
 * RDMA protocol on machines without an RDMA device: devices are ranks (threads), writes are
 * memcpy done by a "wire" thread in posting order (so a queue pair keeps the reliable-
 * connected ordering), completions go to per-device queues, and faults can be injected:
 * a write that vanishes (no data, no completion: the sender's timeout must catch it), a write
 * that completes with an error, writes that land late, and send completions held back until
 * after the receiver reacted (completion ordering). Writes to unregistered memory, outside a
 * region, with a wrong rkey or without a posted receive fail as real hardware would. */
#ifndef WP_RING_IB_SOFT_H
#define WP_RING_IB_SOFT_H

#include "ib_ops.h"

typedef struct ib_soft_fabric ib_soft_fabric;

typedef struct ib_soft_faults {
    int rank;               /* whose writes are affected; -1: everyone's */
    long drop_nth;          /* that rank's n-th write (from 1) vanishes, and every later write of
                               its queue pair (a link gone dead); 0: none */
    long fail_nth;          /* that rank's n-th write completes with an error, and later
                               writes of its queue pair vanish; 0: none */
    double write_delay_s;   /* every write lands this much after it was posted */
    double send_cqe_delay_s;/* send completions come this much after the data landed */
} ib_soft_faults;

typedef struct ib_soft_stats {
    long writes, imm_writes, credit_writes; /* credit: zero-byte writes with an immediate */
    size_t max_write;                       /* the largest single work request seen */
    long src_changed; /* writes whose source bytes changed before their completion (a
                         protocol that reuses a staging buffer too early) */
} ib_soft_stats;

/* A fabric with its wire thread: WP_OK, or WP_FAILED with a message. */
wp_result ib_soft_fabric_create(ib_soft_fabric **f, char *err, size_t errlen);
/* Takes effect for writes posted afterwards; counters of drop_nth / fail_nth restart. */
void ib_soft_set_faults(ib_soft_fabric *f, const ib_soft_faults *faults);
void ib_soft_stats_get(ib_soft_fabric *f, ib_soft_stats *s);
/* After every device of the fabric is closed. */
void ib_soft_fabric_destroy(ib_soft_fabric *f);

#endif
