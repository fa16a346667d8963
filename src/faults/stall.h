/* The stall report: when a step stops moving, print where every rank of the ring stands.
 * (src/faults sits on src/base, ring/ and optim/: docs/architecture.md.)
 *
 * Pipeline jobs that hang are debugged by asking "which rank waits for what from whom". Each
 * rank's executor already keeps a status note before every blocking wait (ring/control.h:
 * step, action index, action text, the buffer and the peer it waits for). A watcher thread
 * per rank turns those notes into one grid, gathered over the control channel by rank 0's
 * helper thread (so stuck executors need not cooperate, and a stopped or dead rank shows as
 * "no answer"):
 *   - automatically on rank 0, once its own note has not changed for a third of --timeout
 *     and for twice the longest a note lasted so far before the next (slow healthy steps)
 *     (before the progress timeout ends the job, so the grid shows the stall, not the
 *     aftermath); once per stall;
 *   - on SIGUSR1, on whichever rank receives it (kill -USR1 <rank pid>).
 * The grid goes to stderr, one line per rank. */
#ifndef WP_RUNTIME_STALL_H
#define WP_RUNTIME_STALL_H

#include <stddef.h>

#include "control.h"

typedef struct stall_watch stall_watch;

/* Starts the watcher for ctl (timeout: --timeout in seconds). Returns NULL with a message. */
stall_watch *stall_start(wp_control *ctl, double timeout, char *err, size_t errlen);
/* Stops and frees it (NULL is fine); call before the control channel closes. */
void stall_stop(stall_watch *w);

#endif
