/* launch_local: N copies of this program as the ranks of a job on this machine (see launch.h). */
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "oom.h"
#include "sock.h"

extern char **environ;

#define LINE_MAX_BYTES 65536

/* One output pipe of a child, and the part of a line read so far. */
typedef struct out_pipe {
    int fd; /* -1: closed */
    int to; /* 1 or 2 */
    char *buf;
    size_t len;
    char last[256]; /* the last non-empty line */
} out_pipe;

typedef struct child {
    pid_t pid; /* 0: reaped */
    int status;
    out_pipe out[2];
    int notice[2]; /* the rank's notice socket pair (notice.h): [0] ours, [1] the rank's; -1 closed */
} child;

typedef struct launch_state {
    int n;
    child *kids;
    char ***envs;
    char **argv;
    int sig_pipe[2];
    int listen_fd; /* the rendezvous listener rank 0 inherits; -1 once closed here */
    pid_t pgid;
    int live;
    wp_oom_counts oom0; /* the OOM killer's counts when the job started */
    char first_how[240];  /* how the first failed rank ended, worded when it was reaped */
} launch_state;

static int sig_write_fd = -1;

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(sig_write_fd, &b, 1) < 0) {
        /* the pipe is full: a wake-up is pending anyway */
    }
    errno = saved;
}

/* ---- preparing the children's command line and environment ---- */

static char **self_cmdline(void) {
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (!buf || len == 0) {
        free(buf);
        return NULL;
    }
    int count = 0;
    for (size_t i = 0; i < len; i++) count += buf[i] == 0;
    char **argv = calloc((size_t)count + 2, sizeof *argv);
    if (!argv) {
        free(buf);
        return NULL;
    }
    int k = 0;
    for (size_t i = 0; i < len && k < count; i += strlen(buf + i) + 1) argv[k++] = strdup(buf + i);
    free(buf);
    return argv;
}

static bool is_ours(const char *var) {
    static const char *names[] = {"MASTER_ADDR=", "MASTER_PORT=", "RANK=", "WORLD_SIZE=", "LOCAL_RANK=",
                                  "LOCAL_WORLD_SIZE=", "WEIPIPE_JOB_ID=", "WEIPIPE_SECRET=", "WEIPIPE_LISTEN_FD=",
                                  "WEIPIPE_NOTICE_FD="};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(var, names[i], strlen(names[i])) == 0) return true;
    return false;
}

/* The rendezvous listener: bound here on a port the kernel picks, kept open and handed to
 * rank 0 (WEIPIPE_LISTEN_FD, bootstrap.h), so that no other process can take the port before
 * the rendezvous (choosing a free port and closing it left that window open). Close-on-exec:
 * only rank 0's child clears the flag. Returns the port, or -1 with a message. */
static int rendezvous_listener(launch_state *s, char *err, size_t errlen) {
    char why[200], addr[SOCK_ADDR_MAX], host[SOCK_ADDR_MAX];
    int fd = sock_listen("127.0.0.1", 0, why, sizeof why), port = -1;
    if (fd < 0) {
        snprintf(err, errlen, "launcher: no free port: %s", why);
        return -1;
    }
    if (fd <= 2) { /* stdin, stdout or stderr were closed: move it clear of the child's dup2 onto 1 and 2 */
        int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (moved < 0) snprintf(err, errlen, "launcher: fcntl(F_DUPFD_CLOEXEC): %s", strerror(errno));
        close(fd);
        if (moved < 0) return -1;
        fd = moved;
    }
    s->listen_fd = fd;
    sock_local_addr(fd, addr, sizeof addr);
    if (sock_split_addr(addr, host, sizeof host, &port, why, sizeof why) != 0) {
        snprintf(err, errlen, "launcher: %s", why);
        return -1;
    }
    return port;
}

/* listen_fd >= 0: rank 0's, passed as WEIPIPE_LISTEN_FD; notice_fd: WEIPIPE_NOTICE_FD. */
static char **child_env(int rank, int n, int port, int listen_fd, int notice_fd, const char *job, const char *secret) {
    int count = 0;
    while (environ[count]) count++;
    char **env = calloc((size_t)count + 11, sizeof *env); /* ours (at most 10) and the NULL */
    if (!env) return NULL;
    int k = 0;
    for (int i = 0; i < count; i++)
        if (!is_ours(environ[i])) env[k++] = strdup(environ[i]);
    char v[10][160];
    snprintf(v[0], sizeof v[0], "MASTER_ADDR=127.0.0.1");
    snprintf(v[1], sizeof v[1], "MASTER_PORT=%d", port);
    snprintf(v[2], sizeof v[2], "RANK=%d", rank);
    snprintf(v[3], sizeof v[3], "WORLD_SIZE=%d", n);
    snprintf(v[4], sizeof v[4], "LOCAL_RANK=%d", rank);
    snprintf(v[5], sizeof v[5], "LOCAL_WORLD_SIZE=%d", n);
    snprintf(v[6], sizeof v[6], "WEIPIPE_JOB_ID=%s", job);
    snprintf(v[7], sizeof v[7], "WEIPIPE_SECRET=%s", secret);
    snprintf(v[8], sizeof v[8], "WEIPIPE_NOTICE_FD=%d", notice_fd);
    snprintf(v[9], sizeof v[9], "WEIPIPE_LISTEN_FD=%d", listen_fd);
    for (int i = 0; i < (listen_fd >= 0 ? 10 : 9); i++) env[k++] = strdup(v[i]);
    for (int i = 0; i < k; i++)
        if (!env[i]) return NULL; /* the caller frees what it can see: a leak only on OOM */
    return env;
}

static int make_secret(char *out, size_t outlen, char *err, size_t errlen) {
    unsigned char raw[16];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        snprintf(err, errlen, "launcher: getrandom: %s", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < sizeof raw && 2 * i + 2 < outlen; i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

int launch_job_id(char *out, size_t outlen, char *err, size_t errlen) {
    /* pid and time alone could be guessed (issue 42): 64 random bits make the id unguessable */
    unsigned char raw[8];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        snprintf(err, errlen, "launcher: getrandom: %s", strerror(errno));
        return -1;
    }
    char hex[2 * sizeof raw + 1];
    for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    int n = snprintf(out, outlen, "local-%d-%lld-%s", (int)getpid(), (long long)time(NULL), hex);
    if (n < 0 || (size_t)n >= outlen) {
        snprintf(err, errlen, "launcher: job id longer than %zu bytes", outlen);
        return -1;
    }
    return 0;
}

/* ---- running ---- */

/* In the child, between fork and exec: only async-signal-safe calls. */
static void exec_child(launch_state *s, int rank, pid_t parent, int out_fd, int err_fd) {
    pid_t group = s->pgid ? s->pgid : getpid();
    /* The parent may have moved us already; what matters is being in the group. */
    if (setpgid(0, group) != 0 && getpgid(0) != group) _exit(127);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(127); /* could outlive the launcher */
    if (getppid() != parent) _exit(127);                   /* the launcher died before prctl */
    if (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(127);
    /* Rank 0 keeps the rendezvous listener across exec (its number is in WEIPIPE_LISTEN_FD);
     * the others lose it at exec (close-on-exec). fcntl is async-signal-safe. */
    if (rank == 0 && fcntl(s->listen_fd, F_SETFD, 0) != 0) _exit(127);
    if (fcntl(s->kids[rank].notice[1], F_SETFD, 0) != 0) _exit(127); /* its notice end, WEIPIPE_NOTICE_FD */
    execve("/proc/self/exe", s->argv, s->envs[rank]);
    _exit(127);
}

static int spawn(launch_state *s, int rank, char *err, size_t errlen) {
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0) goto fail;
    if (pipe2(pe, O_CLOEXEC) != 0) {
        close(po[0]);
        close(po[1]);
        goto fail;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) exec_child(s, rank, parent, po[1], pe[1]);
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
        close(po[0]);
        close(pe[0]);
        goto fail;
    }
    if (s->pgid == 0) s->pgid = pid;
    /* Also here, so that the group exists before the next fork. EACCES: the child already
     * ran exec (it joined the group itself first); ESRCH: it is already gone. */
    if (setpgid(pid, s->pgid) != 0 && errno != EACCES && errno != ESRCH) {
        snprintf(err, errlen, "launcher: setpgid for rank %d: %s", rank, strerror(errno));
        kill(pid, SIGKILL);
        return -1;
    }
    child *c = &s->kids[rank];
    close(c->notice[1]); /* the rank's end lives in the rank */
    c->notice[1] = -1;
    c->pid = pid;
    c->out[0] = (out_pipe){.fd = po[0], .to = 1};
    c->out[1] = (out_pipe){.fd = pe[0], .to = 2};
    s->live++;
    return 0;
fail:
    snprintf(err, errlen, "launcher: cannot start rank %d: %s", rank, strerror(errno));
    return -1;
}

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static void emit_line(out_pipe *o, int rank, int to, const char *p, size_t n) {
    if (n > 0) snprintf(o->last, sizeof o->last, "%.*s", (int)(n < sizeof o->last ? n : sizeof o->last - 1), p);
    char prefix[32];
    int k = snprintf(prefix, sizeof prefix, "[rank %d] ", rank);
    char *line = malloc((size_t)k + n + 1);
    if (!line) return;
    memcpy(line, prefix, (size_t)k);
    memcpy(line + k, p, n);
    line[(size_t)k + n] = '\n';
    write_all(to, line, (size_t)k + n + 1); /* one write per line: lines of ranks never mix */
    free(line);
}

/* Read what the pipe has; print whole lines (and the rest at the end). */
static void pump(out_pipe *o, int rank) {
    if (!o->buf && !(o->buf = malloc(LINE_MAX_BYTES))) return;
    ssize_t r = read(o->fd, o->buf + o->len, LINE_MAX_BYTES - o->len);
    if (r < 0 && errno == EINTR) return;
    if (r > 0) o->len += (size_t)r;
    size_t start = 0;
    for (size_t i = 0; i < o->len; i++)
        if (o->buf[i] == '\n') {
            emit_line(o, rank, o->to, o->buf + start, i - start);
            start = i + 1;
        }
    memmove(o->buf, o->buf + start, o->len - start);
    o->len -= start;
    if (o->len == LINE_MAX_BYTES || (r <= 0 && o->len)) {
        emit_line(o, rank, o->to, o->buf, o->len);
        o->len = 0;
    }
    if (r <= 0) {
        close(o->fd);
        o->fd = -1;
    }
}

/* A SIGKILL from no one the launcher knows: the OOM killer's when the counts say so (docs/memory.md),
 * not when no OOM kill happened on this host since the job started (a person's kill -9, a
 * supervisor), hedged when no count can be read. Worded when the rank is reaped, before
 * anything later can move the counts. */
static void describe_end(int st, wp_oom_counts before, char *how, size_t len) {
    if (!WIFSIGNALED(st)) {
        snprintf(how, len, "exit status %d", WEXITSTATUS(st));
        return;
    }
    int sig = WTERMSIG(st);
    char ev[160];
    wp_oom_verdict v = sig == SIGKILL ? oom_verdict(before, oom_counts(), ev, sizeof ev) : WP_OOM_UNKNOWN;
    if (sig != SIGKILL) snprintf(how, len, "killed by signal %d (%s)", sig, strsignal(sig));
    else if (v == WP_OOM_YES) snprintf(how, len, "killed by the OOM killer (SIGKILL; %s)", ev);
    else if (v == WP_OOM_LIKELY) snprintf(how, len, "killed by SIGKILL, most likely the kernel's OOM killer (%s)", ev);
    else if (v == WP_OOM_NO) snprintf(how, len, "killed by SIGKILL, not by the OOM killer (%s): by a person or a supervisor", ev);
    else snprintf(how, len, "killed by SIGKILL, most likely the kernel's OOM killer (out of memory: see dmesg)");
}

/* Rank r ended in failure: every rank still running learns it on its notice socket (notice.h),
 * so that one still setting up the ring stops waiting for r and says so. Best effort: a full
 * or closed socket means that rank no longer listens. */
static void tell_survivors(launch_state *s, int r, int st) {
    char line[96];
    int n = WIFSIGNALED(st) ? snprintf(line, sizeof line, "%d killed by signal %d, %s\n", r, WTERMSIG(st), strsignal(WTERMSIG(st)))
                            : snprintf(line, sizeof line, "%d exit status %d\n", r, WEXITSTATUS(st));
    for (int q = 0; q < s->n; q++)
        if (q != r && s->kids[q].pid && s->kids[q].notice[0] >= 0)
            (void)!send(s->kids[q].notice[0], line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void reap(launch_state *s, wp_launch_result *res) {
    for (int r = 0; r < s->n; r++) {
        child *c = &s->kids[r];
        if (!c->pid) continue;
        int st;
        pid_t p = waitpid(c->pid, &st, WNOHANG);
        if (p != c->pid) continue;
        c->pid = 0;
        c->status = st;
        s->live--;
        bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok) tell_survivors(s, r, st);
        if (!ok && res->first_rank < 0) {
            describe_end(st, s->oom0, s->first_how, sizeof s->first_how);
            res->first_rank = r;
            res->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            res->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        }
    }
}

static bool pipes_open(launch_state *s) {
    for (int r = 0; r < s->n; r++)
        if (s->kids[r].out[0].fd >= 0 || s->kids[r].out[1].fd >= 0) return true;
    return false;
}

static void close_pipes(launch_state *s) {
    for (int r = 0; r < s->n; r++)
        for (int j = 0; j < 2; j++)
            if (s->kids[r].out[j].fd >= 0) {
                close(s->kids[r].out[j].fd);
                s->kids[r].out[j].fd = -1;
            }
}

static void handle_signals(launch_state *s, wp_launch_result *res, double now, double timeout, double *kill_at) {
    unsigned char sigs[64];
    ssize_t n = read(s->sig_pipe[0], sigs, sizeof sigs);
    for (ssize_t i = 0; i < n; i++) {
        if (sigs[i] != SIGINT && sigs[i] != SIGTERM) continue;
        if (!res->interrupted) res->interrupted = sigs[i];
        kill(-s->pgid, sigs[i]);
        if (*kill_at == 0) *kill_at = now + timeout;
    }
}

/* Past the grace period: kill what still runs; stop waiting for pipes that something else
 * (a grandchild) may hold open. */
static void grace_over(launch_state *s, wp_launch_result *res) {
    if (s->live > 0) {
        res->killed = s->live;
        kill(-s->pgid, SIGKILL);
    } else {
        close_pipes(s);
    }
}

/* Wait for the children, forwarding output and signals; kill the rest `timeout` seconds after
 * the first failure or interruption (or after the last exit, for pipes left open). */
static void supervise(launch_state *s, double timeout, wp_launch_result *res) {
    double kill_at = 0;
    bool killed = false;
    size_t slots = (size_t)(2 * s->n + 1);
    struct pollfd *pf = calloc(slots, sizeof *pf);
    out_pipe **who = calloc(slots, sizeof *who);
    int *rank_of = calloc(slots, sizeof *rank_of);
    if (!pf || !who || !rank_of) kill(-s->pgid, SIGKILL);
    while (pf && who && rank_of && (s->live > 0 || pipes_open(s))) {
        int k = 0;
        pf[k++] = (struct pollfd){.fd = s->sig_pipe[0], .events = POLLIN};
        for (int r = 0; r < s->n; r++)
            for (int j = 0; j < 2; j++)
                if (s->kids[r].out[j].fd >= 0) {
                    who[k] = &s->kids[r].out[j];
                    rank_of[k] = r;
                    pf[k++] = (struct pollfd){.fd = s->kids[r].out[j].fd, .events = POLLIN};
                }
        double now = wp_now();
        int ms = kill_at > 0 && !killed ? (int)((kill_at - now) * 1000) + 1 : 200;
        if (poll(pf, (nfds_t)k, ms < 0 ? 0 : (ms > 200 ? 200 : ms)) < 0 && errno != EINTR) break;
        now = wp_now();
        if (pf[0].revents) handle_signals(s, res, now, timeout, &kill_at);
        for (int i = 1; i < k; i++)
            if (pf[i].revents) pump(who[i], rank_of[i]);
        reap(s, res);
        if (kill_at == 0 && (res->first_rank >= 0 || s->live == 0)) kill_at = now + timeout;
        if (kill_at > 0 && now >= kill_at && !killed) {
            grace_over(s, res);
            killed = s->live > 0;
        }
    }
    if (!pf || !who || !rank_of) {
        while (s->live > 0 && waitpid(-s->pgid, NULL, 0) > 0) s->live--;
    }
    free(pf);
    free(who);
    free(rank_of);
}

static void describe(const wp_launch_result *res, int n, const char *how, char *err, size_t errlen) {
    char rest[96] = "";
    if (res->killed) snprintf(rest, sizeof rest, "; killed %d rank(s) still running after the grace period", res->killed);
    if (res->interrupted)
        snprintf(err, errlen, "interrupted by signal %d (%s), forwarded to all %d ranks%s", res->interrupted,
                 strsignal(res->interrupted), n, rest);
    else if (res->last_words[0])
        snprintf(err, errlen, "rank %d failed first: %s%s; its last words: %s", res->first_rank, how, rest, res->last_words);
    else
        snprintf(err, errlen, "rank %d failed first: %s%s", res->first_rank, how, rest);
}

static const int handled[3] = {SIGINT, SIGTERM, SIGCHLD};

static int install(struct sigaction *old, char *err, size_t errlen) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 3; i++)
        if (sigaction(handled[i], &sa, &old[i]) != 0) {
            snprintf(err, errlen, "launcher: sigaction(%s): %s", strsignal(handled[i]), strerror(errno));
            while (i-- > 0) sigaction(handled[i], &old[i], NULL);
            return -1;
        }
    return 0;
}

static void restore(const struct sigaction *old) {
    for (int i = 0; i < 3; i++) sigaction(handled[i], &old[i], NULL); /* restoring what was there cannot fail */
}

static void free_state(launch_state *s, bool own_argv) {
    for (int r = 0; s->envs && r < s->n; r++) {
        for (int i = 0; s->envs[r] && s->envs[r][i]; i++) free(s->envs[r][i]);
        free(s->envs[r]);
    }
    for (int r = 0; s->kids && r < s->n; r++)
        for (int j = 0; j < 2; j++) {
            if (s->kids[r].out[j].fd >= 0) close(s->kids[r].out[j].fd);
            if (s->kids[r].notice[j] >= 0) close(s->kids[r].notice[j]);
            free(s->kids[r].out[j].buf);
        }
    if (own_argv)
        for (int i = 0; s->argv && s->argv[i]; i++) free(s->argv[i]);
    if (own_argv) free(s->argv);
    free(s->envs);
    free(s->kids);
    if (s->sig_pipe[0] >= 0) close(s->sig_pipe[0]);
    if (s->sig_pipe[1] >= 0) close(s->sig_pipe[1]);
    if (s->listen_fd >= 0) close(s->listen_fd);
}

static int prepare(launch_state *s, int argc, char **argv, char *err, size_t errlen) {
    s->argv = argv;
    if (!argv) s->argv = self_cmdline();
    else if (argv[argc] != NULL) {
        snprintf(err, errlen, "launcher: argv[argc] must be NULL");
        return -1;
    }
    s->kids = calloc((size_t)s->n, sizeof *s->kids);
    s->envs = calloc((size_t)s->n, sizeof *s->envs);
    if (!s->argv || !s->kids || !s->envs) {
        snprintf(err, errlen, "launcher: out of memory (or /proc/self/cmdline unreadable)");
        return -1;
    }
    for (int r = 0; r < s->n; r++)
        s->kids[r].out[0].fd = s->kids[r].out[1].fd = s->kids[r].notice[0] = s->kids[r].notice[1] = -1;
    for (int r = 0; r < s->n; r++)
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->kids[r].notice) != 0) {
            s->kids[r].notice[0] = s->kids[r].notice[1] = -1;
            snprintf(err, errlen, "launcher: socketpair: %s", strerror(errno));
            return -1;
        }
    char secret[40] = "", job[96];
    int port = rendezvous_listener(s, err, errlen);
    if (port < 0 || make_secret(secret, sizeof secret, err, errlen) != 0 || launch_job_id(job, sizeof job, err, errlen) != 0)
        return -1;
    for (int r = 0; r < s->n; r++)
        if (!(s->envs[r] = child_env(r, s->n, port, r == 0 ? s->listen_fd : -1, s->kids[r].notice[1], job, secret))) {
            snprintf(err, errlen, "launcher: out of memory for the environment");
            return -1;
        }
    if (pipe2(s->sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, errlen, "launcher: pipe: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int launch_local(int argc, char **argv, int nranks, double timeout, wp_launch_result *res, char *err,
                 size_t errlen) {
    wp_launch_result local_res;
    if (!res) res = &local_res;
    *res = (wp_launch_result){.first_rank = -1, .exit_code = 0};
    if (nranks < 1) {
        snprintf(err, errlen, "--nranks %d: need at least one rank", nranks);
        return 2;
    }
    launch_state s = {.n = nranks, .sig_pipe = {-1, -1}, .listen_fd = -1, .oom0 = oom_counts()};
    if (prepare(&s, argc, argv, err, errlen) != 0) {
        free_state(&s, argv == NULL);
        return 1;
    }
    struct sigaction old[3];
    sig_write_fd = s.sig_pipe[1];
    if (install(old, err, errlen) != 0) {
        free_state(&s, argv == NULL);
        return 1;
    }
    int rc = 0;
    for (int r = 0; r < nranks && rc == 0; r++) rc = spawn(&s, r, err, errlen);
    close(s.listen_fd); /* rank 0 has it (or the job is being killed): the launcher's copy must not keep it alive */
    s.listen_fd = -1;
    if (rc != 0 && s.pgid > 0) kill(-s.pgid, SIGKILL);
    res->pgid = (int)s.pgid;
    supervise(&s, rc != 0 ? 0 : timeout, res);
    if (res->first_rank >= 0)
        snprintf(res->last_words, sizeof res->last_words, "%s", s.kids[res->first_rank].out[1].last);
    if (s.pgid > 0) kill(-s.pgid, SIGKILL); /* nothing of the job outlives the launcher */
    restore(old);
    sig_write_fd = -1;
    free_state(&s, argv == NULL);
    if (rc != 0) return 1;
    if (res->first_rank < 0 && !res->interrupted) return 0;
    describe(res, nranks, s.first_how, err, errlen);
    return res->exit_code == 2 && !res->interrupted ? 2 : 1;
}
