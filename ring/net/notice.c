/* The launcher's notice that a peer ended (notice.h). */
#include "notice.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One per process. The mutex orders readers: the rank's own thread and, in principle, its
 * control thread may both wait on sockets while the ring is set up. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int nfd = -1;
static atomic_bool watching;
static char line[160]; /* what arrived of the first line */
static size_t got;
static char said[200]; /* the sentence, once a line is complete */

void notice_adopt(int fd) {
    pthread_mutex_lock(&mu);
    /* an fd we cannot configure is no notice: the rank then waits as it did without one */
    int fdf = fcntl(fd, F_GETFD), fl = fcntl(fd, F_GETFL);
    if (fdf >= 0 && fl >= 0 && fcntl(fd, F_SETFD, fdf | FD_CLOEXEC) == 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0) {
        nfd = fd;
        atomic_store(&watching, true);
    }
    pthread_mutex_unlock(&mu);
}

void notice_watch(bool on) { atomic_store(&watching, on); }

int notice_fd(void) {
    if (!atomic_load(&watching)) return -1;
    pthread_mutex_lock(&mu);
    int fd = said[0] ? -1 : nfd; /* once told, nothing more to wait for */
    pthread_mutex_unlock(&mu);
    return fd;
}

/* "RANK HOW" from the launcher; anything else is not ours to trust: said stays empty. */
static void parse(void) {
    char *end;
    errno = 0;
    long r = strtol(line, &end, 10);
    if (errno || end == line || *end != ' ' || r < 0 || r > 1 << 24) return;
    snprintf(said, sizeof said, "rank %ld ended (%s), the launcher says", r, end + 1);
}

bool notice_lost(char *out, size_t len) {
    if (!atomic_load(&watching)) return false;
    pthread_mutex_lock(&mu);
    while (!said[0] && nfd >= 0) {
        ssize_t n = read(nfd, line + got, sizeof line - 1 - got);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) { /* the launcher is gone (the rank dies with it: PR_SET_PDEATHSIG) */
            close(nfd);
            nfd = -1;
            break;
        }
        if (n < 0) break; /* EAGAIN: nothing (more) yet */
        got += (size_t)n;
        line[got] = 0;
        char *nl = strchr(line, '\n');
        if (nl) {
            *nl = 0;
            parse();
        } else if (got == sizeof line - 1) {
            got = 0; /* a line longer than any the launcher writes: drop it */
        }
        if (nl && !said[0]) got = 0;
    }
    bool lost = said[0] != 0;
    if (lost && out && len) snprintf(out, len, "%s", said);
    pthread_mutex_unlock(&mu);
    return lost;
}
