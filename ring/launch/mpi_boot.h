/* Under mpirun, ranks find each other through MASTER_ADDR / MASTER_PORT (bootstrap.h). When
 * those are not exported to the ranks (mpirun -x), a build with MPI bootstraps through MPI
 * itself: rank 0 picks its address and a free port, and a job id and secret when none are set,
 * broadcasts them, and every rank sets the variables, so the rendezvous that follows is the
 * usual one (the data then travels over weipipe's tcp transport, not through MPI). */
#ifndef WP_RING_MPI_BOOT_H
#define WP_RING_MPI_BOOT_H

#include <stddef.h>

/* Returns 0 (the variables were set through MPI, or nothing was needed, or the build has no
 * MPI: then launcher_env.c names the missing variable), or 1 with a reason. */
int mpi_boot_env(char *err, size_t errlen);

#endif
