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
#include "peer_hosts.h"
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

wp_result boot_slurm_first_host(const char *nodelist, char *host, size_t hostlen) {
    size_t n = strcspn(nodelist, "[,");
    if (n == 0 || n >= hostlen) return WP_BAD_INPUT;
    memcpy(host, nodelist, n);
    host[n] = 0;
    if (nodelist[n] != '[') return WP_OK;
    const char *p = nodelist + n + 1;
    size_t digits = 0;
    while (isdigit((unsigned char)p[digits])) digits++;
    if (digits == 0 || n + digits >= hostlen || (p[digits] != '-' && p[digits] != ',' && p[digits] != ']')) return WP_BAD_INPUT;
    memcpy(host + n, p, digits);
    host[n + digits] = 0;
    return WP_OK;
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

static int no_op_host(const char *host, void *ctx) {
    (void)host;
    (void)ctx;
    return 0;
}

/* WEIPIPE_PEERS: "launcher" (Slurm's node list of this step, else of the job) or a host list.
 * Checked for syntax here, so that every rank refuses a malformed one alike (exit 2). */
static int peers_var(wp_boot_info *bi, wp_getenv_fn get, void *ctx, char *err, size_t errlen) {
    const char *list = get_nonempty(get, ctx, "WEIPIPE_PEERS"), *from = "WEIPIPE_PEERS";
    if (!list) return 0;
    if (strcmp(list, "launcher") == 0) {
        list = get_nonempty(get, ctx, from = "SLURM_STEP_NODELIST");
        if (!list) list = get_nonempty(get, ctx, from = "SLURM_JOB_NODELIST");
        if (!list) {
            snprintf(err, errlen, "WEIPIPE_PEERS=launcher, but no launcher variable names the job's hosts (Slurm's "
                     "SLURM_JOB_NODELIST; torchrun and mpirun name none): list them, WEIPIPE_PEERS=host1,node[02-04]");
            return 2;
        }
    }
    if (strlen(list) >= sizeof bi->peers || ph_expand(list, no_op_host, NULL) != 0) {
        snprintf(err, errlen, "%s='%.80s' is not a host list (names, or Slurm's name[01-04,7] ranges, at most %d hosts "
                 "and %zu characters)", from, list, PH_MAX_HOSTS, sizeof bi->peers - 1);
        return 2;
    }
    snprintf(bi->peers, sizeof bi->peers, "%s", list);
    bi->peers_from = from;
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

/* Any rank of weipipe's launcher: the socket WEIPIPE_NOTICE_FD names (notice.h), if set. 0, or 2
 * naming the variable. */
static int inherited_notice(wp_boot_info *bi, wp_getenv_fn get, void *ctx, char *err, size_t errlen) {
    long fd;
    if (!get_nonempty(get, ctx, "WEIPIPE_NOTICE_FD")) return 0;
    if (int_var(get, ctx, "WEIPIPE_NOTICE_FD", 0, INT_MAX, true, &fd, err, errlen)) return 2;
    int type = 0, family = 0;
    socklen_t len = sizeof type, flen = sizeof family;
    if (fcntl((int)fd, F_GETFD) < 0 || getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
        getsockopt((int)fd, SOL_SOCKET, SO_DOMAIN, &family, &flen) != 0 || type != SOCK_STREAM || family != AF_UNIX) {
        snprintf(err, errlen, "WEIPIPE_NOTICE_FD=%ld is not a Unix stream socket (weipipe's launcher sets it; unset it "
                 "when starting ranks another way)", fd);
        return 2;
    }
    bi->notice_inherited = true;
    bi->notice_fd = (int)fd;
    return 0;
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
    if (job_vars(bi, get, ctx, err, errlen) || peers_var(bi, get, ctx, err, errlen) ||
        inherited_notice(bi, get, ctx, err, errlen))
        return 2;
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
