/* Helpers of the ring tests: seeded payloads, the check of rank functions (the others come
 * from tests/check.h), and running a rank function over N threads (local transport) or N
 * forked processes (tcp transport with the real rendezvous from launcher variables). */
#ifndef WP_TESTS_RING_HARNESS_H
#define WP_TESTS_RING_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "check.h"
#include "launch.h"
#include "transport.h"

/* Inside a rank function: record a reason and return 1 (the harness reports it). */
#define RANK_CHECK(ctx, cond, ...)                                               \
    do {                                                                         \
        if (!(cond)) {                                                           \
            char msg_[1200];                                                     \
            int n_ = snprintf(msg_, sizeof msg_, "%s:%d: ", __FILE__, __LINE__); \
            snprintf(msg_ + n_, sizeof msg_ - (size_t)n_, __VA_ARGS__);          \
            rh_set_err((ctx)->err, sizeof (ctx)->err, msg_);                     \
            return 1;                                                            \
        }                                                                        \
    } while (0)

/* Copy a message, cut to fit. */
void rh_set_err(char *dst, size_t dstlen, const char *msg);

uint64_t rh_mix(uint64_t x);
/* Bytes that depend only on (seed, position). */
void rh_fill(void *buf, size_t n, uint64_t seed);
/* First offset where buf differs from rh_fill(seed), or -1. */
long rh_mismatch(const void *buf, size_t n, uint64_t seed);

/* Run fn on n forked processes that find each other through RANK / WORLD_SIZE / MASTER_ADDR /
 * MASTER_PORT / WEIPIPE_* (as weipipe's launcher sets them). exits[r]: exit code of rank r, or
 * 128 + signal. stderr_dir: when set, rank r's stderr goes to <dir>/rank<r>.err. Returns 0
 * when all ended before deadline_s; otherwise kills them all and returns -1. *pgid: their
 * process group (for the "no process left behind" check). */
int rh_run_tcp(int n, const wp_net_opts *net, wp_rank_fn fn, void *arg, double deadline_s, int *exits,
               const char *stderr_dir, pid_t *pgid);
/* The pieces of rh_run_tcp, for tests that play one rank themselves: a free port, and one
 * forked rank (joins process group *pgid, created by the first call when *pgid is 0). */
int rh_free_port(void);
pid_t rh_fork_rank(int rank, int n, int port, const char *secret, const wp_net_opts *net, wp_rank_fn fn, void *arg,
                   pid_t *pgid, const char *stderr_dir);
#define RH_SECRET "ring-test-secret"
#define RH_JOB "ring-test"
/* Seconds rank r waits before it joins the rendezvous (tests of the rendezvous listener). */
extern double rh_join_delay[8];
/* The job flags text every forked rank compares at the rendezvous (wp_boot_info.job_flags);
 * NULL (the default): not compared. */
extern const char *rh_job_flags;

/* The same over threads and the local transport; returns launch_threads' code. */
int rh_run_local(int n, const wp_net_opts *net, wp_rank_fn fn, void *arg, char *err, size_t errlen);

/* No process of the group is left (not even a zombie). */
bool rh_group_gone(pid_t pgid);

/* Default options for tests: short timeouts, 64 KiB frames. */
void rh_net(wp_net_opts *net, int streams);

/* Whole file into a malloc'd string ("" when missing). */
char *rh_slurp(const char *path);

#endif
