/* One job at a time per --save directory: a lock (flock on DIR/.weipipe.lock, so it dies with
 * the process that holds it) recording who holds it (host, pid, job id). The process that
 * starts a job takes it: weipipe train itself when it runs the ranks as threads or launches them
 * (--nranks N), or rank 0's process under an external launcher (torchrun, srun, mpirun). A rank
 * 0 started by weipipe's own launcher finds its parent holding the lock and goes on. */
#ifndef WP_RUNTIME_SAVELOCK_H
#define WP_RUNTIME_SAVELOCK_H

#include <stddef.h>
#include "result.h"

typedef struct wp_save_lock {
    int fd; /* -1: not held */
} wp_save_lock;

#define WP_SAVE_LOCK_FILE ".weipipe.lock"

/* Take the lock of dir (created if missing). job: what identifies this job in the record.
 * Returns 0 (held, or held by our own launcher: the parent process); 2 when another live
 * process holds it ("--save DIR is in use by another job: host H, pid P, job 'J'"); 1 when the
 * directory or the file cannot be made. A lock left by a process that died is taken over with
 * one warning naming it. */
wp_result save_lock_take(wp_save_lock *l, const char *dir, const char *job, char *err, size_t errlen);
/* Release (empty the record, so that the next job sees no stale lock) and close. */
void save_lock_release(wp_save_lock *l);

#endif
