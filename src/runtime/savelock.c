/* The --save directory's lock (savelock.h). */
#include "savelock.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "fsutil.h"
#include "log.h"

/* The record's fields: "host=H pid=P job=J". */
static void parse(const char *rec, char *host, size_t hostlen, long *pid, char *job, size_t joblen) {
    const char *h = strstr(rec, "host="), *p = strstr(rec, "pid="), *j = strstr(rec, "job=");
    snprintf(host, hostlen, "?");
    snprintf(job, joblen, "?");
    *pid = -1;
    if (h) snprintf(host, hostlen, "%.*s", (int)strcspn(h + 5, " \n"), h + 5);
    if (p) *pid = strtol(p + 4, NULL, 10);
    if (j) snprintf(job, joblen, "%.*s", (int)strcspn(j + 4, "\n"), j + 4);
}

static void read_record(int fd, char *rec, size_t reclen) {
    ssize_t n = pread(fd, rec, reclen - 1, 0);
    rec[n > 0 ? n : 0] = 0;
}

wp_result save_lock_take(wp_save_lock *l, const char *dir, const char *job, char *err, size_t errlen) {
    l->fd = -1;
    char path[4096], why[512], rec[512], me[256], host[256], holder_job[256];
    long pid;
    if (fs_mkdirs(dir, why, sizeof why) != 0) { return wp_fail(WP_FAILED, err, errlen, "--save %s: %s", dir, why); }
    if (fs_join(path, sizeof path, dir, WP_SAVE_LOCK_FILE, why, sizeof why) != 0) { return wp_fail(WP_BAD_INPUT, err, errlen, "--save %s: %s", dir, why); }
    bool writable = true;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && (errno == EROFS || errno == EACCES)) {
        /* a directory this process cannot write into: it cannot save there either (the save
         * reports it, naming the checkpoint), and it holds no lock to leave a record in. A lock
         * that another job holds is still honoured: flock needs no write access. */
        writable = false;
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return 0;
    }
    if (fd < 0) { return wp_fail(WP_FAILED, err, errlen, "--save %s: cannot open its lock %s: %s", dir, path, strerror(errno)); }
    if (gethostname(me, sizeof me) != 0) snprintf(me, sizeof me, "?");
    me[sizeof me - 1] = 0;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        read_record(fd, rec, sizeof rec);
        close(fd);
        if (e != EWOULDBLOCK) { return wp_fail(WP_FAILED, err, errlen, "--save %s: cannot lock %s: %s", dir, path, strerror(e)); }
        parse(rec, host, sizeof host, &pid, holder_job, sizeof holder_job);
        if (strcmp(host, me) == 0 && pid == (long)getppid()) return 0; /* our own launcher holds it */
        snprintf(err, errlen, "--save %s is in use by another job: host %s, pid %ld, job '%s' (lock %s; one job per "
                 "--save directory)", dir, host, pid, holder_job, path);
        return 2;
    }
    read_record(fd, rec, sizeof rec);
    if (!writable) { /* free: but not ours to record in, so not held (our ranks would not see us) */
        close(fd);
        return 0;
    }
    if (rec[0]) {
        parse(rec, host, sizeof host, &pid, holder_job, sizeof holder_job);
        wp_warn("--save %s: taking over the lock left by host %s, pid %ld, job '%s' (that process is gone: it ended "
                "without releasing it)", dir, host, pid, holder_job);
    }
    int n = snprintf(rec, sizeof rec, "host=%s pid=%ld job=%s\n", me, (long)getpid(), job);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, rec, (size_t)n, 0) != n) {
        snprintf(err, errlen, "--save %s: cannot write its lock %s: %s", dir, path, strerror(errno));
        close(fd);
        return 1;
    }
    l->fd = fd;
    return 0;
}

void save_lock_release(wp_save_lock *l) {
    if (l->fd < 0) return;
    if (ftruncate(l->fd, 0) != 0) { /* read-only, or failing: the lock still dies with the fd */
    }
    close(l->fd);
    l->fd = -1;
}
