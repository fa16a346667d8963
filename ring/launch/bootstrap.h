/* Rank discovery (launcher_env.c; the rendezvous itself: rendezvous.h). Ranks learn who they are from the variables existing
 * launchers set (never a home-made cluster manager):
 *   torchrun / weipipe's own launcher: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
 *   Slurm (srun):  SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; MASTER_ADDR / MASTER_PORT when
 *                  set, else the first host of SLURM_JOB_NODELIST and port 20000 + job id % 20000.
 *                  Only in a job step (SLURM_STEP_ID set): the batch script of sbatch has
 *                  SLURM_PROCID=0 but no step id, and a process started there is not launched.
 *   Open MPI (mpirun): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
 *                  with MASTER_ADDR / MASTER_PORT (mpirun -x MASTER_ADDR -x MASTER_PORT)
 * and optionally WEIPIPE_SECRET (any string shared by the job's ranks: without it the ranks
 * are not authenticated, as with NCCL or gloo, and rank 0 warns once) and WEIPIPE_PEERS (the
 * hosts that may join: "launcher" for Slurm's node list, or a list "node[01-04],login1"; a
 * connection to rank 0 from any other address is dropped unread). The job id that tells two
 * jobs at one MASTER_ADDR:MASTER_PORT apart: WEIPIPE_JOB_ID (weipipe's launcher sets it), else
 * the launcher's: TORCHELASTIC_RUN_ID (torchrun), SLURM_JOB_ID.SLURM_STEP_ID (srun; two steps of
 * one allocation differ), PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid (mpirun).
 *
 * Port: WEIPIPE_PORT when set (any launcher; the same on every rank); else under torchrun with
 * TORCHELASTIC_USE_AGENT_STORE=True, MASTER_PORT + 1, because torchrun's agent store (a TCPStore
 * of the master host's agent) already listens on MASTER_PORT there; else MASTER_PORT (Slurm
 * without MASTER_PORT: 20000 + SLURM_JOB_ID % 20000). Below, "MASTER_PORT" means this port.
 *
 * Rendezvous: rank 0 listens on MASTER_ADDR:MASTER_PORT; every rank connects (handshake with
 * job id and secret) and sends the address of its data listener; rank 0 answers with the table
 * of all addresses. These connections stay open as the control channel (control.h).
 *
 * WEIPIPE_LISTEN_FD (read by rank 0 only, ignored elsewhere): the number of an inherited fd
 * that already listens at MASTER_ADDR:MASTER_PORT. weipipe's own launcher (launch.h) binds the
 * port it chooses and hands that socket to rank 0 this way, so that the port is never free
 * between its choice and the rendezvous (another process could take it). It must be a
 * listening TCP socket bound to exactly MASTER_ADDR:MASTER_PORT (getsockname), else boot
 * fails (2) naming the variable. Unset (torchrun, srun, mpirun, other launchers): rank 0 binds
 * MASTER_ADDR:MASTER_PORT itself. */
#ifndef WP_RING_BOOTSTRAP_H
#define WP_RING_BOOTSTRAP_H

#include <stdbool.h>
#include <stddef.h>

#include "control.h"
#include "result.h"
#include "transport.h"

typedef struct wp_boot_info {
    int rank, world, local_rank;
    char master_addr[256];
    int master_port;      /* the rendezvous port: see "Port" above */
    const char *port_from; /* how it was chosen, for messages ("MASTER_PORT", "MASTER_PORT+1 ...") */
    char job_id[64];      /* what tells this job from another at the same rendezvous */
    const char *job_id_from; /* the variable(s) it came from, for messages */
    char secret[64];      /* WEIPIPE_SECRET; empty: the ranks are not authenticated */
    const char *launcher; /* "torchrun", "slurm" or "openmpi" */
    /* Rank 0: the rendezvous listener inherited through WEIPIPE_LISTEN_FD, checked and made
     * close-on-exec and non-blocking; tcp_job_open (tcp.h) uses it instead of binding, and closes it. */
    bool listen_inherited; /* false (the zeroed default): rank 0 binds MASTER_ADDR:MASTER_PORT */
    int listen_fd;
    bool notice_inherited; /* weipipe's launcher: notice_fd is its notice of a peer's end (notice.h) */
    int notice_fd;
    /* The flags that every rank of the job must share, as "name=value" lines in one fixed order
     * (the command writes them; NULL: not compared). The rendezvous handshake carries their
     * crc32; a rank whose hash differs from rank 0's fails the rendezvous on both sides, which
     * swap the texts to name the first flag that differs. */
    const char *job_flags;
    /* WEIPIPE_PEERS: the hosts that may join the rendezvous, in Slurm's host list syntax (the
     * value itself, or with WEIPIPE_PEERS=launcher SLURM_STEP_NODELIST / SLURM_JOB_NODELIST);
     * rank 0 resolves them when it opens the rendezvous (peer_hosts.h). "": anyone may try. */
    char peers[4096];
    const char *peers_from; /* the variable the list came from, for messages */
} wp_boot_info;

typedef const char *(*wp_getenv_fn)(const char *name, void *ctx);

/* Fill bi from a launcher's variables (get: getenv-like). Returns 0; 1 when no launcher
 * variable is set at all (a plain process: single rank, or the parent that launches); 2 with
 * a one-line message naming the missing or malformed variable (WEIPIPE_LISTEN_FD included:
 * on rank 0 its fd is checked in this process). */
int boot_from_env(wp_boot_info *bi, wp_getenv_fn get, void *ctx, char *err, size_t errlen);
/* The same from this process's environment. */
int boot_from_environ(wp_boot_info *bi, char *err, size_t errlen);
/* Whether this process was started by a launcher (RANK, OMPI_COMM_WORLD_RANK, or SLURM_PROCID
 * in a Slurm job step, i.e. with SLURM_STEP_ID; in that order of precedence). */
bool boot_launched(void);
/* This launched job's id (as the handshake carries it, see above) into out: 0; 1 when not
 * launched; 2 when the variables do not give one. */
int boot_job_id_from_environ(char *out, size_t outlen);

/* The world size the launcher says (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS), read without
 * any rendezvous: the schedule is built before it. Returns 0 with *world and *launcher ("torchrun",
 * "slurm", "openmpi"); 1 when not launched; 2 with a message naming a missing or malformed
 * variable. */
int boot_world_from_env(int *world, const char **launcher, wp_getenv_fn get, void *ctx, char *err, size_t errlen);
int boot_world_from_environ(int *world, const char **launcher, char *err, size_t errlen);

/* How many ranks of this job run on this host, as the launcher says: LOCAL_WORLD_SIZE (torchrun,
 * weipipe's launcher), OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID
 * ("2(x3),1") else SLURM_NTASKS_PER_NODE. 0 when not launched or not said. */
int boot_local_world_from_env(wp_getenv_fn get, void *ctx);

/* CPU threads for each rank: threads_flag if > 0 (--threads), else OMP_NUM_THREADS, else
 * SLURM_CPUS_PER_TASK, else cores divided by the ranks on this host: the launcher's count above
 * when launched (1 thread if it does not say), else ranks_in_process (the threads of a local
 * job) -- never cores / the world size. Writes where the number came from into from. */
int boot_threads_per_rank(int threads_flag, int ranks_in_process, long cores, wp_getenv_fn get, void *ctx, char *from,
                          size_t fromlen);
int boot_threads_per_rank_environ(int threads_flag, int ranks_in_process, long cores, char *from, size_t fromlen);

/* First host of a Slurm node list ("gpu[03-05,9],cpu1" -> "gpu03"). Returns WP_OK, or
 * WP_BAD_INPUT without a message (its caller names the variable the list came from). */
wp_result boot_slurm_first_host(const char *nodelist, char *host, size_t hostlen);

#endif
