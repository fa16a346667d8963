/* The local launcher. This program is both the launcher and, when RANK is set, the ranks.
 *  ok:      4 ranks print and exit 0 -> launch_local returns 0; every line arrives prefixed
 *           with its rank, stdout to stdout and stderr to stderr.
 *  env:     the ranks find the launcher variables, rendezvous over tcp and allreduce.
 *  fail3:   rank 2 exits 3 while the others sleep -> reported as the first failure, the other
 *           three killed after the 1 s grace period, non-zero return, no process left.
 *  signal:  rank 1 dies from SIGKILL, the others end by themselves -> reported with the signal,
 *           and, where the host's OOM count did not move, as not the OOM killer's.
 *  sigterm: the launcher gets SIGTERM -> forwarded; every rank ends; reported as interrupted.
 * usage: test_launch ok|env|fail3|signal|sigterm */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "oom.h"
#include "ring_harness.h"
#include "tcp.h"

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int rank_env(int rank) {
    wp_boot_info bi;
    char err[512];
    if (boot_from_environ(&bi, err, sizeof err) != 0 || bi.rank != rank || bi.world != 4 || bi.local_rank != rank ||
        strcmp(bi.master_addr, "127.0.0.1") != 0 || strlen(bi.secret) < 16) {
        fprintf(stderr, "bad launcher environment: %s\n", err);
        return 1;
    }
    wp_net_opts net;
    rh_net(&net, 1);
    wp_transport *t;
    wp_control *c;
    if (tcp_job_open(&bi, &net, &t, &c, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double x = rank;
    int rc = ctl_allreduce(c, CTL_SUM, &x, 1, err, sizeof err) != 0 || x != 6;
    tcp_job_close(t, c);
    return rc;
}

static int rank_main(const char *mode) {
    int rank = atoi(getenv("RANK"));
    if (strcmp(mode, "ok") == 0) {
        printf("hello from rank %d\n", rank);
        fprintf(stderr, "note from rank %d\n", rank);
        printf("partial line without newline from rank %d", rank);
        return 0;
    }
    if (strcmp(mode, "env") == 0) return rank_env(rank);
    if (strcmp(mode, "fail3") == 0) {
        if (rank == 2) {
            nap(0.2);
            return 3;
        }
        nap(30);
        return 0;
    }
    if (strcmp(mode, "signal") == 0) {
        if (rank == 1) raise(SIGKILL);
        nap(0.3);
        return 0;
    }
    if (strcmp(mode, "sigterm") == 0) {
        nap(30);
        return 0;
    }
    return 99;
}

/* Run the launcher with stdout and stderr captured into files. */
static int launch(char *self, const char *mode, wp_launch_result *res, char *err, size_t errlen, char **out, char **errout) {
    char *argv[] = {self, (char *)mode, NULL};
    char outp[] = "/tmp/weipipe-launch-out-XXXXXX", errp[] = "/tmp/weipipe-launch-err-XXXXXX";
    int fo = mkstemp(outp), fe = mkstemp(errp);
    CHECK(fo >= 0 && fe >= 0, "mkstemp");
    fflush(NULL);
    int so = dup(1), se = dup(2);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = launch_local(2, argv, 4, 1.0, res, err, errlen);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    close(fo);
    close(fe);
    *out = rh_slurp(outp);
    *errout = rh_slurp(errp);
    unlink(outp);
    unlink(errp);
    return rc;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (getenv("RANK")) return rank_main(mode);
    wp_launch_result res;
    char err[600], *out, *errout;
    pid_t helper = 0;
    if (strcmp(mode, "sigterm") == 0) {
        pid_t me = getpid();
        helper = fork();
        CHECK(helper >= 0, "fork");
        if (helper == 0) {
            nap(0.5);
            kill(me, SIGTERM);
            _exit(0);
        }
    }
    const wp_oom_counts before = oom_counts();
    int rc = launch(argv[0], mode, &res, err, sizeof err, &out, &errout);
    const wp_oom_counts after = oom_counts();
    if (helper) waitpid(helper, NULL, 0);
    printf("launch_local returned %d: %s\n--- stdout\n%s--- stderr\n%s---\n", rc, rc ? err : "", out, errout);
    CHECK(rh_group_gone(res.pgid), "processes left behind");
    if (strcmp(mode, "ok") == 0) {
        CHECK(rc == 0 && res.first_rank == -1, "all ranks succeeded but launch returned %d", rc);
        for (int r = 0; r < 4; r++) {
            char line[96];
            snprintf(line, sizeof line, "[rank %d] hello from rank %d\n", r, r);
            CHECK(strstr(out, line), "stdout lacks '%s'", line);
            snprintf(line, sizeof line, "[rank %d] partial line without newline from rank %d\n", r, r);
            CHECK(strstr(out, line), "stdout lacks '%s'", line);
            snprintf(line, sizeof line, "[rank %d] note from rank %d\n", r, r);
            CHECK(strstr(errout, line) && !strstr(out, line), "stderr lacks '%s'", line);
        }
    } else if (strcmp(mode, "env") == 0) {
        CHECK(rc == 0, "ranks could not form a job from the launcher's variables: %s", err);
    } else if (strcmp(mode, "fail3") == 0) {
        CHECK(rc != 0 && res.first_rank == 2 && res.exit_code == 3 && res.signal == 0 && res.killed == 3,
              "expected rank 2 with status 3 first and 3 ranks killed, got rank %d status %d signal %d killed %d",
              res.first_rank, res.exit_code, res.signal, res.killed);
        CHECK(strstr(err, "rank 2 failed first: exit status 3"), "message: %s", err);
    } else if (strcmp(mode, "signal") == 0) {
        CHECK(rc != 0 && res.first_rank == 1 && res.signal == SIGKILL && res.killed == 0,
              "expected rank 1 killed by signal 9 and nobody else killed, got rank %d signal %d killed %d",
              res.first_rank, res.signal, res.killed);
        CHECK(strstr(err, "rank 1 failed first: killed by SIGKILL"), "message: %s", err);
        /* the rank raised it itself: where the host counts OOM kills and none happened, it says so */
        if (before.host >= 0 && after.host == before.host)
            CHECK(strstr(err, "not by the OOM killer (no OOM kill on this host meanwhile"), "message: %s", err);
        else
            CHECK(strstr(err, "OOM killer"), "message: %s", err);
    } else if (strcmp(mode, "sigterm") == 0) {
        CHECK(rc != 0 && res.interrupted == SIGTERM && res.killed == 0, "expected an interruption by SIGTERM, got %d (killed %d)",
              res.interrupted, res.killed);
    } else {
        fprintf(stderr, "usage: test_launch ok|env|fail3|signal|sigterm\n");
        return 2;
    }
    free(out);
    free(errout);
    printf("ok: %s\n", mode);
    return 0;
}
