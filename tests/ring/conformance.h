/* The transport conformance suite: the cases every transport behind transport.h must pass,
 * over a table of transports, each known by how it opens N ranks (conf_open). The cases
 * (conf_cases) run a rank function on the ranks; every rank checks what it sees itself, so
 * the same case holds for threads (local, RDMA) and forked processes (tcp).
 *
 * What a transport does beyond the interface (the RDMA fabric's chunk and credit counts, the
 * exact bytes of its headers, how it words a closed peer) is stated in its table entry:
 * fields and hooks below. tests/ring/test_conformance.c runs every case over one transport;
 * tests/ib/test_ib.c runs some of them over the soft fabric with other settings and faults. */
#ifndef WP_TESTS_RING_CONFORMANCE_H
#define WP_TESTS_RING_CONFORMANCE_H

#include "ib_proto.h"
#include "ib_soft.h"
#include "ring_harness.h"

#define CONF_MAX_RANKS 8

/* The matrix: every rank sends CONF_PER_BOX messages to every rank (itself too) on each of
 * CONF_NCH channels, sizes around the transport's unit (conf_matrix_size). */
#define CONF_NCH 3
#define CONF_PER_BOX 9
extern const int conf_channels[CONF_NCH];

typedef struct conf_matrix {
    int world;
    size_t unit;
    uint64_t seed;
    wp_transport_stats *stats; /* [world]: each rank's counters at the end (threads only) */
} conf_matrix;
size_t conf_matrix_size(const conf_matrix *M, int src, int dst, int ch, int k);

/* What a case leaves for the transport's own expectations (after_case). */
typedef struct conf_report {
    const char *name;         /* the case */
    const conf_matrix *matrix; /* the matrix case only */
} conf_report;

typedef struct conf_transport conf_transport;
struct conf_transport {
    const char *name;
    /* Run fn on n ranks, each with ctx->t a transport of this kind; 0, or non-zero with the
     * first failure ("rank R: why") in err. */
    int (*run)(conf_transport *X, int n, wp_rank_fn fn, void *arg, char *err, size_t errlen);
    void (*done)(conf_transport *X); /* NULL, or frees what conf_open made */
    wp_net_opts net;
    size_t unit;           /* the transport's grain (frame or staging buffer): sizes sit around it */
    bool threads;          /* ranks are threads of this process: their reports come back */
    bool framed;           /* counts header bytes both ways (else none at all) */
    bool tells_culprit;    /* a failure blamed on a peer is told to that peer too (tcp tells the
                              others only: the culprit may be dead; a job's control channel
                              tells it) */
    const char *gone_says; /* how a send to a peer that closed fails */
    /* Expectations of this transport only (NULL: none). Return 0, or 1 with a reason in err. */
    int (*sender_held)(conf_transport *X, char *err, size_t errlen); /* late: on the sender, sends
                                                                        posted, nothing received */
    int (*after_case)(conf_transport *X, const conf_report *R, char *err, size_t errlen);
    void *impl;
};

/* The transport called name: 0; 77 after printing "skip: <why>" where it cannot run here;
 * 2 for a name not in the table (the table is printed). */
int conf_open(conf_transport *X, const char *name);
void conf_close(conf_transport *X);

/* The RDMA transports' settings (X->impl of ib-soft and ib-verbs). */
typedef struct conf_ib {
    const ib_ops *ops;
    ibp_cfg pc;
    ib_soft_faults faults;   /* set on every run's fresh soft fabric (all zero: none) */
    ib_soft_fabric *fab;     /* soft: the last run's fabric (its counters, for after_case) */
} conf_ib;
int conf_open_ib(conf_transport *X, bool soft);

/* Inside a case's rank function: close this rank's transport now (a peer going away). */
void conf_close_rank(wp_rank_ctx *ctx);

/* Runs a case over X; a failure ends the test (FAIL line, exit 1). */
typedef struct conf_case {
    const char *name, *about;
    void (*run)(conf_transport *X);
} conf_case;
extern const conf_case conf_cases[];
extern const int conf_ncases;
const conf_case *conf_find_case(const char *name);

/* A failure case: two ranks, rank 1 posts a receive of recv_bytes on channel; rank 0 a send
 * of send_bytes when sender_posts; rank 1's wait (wait_s) fails, and each rank's message (of
 * its wait, or of the failure it learns of within 3 s) holds says[rank][...] (NULL-ended;
 * "{0}" and "{1}" stand for the names the transport gives ranks 0 and 1). The culprit (the
 * rank the failure is blamed on; -1: none) is held to it only where X->tells_culprit. */
typedef struct conf_fail {
    const char *name;
    int culprit;
    int channel;
    size_t send_bytes, recv_bytes;
    bool sender_posts;
    double wait_s;
    const char *says[2][4];
} conf_fail;
void conf_expect_failure(conf_transport *X, const conf_fail *F);

#endif
