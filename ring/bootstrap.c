/* Rank discovery from launcher variables and the tcp rendezvous (see bootstrap.h). */
#include "bootstrap.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "control_tcp.h"
#include "handshake.h"
#include "sock.h"
#include "tcp.h"
#include "wire.h"

/* ---- environment ---- */

static const char *env_get(const char *name, void *ctx) {
    (void)ctx;
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static const char *get_nonempty(wp_getenv_fn get, void *ctx, const char *name) {
    const char *v = get(name, ctx);
    return v && *v ? v : NULL;
}

/* An integer variable in [lo, hi]; 0, or 2 with a message naming it. */
static int int_var(wp_getenv_fn get, void *ctx, const char *name, long lo, long hi, bool required, long *out,
                   char *err, size_t errlen) {
    const char *v = get_nonempty(get, ctx, name);
    if (!v) {
        if (!required) return 0;
        snprintf(err, errlen, "%s is not set", name);
        return 2;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        snprintf(err, errlen, "%s='%.40s' is not an integer in %ld..%ld", name, v, lo, hi);
        return 2;
    }
    *out = x;
    return 0;
}

static int str_var(wp_getenv_fn get, void *ctx, const char *name, char *out, size_t outlen, char *err,
                   size_t errlen) {
    const char *v = get_nonempty(get, ctx, name);
    if (!v) {
        snprintf(err, errlen, "%s is not set", name);
        return 2;
    }
    if (strlen(v) >= outlen) {
        snprintf(err, errlen, "%s is longer than %zu characters", name, outlen - 1);
        return 2;
    }
    snprintf(out, outlen, "%s", v);
    return 0;
}

int boot_slurm_first_host(const char *nodelist, char *host, size_t hostlen) {
    size_t n = strcspn(nodelist, "[,");
    if (n == 0 || n >= hostlen) return -1;
    memcpy(host, nodelist, n);
    host[n] = 0;
    if (nodelist[n] != '[') return 0;
    const char *p = nodelist + n + 1;
    size_t digits = 0;
    while (isdigit((unsigned char)p[digits])) digits++;
    if (digits == 0 || n + digits >= hostlen || (p[digits] != '-' && p[digits] != ',' && p[digits] != ']')) return -1;
    memcpy(host + n, p, digits);
    host[n + digits] = 0;
    return 0;
}

static int slurm_master(wp_boot_info *bi, wp_getenv_fn get, void *ctx, char *err, size_t errlen) {
    if (get_nonempty(get, ctx, "MASTER_ADDR")) {
        if (str_var(get, ctx, "MASTER_ADDR", bi->master_addr, sizeof bi->master_addr, err, errlen)) return 2;
    } else {
        /* The step's nodes first: a job step may run on part of the allocation, and rank 0
         * (SLURM_PROCID 0) is on the first node of its step, not of the job. */
        const char *var = "SLURM_STEP_NODELIST", *list = get_nonempty(get, ctx, var);
        if (!list) list = get_nonempty(get, ctx, var = "SLURM_JOB_NODELIST");
        if (!list) list = get_nonempty(get, ctx, var = "SLURM_NODELIST");
        if (!list) {
            snprintf(err, errlen, "neither MASTER_ADDR nor SLURM_STEP_NODELIST / SLURM_JOB_NODELIST is set");
            return 2;
        }
        if (boot_slurm_first_host(list, bi->master_addr, sizeof bi->master_addr) != 0) {
            snprintf(err, errlen, "%s='%.60s' has no first host name", var, list);
            return 2;
        }
    }
    long port = 0, job = 0;
    if (get_nonempty(get, ctx, "MASTER_PORT")) {
        bi->port_from = "MASTER_PORT";
        return int_var(get, ctx, "MASTER_PORT", 1, 65535, true, &port, err, errlen) ? 2 : (bi->master_port = (int)port, 0);
    }
    if (int_var(get, ctx, "SLURM_JOB_ID", 0, 0x7fffffffL, false, &job, err, errlen)) return 2;
    if (!get_nonempty(get, ctx, "SLURM_JOB_ID")) {
        snprintf(err, errlen, "neither MASTER_PORT nor SLURM_JOB_ID is set");
        return 2;
    }
    /* The same on every node of the step; two steps of one job running at once (srun ... &
     * twice in a batch script) get different ports: 131 is prime to 20000, so two steps of
     * one job collide only 20000 steps apart, and step 0 of two jobs only 20000 job ids apart
     * (the job id in the handshake still keeps those apart). */
    long step = 0;
    const char *sv = get_nonempty(get, ctx, "SLURM_STEP_ID") ? "SLURM_STEP_ID" : "SLURM_STEPID";
    if (int_var(get, ctx, sv, 0, 0x7fffffffL, false, &step, err, errlen)) return 2;
    bi->master_port = 20000 + (int)((job % 20000 * 131 + step % 20000) % 20000);
    bi->port_from = "20000 + (131 SLURM_JOB_ID + SLURM_STEP_ID) % 20000";
    return 0;
}

static int master_vars(wp_boot_info *bi, wp_getenv_fn get, void *ctx, char *err, size_t errlen) {
    long port;
    if (str_var(get, ctx, "MASTER_ADDR", bi->master_addr, sizeof bi->master_addr, err, errlen) ||
        int_var(get, ctx, "MASTER_PORT", 1, 65535, true, &port, err, errlen))
        return 2;
    bi->master_port = (int)port;
    bi->port_from = "MASTER_PORT";
    /* torchrun's agent on the master host serves its TCPStore on MASTER_PORT for the workers'
     * c10d (torch.distributed.elastic.agent.server.api: use_agent_store); the port above is
     * the next one, the same on every rank without any exchange. */
    const char *agent = get_nonempty(get, ctx, "TORCHELASTIC_USE_AGENT_STORE");
    if (get_nonempty(get, ctx, "RANK") && agent && strcmp(agent, "True") == 0) {
        if (port == 65535) {
            snprintf(err, errlen, "MASTER_PORT=65535 under torchrun's agent store leaves no MASTER_PORT+1: set WEIPIPE_PORT");
            return 2;
        }
        bi->master_port = (int)port + 1;
        bi->port_from = "MASTER_PORT+1, as torchrun's agent store holds MASTER_PORT";
    }
    return 0;
}

/* WEIPIPE_PORT replaces whatever port the launcher's variables gave. */
static int port_override(wp_boot_info *bi, wp_getenv_fn get, void *ctx, char *err, size_t errlen) {
    long port;
    if (!get_nonempty(get, ctx, "WEIPIPE_PORT")) return 0;
    if (int_var(get, ctx, "WEIPIPE_PORT", 1, 65535, true, &port, err, errlen)) return 2;
    bi->master_port = (int)port;
    bi->port_from = "WEIPIPE_PORT";
    return 0;
}

/* The job's secret (optional: without it the ranks are not authenticated, as with NCCL or gloo)
 * and its id, which tells two jobs at the same MASTER_ADDR:MASTER_PORT apart: WEIPIPE_JOB_ID
 * (weipipe's own launcher sets it), else the id of the launcher that started this rank. */
static int job_vars(wp_boot_info *bi, wp_getenv_fn get, void *ctx, char *err, size_t errlen) {
    const char *secret = get_nonempty(get, ctx, "WEIPIPE_SECRET");
    if (secret && strlen(secret) >= sizeof bi->secret) {
        snprintf(err, errlen, "WEIPIPE_SECRET is longer than %zu characters (give every rank of the job the same "
                              "shorter string)", sizeof bi->secret - 1);
        return 2;
    }
    snprintf(bi->secret, sizeof bi->secret, "%s", secret ? secret : "");
    const char *from = NULL, *id = NULL, *step = NULL;
    if ((id = get_nonempty(get, ctx, "WEIPIPE_JOB_ID"))) {
        from = "WEIPIPE_JOB_ID";
    } else if (strcmp(bi->launcher, "torchrun") == 0) {
        if ((id = get_nonempty(get, ctx, "TORCHELASTIC_RUN_ID"))) from = "TORCHELASTIC_RUN_ID";
    } else if (strcmp(bi->launcher, "slurm") == 0) {
        /* two job steps of one allocation (two sruns) are two jobs */
        if ((id = get_nonempty(get, ctx, "SLURM_JOB_ID"))) {
            step = get_nonempty(get, ctx, "SLURM_STEP_ID");
            from = step ? "SLURM_JOB_ID.SLURM_STEP_ID" : "SLURM_JOB_ID";
        }
    } else if ((id = get_nonempty(get, ctx, "PMIX_NAMESPACE"))) { /* Open MPI 4 and 5 (PMIx) */
        from = "PMIX_NAMESPACE";
    } else if ((id = get_nonempty(get, ctx, "OMPI_MCA_ess_base_jobid"))) { /* Open MPI before PMIx */
        from = "OMPI_MCA_ess_base_jobid";
    }
    if (!id) {
        snprintf(err, errlen, "WEIPIPE_JOB_ID is not set, nor the launcher's job id (%s): give every rank of the job "
                 "the same WEIPIPE_JOB_ID, one that no other job at MASTER_ADDR:MASTER_PORT uses",
                 strcmp(bi->launcher, "torchrun") == 0 ? "TORCHELASTIC_RUN_ID, which torchrun --rdzv-id ID sets"
                 : strcmp(bi->launcher, "slurm") == 0  ? "SLURM_JOB_ID"
                                                       : "PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid");
        return 2;
    }
    int n = step ? snprintf(bi->job_id, sizeof bi->job_id, "%s.%s", id, step)
                 : snprintf(bi->job_id, sizeof bi->job_id, "%s", id);
    if (n < 0 || (size_t)n >= sizeof bi->job_id) {
        snprintf(err, errlen, "%s is longer than %zu characters", from, sizeof bi->job_id - 1);
        return 2;
    }
    bi->job_id_from = from;
    return 0;
}

/* ---- the rendezvous listener inherited from the launcher (WEIPIPE_LISTEN_FD) ---- */

static bool same_endpoint(const struct sockaddr_storage *a, const struct sockaddr *b) {
    if (a->ss_family != b->sa_family) return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const struct sockaddr_in *)a, *y = (const struct sockaddr_in *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a, *y = (const struct sockaddr_in6 *)b;
        return x->sin6_port == y->sin6_port && memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
    }
    return false;
}

/* Whether fd is bound to one of the addresses sock_listen(host, port) would bind; why if not. */
static bool bound_to(int fd, const char *host, int port, char *why, size_t whylen) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        snprintf(why, whylen, "getsockname: %s", strerror(errno));
        return false;
    }
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    const char *node = sock_is_wildcard(host) ? (strcmp(host, "::") == 0 ? "::" : NULL) : host; /* as sock_listen */
    int rc = getaddrinfo(node, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(why, whylen, "cannot resolve MASTER_ADDR '%.60s': %s", host, gai_strerror(rc));
        return false;
    }
    bool match = false;
    for (struct addrinfo *ai = res; ai && !match; ai = ai->ai_next) match = same_endpoint(&sa, ai->ai_addr);
    freeaddrinfo(res);
    if (!match) {
        char bound[SOCK_ADDR_MAX];
        sock_local_addr(fd, bound, sizeof bound);
        snprintf(why, whylen, "it is bound to %s", bound);
    }
    return match;
}

/* Whether fd is a listening TCP socket bound to host:port; why if not. */
static bool is_listener_at(int fd, const char *host, int port, char *why, size_t whylen) {
    int type = 0, proto = 0, on = 0;
    socklen_t len = sizeof type;
    if (fcntl(fd, F_GETFD) < 0) {
        snprintf(why, whylen, "no such open file descriptor (%s)", strerror(errno));
        return false;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
        snprintf(why, whylen, "not a socket (%s)", strerror(errno));
        return false;
    }
    len = sizeof proto;
    if (type != SOCK_STREAM || getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP) {
        snprintf(why, whylen, "not a TCP socket");
        return false;
    }
    len = sizeof on;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) != 0 || !on) {
        snprintf(why, whylen, "a TCP socket that does not listen");
        return false;
    }
    return bound_to(fd, host, port, why, whylen);
}

/* Rank 0: take the listener named by WEIPIPE_LISTEN_FD, if set. 0, or 2 naming the variable. */
static int inherited_listener(wp_boot_info *bi, wp_getenv_fn get, void *ctx, char *err, size_t errlen) {
    long fd;
    if (bi->rank != 0 || !get_nonempty(get, ctx, "WEIPIPE_LISTEN_FD")) return 0;
    if (int_var(get, ctx, "WEIPIPE_LISTEN_FD", 0, INT_MAX, true, &fd, err, errlen)) return 2;
    char why[200];
    bool ok = is_listener_at((int)fd, bi->master_addr, bi->master_port, why, sizeof why);
    int fl = ok ? fcntl((int)fd, F_GETFL) : 0, fdfl = ok ? fcntl((int)fd, F_GETFD) : 0;
    /* ours from now on: nothing that rank 0 may start inherits it, and the accept loop needs
     * it non-blocking */
    if (ok && (fl < 0 || fdfl < 0 || fcntl((int)fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
               fcntl((int)fd, F_SETFD, fdfl | FD_CLOEXEC) != 0)) {
        snprintf(why, sizeof why, "fcntl: %s", strerror(errno));
        ok = false;
    }
    if (!ok) {
        snprintf(err, errlen,
                 "WEIPIPE_LISTEN_FD=%ld is not a listening TCP socket at MASTER_ADDR:MASTER_PORT (%s:%d): %s", fd,
                 bi->master_addr, bi->master_port, why);
        return 2;
    }
    bi->listen_inherited = true;
    bi->listen_fd = (int)fd;
    return 0;
}

/* ---- which launcher started this process ---- */

typedef struct launcher_vars {
    const char *name, *rank, *world, *local;
} launcher_vars;

static const launcher_vars torchrun_vars = {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
                           openmpi_vars = {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK"},
                           slurm_vars = {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"};

/* Slurm sets SLURM_PROCID in the batch script too (the batch step's one task: 0), but
 * SLURM_STEP_ID only in a job step that srun started: Slurm's setup_env (src/common/env.c)
 * exports SLURM_STEP_ID / SLURM_STEPID only for a step id >= 0 as an int, and the batch step's
 * id SLURM_BATCH_SCRIPT (0xfffffffb; the interactive step's 0xfffffffa) is negative as one. So
 * `weipipe train` typed in an sbatch script is one process on its own, not rank 0 of
 * SLURM_NTASKS ranks that no srun will ever start. */
static bool slurm_step(wp_getenv_fn get, void *ctx) {
    return get_nonempty(get, ctx, "SLURM_PROCID") &&
           (get_nonempty(get, ctx, "SLURM_STEP_ID") || get_nonempty(get, ctx, "SLURM_STEPID"));
}

/* torchrun (and weipipe's launcher) first: it may run inside an srun or an mpirun whose variables
 * its ranks inherit; then Open MPI (its ranks may inherit the variables of the Slurm step that
 * started its daemons); then a Slurm job step. NULL: not launched. */
static const launcher_vars *launcher_of(wp_getenv_fn get, void *ctx) {
    if (get_nonempty(get, ctx, "RANK")) return &torchrun_vars;
    if (get_nonempty(get, ctx, "OMPI_COMM_WORLD_RANK")) return &openmpi_vars;
    if (slurm_step(get, ctx)) return &slurm_vars;
    return NULL;
}

static const long big_world = 1 << 20;

int boot_world_from_env(int *world, const char **launcher, wp_getenv_fn get, void *ctx, char *err, size_t errlen) {
    const launcher_vars *lv = launcher_of(get, ctx);
    if (!lv) return 1;
    long w = 0;
    if (int_var(get, ctx, lv->world, 1, big_world, true, &w, err, errlen)) return 2;
    *world = (int)w;
    *launcher = lv->name;
    return 0;
}

int boot_world_from_environ(int *world, const char **launcher, char *err, size_t errlen) {
    return boot_world_from_env(world, launcher, env_get, NULL, err, errlen);
}

/* The count of a Slurm tasks-per-node list ("2(x3),1") for node index `node`; 0 if absent. */
static long slurm_tasks_on_node(const char *spec, long node) {
    const char *p = spec;
    while (p && *p) {
        char *end;
        long n = strtol(p, &end, 10), reps = 1;
        if (end == p || n < 0) return 0;
        if (strncmp(end, "(x", 2) == 0) {
            const char *q = end + 2;
            reps = strtol(q, &end, 10);
            if (end == q || *end != ')' || reps < 1) return 0;
            end++;
        }
        if (node < reps) return n;
        node -= reps;
        if (*end != ',') return 0;
        p = end + 1;
    }
    return 0;
}

int boot_local_world_from_env(wp_getenv_fn get, void *ctx) {
    const launcher_vars *lv = launcher_of(get, ctx);
    long n = 0, node = 0;
    char e[128];
    if (!lv) return 0;
    if (lv == &torchrun_vars) {
        if (int_var(get, ctx, "LOCAL_WORLD_SIZE", 1, big_world, false, &n, e, sizeof e)) n = 0;
    } else if (lv == &openmpi_vars) {
        if (int_var(get, ctx, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, big_world, false, &n, e, sizeof e)) n = 0;
    } else {
        const char *spec = get_nonempty(get, ctx, "SLURM_STEP_TASKS_PER_NODE");
        if (spec && int_var(get, ctx, "SLURM_NODEID", 0, big_world, false, &node, e, sizeof e) == 0)
            n = slurm_tasks_on_node(spec, node);
        if (n <= 0 && int_var(get, ctx, "SLURM_NTASKS_PER_NODE", 1, big_world, false, &n, e, sizeof e)) n = 0;
    }
    return n > 0 ? (int)n : 0;
}

/* The leading positive integer of a variable ("8", or "8,4" as OMP_NUM_THREADS may nest); 0 if none. */
static long leading_count(wp_getenv_fn get, void *ctx, const char *name) {
    const char *v = get_nonempty(get, ctx, name);
    if (!v) return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    return errno == 0 && end != v && (*end == 0 || *end == ',') && n > 0 && n <= 4096 ? n : 0;
}

int boot_threads_per_rank(int threads_flag, int ranks_in_process, long cores, wp_getenv_fn get, void *ctx, char *from,
                          size_t fromlen) {
    long n;
    if (threads_flag > 0) {
        snprintf(from, fromlen, "--threads");
        return threads_flag;
    }
    if ((n = leading_count(get, ctx, "OMP_NUM_THREADS")) > 0) {
        snprintf(from, fromlen, "OMP_NUM_THREADS");
        return (int)n;
    }
    if ((n = leading_count(get, ctx, "SLURM_CPUS_PER_TASK")) > 0) {
        snprintf(from, fromlen, "SLURM_CPUS_PER_TASK");
        return (int)n;
    }
    if (cores < 1) cores = 1;
    int here = launcher_of(get, ctx) ? boot_local_world_from_env(get, ctx) : ranks_in_process;
    if (here < 1) {
        snprintf(from, fromlen, "the launcher does not say how many ranks share this host");
        return 1;
    }
    snprintf(from, fromlen, "%ld cores / %d rank%s on this host", cores, here, here == 1 ? "" : "s");
    return cores > here ? (int)(cores / here) : 1;
}

int boot_threads_per_rank_environ(int threads_flag, int ranks_in_process, long cores, char *from, size_t fromlen) {
    return boot_threads_per_rank(threads_flag, ranks_in_process, cores, env_get, NULL, from, fromlen);
}

int boot_from_env(wp_boot_info *bi, wp_getenv_fn get, void *ctx, char *err, size_t errlen) {
    memset(bi, 0, sizeof *bi);
    long rank = 0, world = 0, local = 0;
    const launcher_vars *lv = launcher_of(get, ctx);
    if (!lv) return 1;
    bi->launcher = lv->name;
    if (int_var(get, ctx, lv->rank, 0, big_world, true, &rank, err, errlen) ||
        int_var(get, ctx, lv->world, 1, big_world, true, &world, err, errlen) ||
        int_var(get, ctx, lv->local, 0, big_world, false, &local, err, errlen) ||
        (lv == &slurm_vars ? slurm_master(bi, get, ctx, err, errlen) : master_vars(bi, get, ctx, err, errlen)) ||
        port_override(bi, get, ctx, err, errlen))
        return 2;
    if (rank >= world) {
        snprintf(err, errlen, "rank %ld is not below the world size %ld (%s variables)", rank, world, bi->launcher);
        return 2;
    }
    bi->rank = (int)rank;
    bi->world = (int)world;
    bi->local_rank = (int)local;
    if (job_vars(bi, get, ctx, err, errlen)) return 2;
    return inherited_listener(bi, get, ctx, err, errlen);
}

int boot_from_environ(wp_boot_info *bi, char *err, size_t errlen) { return boot_from_env(bi, env_get, NULL, err, errlen); }

bool boot_launched(void) { return launcher_of(env_get, NULL) != NULL; }

int boot_job_id_from_environ(char *out, size_t outlen) {
    wp_boot_info bi;
    char err[256];
    memset(&bi, 0, sizeof bi);
    const launcher_vars *lv = launcher_of(env_get, NULL);
    if (!lv) return 1;
    bi.launcher = lv->name;
    if (job_vars(&bi, env_get, NULL, err, sizeof err) != 0) return 2;
    snprintf(out, outlen, "%s", bi.job_id);
    return 0;
}

/* ---- rendezvous ---- */

static uint32_t flags_hash(const wp_boot_info *bi) {
    if (!bi->job_flags) return 0;
    uint32_t h = wire_crc(0, bi->job_flags, strlen(bi->job_flags));
    return h ? h : 1; /* 0 means "not compared" */
}

/* The first "name=value" line where two flags texts differ, as "--name is 'A' on rank X, 'B' on
 * rank Y". Both come from the same table, in the same order; a line one side lacks (another
 * weipipe version) is named too. */
static void flags_diff(const char *mine, int my_rank, const char *theirs, int their_rank, char *out, size_t outlen) {
    const char *a = mine, *b = theirs;
    while (*a || *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || memcmp(a, b, la) != 0) {
            size_t ka = strcspn(a, "="), kb = strcspn(b, "=");
            if (ka > la) ka = la;
            if (kb > lb) kb = lb;
            if (ka == kb && memcmp(a, b, ka) == 0)
                snprintf(out, outlen, "--%.*s is '%.*s' on rank %d, '%.*s' on rank %d", (int)ka, a, (int)(la - ka - (ka < la)),
                         a + ka + (ka < la), my_rank, (int)(lb - kb - (kb < lb)), b + kb + (kb < lb), their_rank);
            else
                snprintf(out, outlen, "rank %d has flag '%.*s' where rank %d has '%.*s' (another weipipe version?)", my_rank,
                         (int)la, a, their_rank, (int)lb, b);
            return;
        }
        a += la + (a[la] == '\n');
        b += lb + (b[lb] == '\n');
    }
    snprintf(out, outlen, "the flags texts are equal but their hashes differ");
}

/* Both ends of a rendezvous connection found their flags hashes differ: send ours, read theirs
 * (rank 0 sends first, the joining rank answers, so neither waits on the other) and name the
 * first flag that differs. */
static void flags_swap(int fd, const wp_boot_info *bi, int peer, bool send_first, char *out, size_t outlen) {
    char why[200], *theirs = NULL;
    int type = 0;
    uint64_t seq;
    size_t len;
    const char *mine = bi->job_flags ? bi->job_flags : "";
    double deadline = wp_now() + 2.0;
    bool ok = (!send_first || ctl_write_frame(fd, F_ABORT, 0, mine, strlen(mine), deadline, why, sizeof why) == 0) &&
              ctl_read_frame(fd, &type, &seq, &theirs, &len, 1 << 20, deadline, why, sizeof why) == 0 && type == F_ABORT &&
              (send_first || ctl_write_frame(fd, F_ABORT, 0, mine, strlen(mine), deadline, why, sizeof why) == 0);
    if (ok)
        flags_diff(mine, bi->rank, theirs, peer, out, outlen);
    else
        snprintf(out, outlen, "rank %d could not tell which (%s)", bi->rank, theirs ? "unexpected frame" : why);
    free(theirs);
}

static void hs_fill(wire_hs *h, int kind, const wp_boot_info *bi, int rank, const char *addr) {
    memset(h, 0, sizeof *h);
    h->flags_hash = flags_hash(bi);
    h->version = WIRE_VERSION;
    h->kind = (uint16_t)kind;
    h->rank = (uint32_t)rank;
    h->world = (uint32_t)bi->world;
    snprintf(h->job, sizeof h->job, "%s", bi->job_id);
    snprintf(h->secret, sizeof h->secret, "%s", bi->secret);
    snprintf(h->addr, sizeof h->addr, "%s", addr);
}

/* A rank of another job (or its rank 0 probing, root_rendezvous) reached this rendezvous: tell it
 * whose rendezvous this is, so that it fails at once naming this job instead of waiting for a
 * rank 0 that is not there. Only the job id goes back (never the secret, never an address). */
static void answer_other_job(const wp_boot_info *bi, hs_pending *p) {
    wire_hs h, ack;
    char why[128];
    if (wire_hs_decode(p->buf, &h, why, sizeof why) != 0 || h.kind != HS_CONTROL || strcmp(h.job, bi->job_id) == 0)
        return;
    memset(&ack, 0, sizeof ack);
    ack.version = WIRE_VERSION;
    ack.kind = HS_CONTROL_ACK;
    ack.world = (uint32_t)bi->world;
    snprintf(ack.job, sizeof ack.job, "%s", bi->job_id);
    uint8_t buf[WIRE_HS_BYTES];
    wire_hs_encode(&ack, buf);
    sock_write_all(p->fd, buf, sizeof buf, wp_now() + 0.5, why, sizeof why); /* best effort */
}

/* A joining rank's handshake is complete: check it, answer, keep its connection. Returns -1
 * with err when the job cannot form: a rank of this job (same id and secret) runs with other
 * job flags. */
static int root_admit(const wp_boot_info *bi, hs_pending *p, int *fds, char **addrs, int *joined, uint64_t *rejected,
                      char *err, size_t errlen) {
    hs_expect e = {.kind = HS_CONTROL, .world = bi->world, .job = bi->job_id, .secret = bi->secret};
    wire_hs h, ack;
    char why[200], host[SOCK_ADDR_MAX];
    int port;
    if (hs_check(p->buf, &e, &h, why, sizeof why) != 0) {
        answer_other_job(bi, p);
        hs_reject(p, 0, why, rejected);
        return 0;
    }
    if (h.rank == 0 || fds[h.rank] >= 0) {
        hs_reject(p, 0, h.rank ? "rank already joined" : "claims rank 0", rejected);
        return 0;
    }
    if (sock_split_addr(h.addr, host, sizeof host, &port, why, sizeof why) != 0) {
        hs_reject(p, 0, why, rejected);
        return 0;
    }
    uint8_t buf[WIRE_HS_BYTES];
    hs_fill(&ack, HS_CONTROL_ACK, bi, 0, "");
    wire_hs_encode(&ack, buf);
    if (sock_write_all(p->fd, buf, sizeof buf, wp_now() + 1.0, why, sizeof why) != 0) {
        hs_reject(p, 0, why, rejected);
        return 0;
    }
    if (h.flags_hash != ack.flags_hash) {
        /* the same job (id and secret agree) started with other flags: it cannot run, and
         * waiting for the rendezvous to time out would only hide why */
        char diff[400];
        flags_swap(p->fd, bi, (int)h.rank, true, diff, sizeof diff);
        snprintf(err, errlen, "rank %u (%s) was started with other job flags than rank 0: %s (flags hash %08x, rank 0's "
                 "%08x; start every rank with the same flags and config)", h.rank, h.addr, diff, h.flags_hash,
                 ack.flags_hash);
        close(p->fd);
        p->fd = -1;
        return -1;
    }
    fds[h.rank] = p->fd;
    addrs[h.rank] = strdup(h.addr);
    p->fd = -1;
    (*joined)++;
    return 0;
}

static void missing_list(int world, const int *fds, char *out, size_t outlen) {
    size_t used = 0;
    out[0] = 0;
    for (int r = 1; r < world && used + 16 < outlen; r++)
        if (fds[r] < 0) used += (size_t)snprintf(out + used, outlen - used, "%s%d", used ? ", " : "", r);
}

/* Rank 0: accept every other rank (refusing strangers), then send them the address table. */
static int root_gather(const wp_boot_info *bi, const wp_net_opts *net, int lfd, int *fds, char **addrs, char *err,
                       size_t errlen) {
    hs_pending pend[HS_MAX_PENDING];
    int np = 0, joined = 1;
    uint64_t rejected = 0;
    double deadline = wp_now() + net->connect_timeout;
    while (joined < bi->world) {
        double now = wp_now(), next = deadline;
        if (now >= deadline) {
            char missing[256];
            missing_list(bi->world, fds, missing, sizeof missing);
            snprintf(err, errlen, "rendezvous at %s:%d: rank(s) %s did not join within %g s", bi->master_addr,
                     bi->master_port, missing, net->connect_timeout);
            for (int i = 0; i < np; i++) close(pend[i].fd);
            return 1;
        }
        struct pollfd pf[HS_MAX_PENDING + 1] = {{.fd = lfd, .events = POLLIN}};
        for (int i = 0; i < np; i++) {
            pf[i + 1] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
            if (pend[i].deadline < next) next = pend[i].deadline;
        }
        if (poll(pf, (nfds_t)np + 1, (int)((next - now) * 1000) + 1) < 0 && errno != EINTR) {
            snprintf(err, errlen, "rendezvous: poll: %s", strerror(errno));
            return 1;
        }
        now = wp_now();
        hs_accept_all(lfd, pend, &np, fmin(net->connect_timeout, HS_TIMEOUT_MAX), &rejected, 0);
        int k = 0;
        for (int i = 0; i < np; i++) {
            char why[200];
            int rc = hs_read_some(&pend[i], why, sizeof why);
            if (rc == 0 && now >= pend[i].deadline) {
                snprintf(why, sizeof why, "no complete handshake in time (%zu of %d bytes)", pend[i].got, WIRE_HS_BYTES);
                rc = -1;
            }
            if (rc < 0) hs_reject(&pend[i], 0, why, &rejected);
            else if (rc == 1 && root_admit(bi, &pend[i], fds, addrs, &joined, &rejected, err, errlen) != 0) {
                for (int q = 0; q < np; q++)
                    if (pend[q].fd >= 0) close(pend[q].fd);
                return 1;
            }
            if (pend[i].fd >= 0) pend[k++] = pend[i];
        }
        np = k;
    }
    for (int i = 0; i < np; i++) hs_reject(&pend[i], 0, "the rendezvous is complete", &rejected);
    return 0;
}

static char *join_table(char **addrs, int world, size_t *len) {
    size_t cap = (size_t)world * (SOCK_ADDR_MAX + 1) + 1, used = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    for (int r = 0; r < world; r++) used += (size_t)snprintf(t + used, cap - used, "%s\n", addrs[r]);
    *len = used;
    return t;
}

/* Rank 0 found MASTER_ADDR:MASTER_PORT taken: ask whoever listens there for its job id (a
 * handshake claiming no rank of a world of none, which no rendezvous admits; one of another job
 * answers with its id, answer_other_job). 0 with "job 'ID'" in out, or -1. */
static int probe_holder(const wp_boot_info *bi, char *out, size_t outlen) {
    char why[256];
    double deadline = wp_now() + 2.0;
    int fd = sock_connect(bi->master_addr, bi->master_port, deadline, why, sizeof why);
    if (fd < 0) return -1;
    wire_hs h, ack;
    memset(&h, 0, sizeof h);
    h.version = WIRE_VERSION;
    h.kind = HS_CONTROL;
    snprintf(h.job, sizeof h.job, "%s", bi->job_id);
    snprintf(h.addr, sizeof h.addr, "probe:1");
    uint8_t buf[WIRE_HS_BYTES];
    wire_hs_encode(&h, buf);
    int rc = sock_write_all(fd, buf, sizeof buf, deadline, why, sizeof why) == 0 &&
                     sock_read_all(fd, buf, sizeof buf, deadline, why, sizeof why) == 0 &&
                     wire_hs_decode(buf, &ack, why, sizeof why) == 0 && ack.kind == HS_CONTROL_ACK
                 ? 0
                 : -1;
    close(fd);
    if (rc == 0) snprintf(out, outlen, "job '%s'", ack.job);
    return rc;
}

/* lfd: the listener inherited from the launcher (closed here), or -1 to bind one. */
static int root_rendezvous(const wp_boot_info *bi, const wp_net_opts *net, int lfd, int *fds, char **addrs, char *err,
                           size_t errlen) {
    char why[256];
    if (lfd < 0) lfd = sock_listen(bi->master_addr, bi->master_port, why, sizeof why);
    if (lfd < 0) {
        char holder[WIRE_NAME_MAX + 64] = "";
        if (strstr(why, strerror(EADDRINUSE)) && probe_holder(bi, holder, sizeof holder) == 0)
            snprintf(err, errlen, "rank 0 cannot listen at MASTER_ADDR:MASTER_PORT (%s:%d): it is the rendezvous of "
                     "another job, %s (this job is '%s', from %s): give each job its own port (MASTER_PORT, or WEIPIPE_PORT)",
                     bi->master_addr, bi->master_port, holder, bi->job_id, bi->job_id_from);
        else if (strstr(why, strerror(EADDRINUSE)))
            snprintf(err, errlen, "rank 0 cannot listen at %s:%d (port from %s): another process, not a weipipe "
                     "rendezvous, holds it; set WEIPIPE_PORT to a free port of the master host, the same on every rank",
                     bi->master_addr, bi->master_port, bi->port_from ? bi->port_from : "MASTER_PORT");
        else
            snprintf(err, errlen, "rank 0 cannot listen at MASTER_ADDR:MASTER_PORT: %s", why);
        return 1;
    }
    int rc = root_gather(bi, net, lfd, fds, addrs, err, errlen);
    close(lfd);
    size_t len = 0;
    char *table = rc == 0 ? join_table(addrs, bi->world, &len) : NULL;
    if (rc == 0 && !table) {
        snprintf(err, errlen, "rank 0: out of memory for the address table");
        rc = 1;
    }
    for (int r = 1; rc == 0 && r < bi->world; r++)
        if (ctl_write_frame(fds[r], F_TABLE, 0, table, len, wp_now() + net->connect_timeout, why, sizeof why) != 0) {
            snprintf(err, errlen, "rank 0 cannot send the address table to rank %d (%s): %s", r, addrs[r], why);
            rc = 1;
        }
    free(table);
    return rc;
}

static int parse_table(char *text, int world, char **addrs, char *err, size_t errlen) {
    char *save = NULL;
    int r = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (r >= world) break;
        addrs[r++] = strdup(line);
    }
    if (r != world) {
        snprintf(err, errlen, "rendezvous: rank 0 sent %d addresses for %d ranks", r, world);
        return 1;
    }
    return 0;
}

/* The data address other ranks should dial: the listener's, with a wildcard host replaced by
 * the local address of the connection to rank 0 (the interface that reaches the others), or
 * by MASTER_ADDR on rank 0 itself. via_fd < 0: rank 0. */
static void format_addr(char *out, size_t outlen, const char *host, int port) {
    int n = strchr(host, ':') ? snprintf(out, outlen, "[%s]:%d", host, port) : snprintf(out, outlen, "%s:%d", host, port);
    if (n < 0 || (size_t)n >= outlen) out[0] = 0; /* refused later as a malformed address */
}

static void advertised_addr(const wp_boot_info *bi, wp_transport *t, int via_fd, char *out, size_t outlen) {
    char host[256], why[128], local[SOCK_ADDR_MAX];
    int port, ignore;
    const char *bound = tcp_listen_addr(t);
    snprintf(out, outlen, "%s", bound);
    if (sock_split_addr(bound, host, sizeof host, &port, why, sizeof why) != 0 || !sock_is_wildcard(host)) return;
    if (via_fd < 0) {
        snprintf(host, sizeof host, "%s", bi->master_addr);
    } else {
        sock_local_addr(via_fd, local, sizeof local);
        if (sock_split_addr(local, host, sizeof host, &ignore, why, sizeof why) != 0) return;
    }
    format_addr(out, outlen, host, port);
}

static int rank_rendezvous(const wp_boot_info *bi, const wp_net_opts *net, wp_transport *t, int *fd0,
                           char **addrs, char *err, size_t errlen) {
    char why[256], my_addr[SOCK_ADDR_MAX], scratch[128];
    double deadline = wp_now() + net->connect_timeout;
    int fd = sock_connect(bi->master_addr, bi->master_port, deadline, why, sizeof why);
    if (fd < 0) {
        snprintf(err, errlen, "rank %d cannot reach rank 0 at MASTER_ADDR:MASTER_PORT: %s", bi->rank, why);
        return 1;
    }
    wire_hs h, ack;
    uint8_t buf[WIRE_HS_BYTES];
    advertised_addr(bi, t, fd, my_addr, sizeof my_addr);
    hs_fill(&h, HS_CONTROL, bi, bi->rank, my_addr);
    wire_hs_encode(&h, buf);
    hs_expect e = {.kind = HS_CONTROL_ACK, .world = bi->world, .job = bi->job_id, .secret = bi->secret};
    if (sock_write_all(fd, buf, sizeof buf, deadline, why, sizeof why) != 0 ||
        sock_read_all(fd, buf, sizeof buf, deadline, why, sizeof why) != 0 || hs_check(buf, &e, &ack, why, sizeof why) != 0) {
        if (wire_hs_decode(buf, &ack, scratch, sizeof scratch) == 0 && ack.kind == HS_CONTROL_ACK &&
            strcmp(ack.job, bi->job_id) != 0)
            snprintf(err, errlen, "rank %d: MASTER_ADDR:MASTER_PORT (%s:%d) is the rendezvous of another job, job '%s' "
                     "(this job is '%s', from %s): give each job its own port (MASTER_PORT, or WEIPIPE_PORT)", bi->rank, bi->master_addr,
                     bi->master_port, ack.job, bi->job_id, bi->job_id_from);
        else
            snprintf(err, errlen, "rank %d: rank 0 at %s:%d (port from %s) refused the rendezvous (%s; same WEIPIPE_SECRET, "
                     "WEIPIPE_JOB_ID and world size everywhere, and that port weipipe's?)", bi->rank, bi->master_addr,
                     bi->master_port, bi->port_from ? bi->port_from : "MASTER_PORT", why);
        close(fd);
        return 1;
    }
    if (ack.flags_hash != h.flags_hash) {
        char diff[400];
        flags_swap(fd, bi, 0, false, diff, sizeof diff);
        snprintf(err, errlen, "rank %d was started with other job flags than rank 0: %s (flags hash %08x, rank 0's %08x; "
                 "start every rank with the same flags and config)", bi->rank, diff, h.flags_hash, ack.flags_hash);
        close(fd);
        return 1;
    }
    int type;
    uint64_t seq;
    char *table;
    size_t len;
    /* Rank 0 waits up to --connect-timeout for the last rank to join. */
    deadline = wp_now() + 2 * net->connect_timeout;
    if (ctl_read_frame(fd, &type, &seq, &table, &len, (size_t)bi->world * (SOCK_ADDR_MAX + 1), deadline, why,
                       sizeof why) != 0 || type != F_TABLE) {
        if (table) snprintf(why, sizeof why, "a %s frame instead of the address table", wire_frame_type_name(type));
        snprintf(err, errlen, "rank %d: no address table from rank 0 at %s:%d: %s", bi->rank, bi->master_addr,
                 bi->master_port, why);
        free(table);
        close(fd);
        return 1;
    }
    int rc = parse_table(table, bi->world, addrs, err, errlen);
    free(table);
    if (rc != 0) {
        close(fd);
        return 1;
    }
    *fd0 = fd;
    return 0;
}

static void free_addrs(char **addrs, int world) {
    for (int r = 0; addrs && r < world; r++) free(addrs[r]);
    free(addrs);
}

int wp_job_open_tcp(const wp_boot_info *bi, const wp_net_opts *net, wp_transport **t, wp_control **ctl, char *err,
                    size_t errlen) {
    *t = NULL;
    *ctl = NULL;
    int world = bi->world;
    int lfd = bi->rank == 0 && bi->listen_inherited ? bi->listen_fd : -1; /* ours to close */
    int *fds = malloc((size_t)world * sizeof *fds);
    char **addrs = calloc((size_t)world, sizeof *addrs);
    if (!fds || !addrs) {
        if (lfd >= 0) close(lfd);
        free(fds);
        free(addrs);
        snprintf(err, errlen, "rank %d: out of memory for the rendezvous", bi->rank);
        return 1;
    }
    for (int r = 0; r < world; r++) fds[r] = -1;
    int rc = tcp_create(net, bi->rank, world, bi->job_id, bi->secret, t, err, errlen);
    if (rc == 0) {
        if (bi->rank == 0) {
            char my_addr[SOCK_ADDR_MAX];
            advertised_addr(bi, *t, -1, my_addr, sizeof my_addr);
            addrs[0] = strdup(my_addr);
            if (world > 1) {
                rc = root_rendezvous(bi, net, lfd, fds, addrs, err, errlen);
                lfd = -1; /* closed there */
            }
        } else {
            rc = rank_rendezvous(bi, net, *t, &fds[0], addrs, err, errlen);
        }
    }
    if (lfd >= 0) close(lfd); /* not needed (a world of one) or never reached */
    for (int r = 0; rc == 0 && r < world; r++)
        if (!addrs[r]) {
            snprintf(err, errlen, "rank %d: out of memory for the address table", bi->rank);
            rc = 1;
        }
    if (rc == 0) rc = tcp_set_peers(*t, addrs, err, errlen);
    if (rc == 0) {
        rc = ctl_tcp_start(bi->rank, world, fds, addrs, net->timeout, ctl, err, errlen);
        for (int r = 0; r < world; r++) fds[r] = -1; /* owned by the control channel now */
    }
    for (int r = 0; r < world; r++)
        if (fds[r] >= 0) close(fds[r]);
    free(fds);
    free_addrs(addrs, world);
    if (rc != 0) {
        tp_close(*t);
        *t = NULL;
        return 1;
    }
    ctl_attach(*ctl, *t);
    return 0;
}

void wp_job_close(wp_transport *t, wp_control *ctl) {
    ctl_close(ctl);
    tp_close(t);
}
