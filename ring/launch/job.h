/* The job runner: one call that runs a rank function as every rank of a job, however the job is
 * laid out, so that a command (weipipe train) does not repeat the launcher / rendezvous / close
 * logic. The transport's row (transport_table.h) says how ranks meet:
 *   threads (local)         N threads of this process (launch_threads); refused under a
 *                           launcher, where each launched process would run a whole job;
 *   rendezvous (tcp, ibverbs, nccl)
 *     under a launcher      (RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK set; under mpirun
 *                           without MASTER_* the variables come through MPI, mpi_boot.h): this
 *                           process is one rank: rendezvous, open, fn, orderly close;
 *     no launcher, N > 1    this process becomes the launcher: N copies of the same command
 *                           line run as the ranks (launch_local), each going through the case
 *                           above;
 *     no launcher, N = 1    the rank runs here on its own (no network needed).
 * A rank whose fn fails aborts the job (every other rank's waits fail with its reason). */
#ifndef WP_RING_JOB_H
#define WP_RING_JOB_H

#include <stdbool.h>
#include <stddef.h>

#include "ib_ops.h"
#include "launch.h"
#include "transport_table.h"

typedef struct wp_job_cfg {
    const tp_row *transport; /* a built row of the table (tp_table_pick) */
    int nranks;               /* the ranks the job was planned for */
    bool nranks_given;        /* --nranks was given: a launcher's world size must agree */
    wp_net_opts net;
    ib_dev_cfg ib;            /* ibverbs: the device */
    bool cuda_backend;        /* the ranks compute on a CUDA device (device_memory transports need it) */
    double launch_grace;      /* launch_local: seconds the other ranks get after a failure */
    const char *job_flags;    /* the flags every rank must share ("name=value" lines, bootstrap.h); NULL: unchecked */
    /* Optional, called in each process that runs ranks, around them: first_rank is the lowest
     * rank this process runs (0 for threads). begin's failure (non-zero, message in err) ends
     * the job before any rank starts; end gets the job's code and returns the final one. */
    int (*process_begin)(void *arg, int first_rank, char *err, size_t errlen);
    int (*process_end)(void *arg, int first_rank, int rc, char *err, size_t errlen);
} wp_job_cfg;

/* Flag combinations the transport cannot run, found before anything starts (a device
 * transport without a device backend, nccl with too few GPUs). Returns 0, or 2 with the reason. */
int wp_job_check(const wp_job_cfg *cfg, char *err, size_t errlen);

/* Returns the command's exit code: 0; 1 (a rank failed: "rank R: why" in err, or the
 * launcher's report); 2 (bad usage: the check above, launcher variables missing or malformed,
 * a world size that contradicts --nranks, --transport local under a launcher). */
int wp_job_run(const wp_job_cfg *cfg, wp_rank_fn fn, void *arg, char *err, size_t errlen);

#endif
