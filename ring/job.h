/* One call that runs a rank function as every rank of a job, however the job is laid out, so
 * that a command (weipipe train) does not repeat the launcher / rendezvous / close logic:
 *   --transport local           N threads of this process (launch_threads);
 *   --transport tcp, no launcher variables, --nranks N > 1
 *                               this process becomes the launcher: N copies of the same command
 *                               line run as the ranks (launch_local), each of them going
 *                               through the next case;
 *   --transport tcp under a launcher (RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK set)
 *                               this process is one rank: rendezvous, fn, orderly close;
 *   a single rank without a launcher runs on its own (no network needed).
 * A rank whose fn fails aborts the job (every other rank's waits fail with its reason). */
#ifndef WP_RING_JOB_H
#define WP_RING_JOB_H

#include <stddef.h>

#include "launch.h"

struct wp_opts;

/* Returns the command's exit code: 0; 1 (a rank failed: "rank R: why" in err, or the
 * launcher's report); 2 (bad usage: an unknown or unbuilt transport, a world size that
 * contradicts --nranks, missing launcher variables; the culprit named in err). */
int wp_job_run(const struct wp_opts *o, wp_rank_fn fn, void *arg, char *err, size_t errlen);

#endif
