/* MPI bootstrap of the rendezvous variables (mpi_boot.h). */
#include "mpi_boot.h"

#include "wp_config.h"

#if WP_HAVE_MPI
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sock.h"

static bool set(const char *name) {
    const char *v = getenv(name);
    return v && v[0];
}

/* Under Open MPI with MASTER_ADDR or MASTER_PORT missing (the secret is optional, and the job id
 * is Open MPI's own when WEIPIPE_JOB_ID is not set: bootstrap.h). */
static bool needed(void) {
    if (!set("OMPI_COMM_WORLD_RANK") || set("RANK")) return false; /* Open MPI before Slurm: launcher_env.c */
    return !set("MASTER_ADDR") || !set("MASTER_PORT");
}

typedef struct {
    int ok;
    char addr[256], port[16], secret[64], job[64], why[400];
} boot_msg;

/* Rank 0: its address (loopback when the whole job is on this node), a port free right now, and
 * a secret and job id unless the user gave them (every rank sees the same environment). */
static void choose(boot_msg *m) {
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), *world = getenv("OMPI_COMM_WORLD_SIZE");
    bool one_node = local && world && strcmp(local, world) == 0;
    if (set("MASTER_ADDR")) snprintf(m->addr, sizeof m->addr, "%s", getenv("MASTER_ADDR"));
    else if (one_node) snprintf(m->addr, sizeof m->addr, "127.0.0.1");
    else if (gethostname(m->addr, sizeof m->addr) != 0) return (void)snprintf(m->why, sizeof m->why, "gethostname failed");
    m->addr[sizeof m->addr - 1] = 0;
    if (set("MASTER_PORT")) {
        snprintf(m->port, sizeof m->port, "%s", getenv("MASTER_PORT"));
    } else {
        char why[200], local_addr[SOCK_ADDR_MAX], host[SOCK_ADDR_MAX];
        int port = 0, fd = sock_listen(one_node ? "127.0.0.1" : "0.0.0.0", 0, why, sizeof why);
        if (fd < 0) return (void)snprintf(m->why, sizeof m->why, "no free port for MASTER_PORT: %s", why);
        sock_local_addr(fd, local_addr, sizeof local_addr);
        close(fd);
        if (sock_split_addr(local_addr, host, sizeof host, &port, why, sizeof why) != 0 || port <= 0)
            return (void)snprintf(m->why, sizeof m->why, "no free port for MASTER_PORT (%s)", local_addr);
        snprintf(m->port, sizeof m->port, "%d", port);
    }
    unsigned long long r[2] = {0, 0};
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(r, sizeof r, 1, f) : 0;
    if (f) fclose(f);
    if (got != 1) return (void)snprintf(m->why, sizeof m->why, "cannot read /dev/urandom for WEIPIPE_SECRET");
    snprintf(m->secret, sizeof m->secret, "%s", set("WEIPIPE_SECRET") ? getenv("WEIPIPE_SECRET") : "");
    if (!m->secret[0]) snprintf(m->secret, sizeof m->secret, "%016llx%016llx", r[0], r[1]);
    snprintf(m->job, sizeof m->job, "%s", set("WEIPIPE_JOB_ID") ? getenv("WEIPIPE_JOB_ID") : "");
    if (!m->job[0]) snprintf(m->job, sizeof m->job, "mpi-%ld-%llx", (long)getpid(), r[0] >> 32);
    m->ok = 1;
}

static int mpi_fail(char *err, size_t errlen, const char *what, int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error %d", rc);
    snprintf(err, errlen, "MPI bootstrap: %s failed: %s", what, text);
    return 1;
}

int mpi_boot_env(char *err, size_t errlen) {
    if (!needed()) return 0;
    int rc, rank = 0, inited = 0;
    if ((rc = MPI_Initialized(&inited)) != MPI_SUCCESS) return mpi_fail(err, errlen, "MPI_Initialized", rc);
    if (!inited && (rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) return mpi_fail(err, errlen, "MPI_Init", rc);
    if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, &rank)) != MPI_SUCCESS) return mpi_fail(err, errlen, "MPI_Comm_rank", rc);
    boot_msg m;
    memset(&m, 0, sizeof m);
    if (rank == 0) choose(&m);
    if ((rc = MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, 0, MPI_COMM_WORLD)) != MPI_SUCCESS)
        return mpi_fail(err, errlen, "MPI_Bcast", rc);
    /* MPI's part is over: the job talks over weipipe's own transport from here on */
    if ((rc = MPI_Finalize()) != MPI_SUCCESS) return mpi_fail(err, errlen, "MPI_Finalize", rc);
    if (!m.ok) return snprintf(err, errlen, "MPI bootstrap: rank 0: %s", m.why), 1;
    if (setenv("MASTER_ADDR", m.addr, 1) || setenv("MASTER_PORT", m.port, 1) || setenv("WEIPIPE_SECRET", m.secret, 1) ||
        setenv("WEIPIPE_JOB_ID", m.job, 1))
        return snprintf(err, errlen, "MPI bootstrap: setenv failed"), 1;
    return 0;
}

#else

int mpi_boot_env(char *err, size_t errlen) {
    (void)err, (void)errlen;
    return 0; /* launcher_env.c names the variable the launcher did not export */
}

#endif
