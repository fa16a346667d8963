/* Replays: a span of a context's calls recorded once and run again as one launch (on CUDA a CUDA
 * graph), for work that is issued the same way many times: a rank's compute actions repeat every
 * step, and at small shapes the host's launches, not the device, can set the pace.
 *
 * A replay is only right when the recorded calls are the calls the code would make now: the same
 * ops with the same arguments (pointers, sizes, scalars such as a loss scale), where only the
 * contents of the buffers differ. kern_replay_run finds that out itself, without trusting the
 * caller to declare what varies: fn runs once, as always, but its kernels.h calls are kept (op and
 * arguments) and hashed into a key rather than made. A call that needs the host (kern_to_host,
 * kern_sync, kern_sumsq, events), moves host data in (kern_to_device, kern_attention_docs), or
 * allocates or frees ends that: what was kept is made at once, in order, and the rest of fn runs
 * as without replays. Otherwise, once fn returns:
 *   - the first sight of a key makes the kept calls (so that every lazy allocation, library plan
 *     and scratch growth of that span happens before a recording);
 *   - the second records them (CUDA: played under stream capture into a graph) and launches that;
 *   - later ones launch the recording; the kept calls are dropped.
 * Memory the calls name is in the key: a freed buffer's address given again is the caller's valid
 * buffer again. Memory they do not name (a backend's scratch) is not: its regrowth advances the
 * context's epoch, and a recording from an older epoch is recorded again.
 *
 * Backends: CUDA records into a graph, instantiated once per key and launched with
 * cudaGraphLaunch. A backend without graphs (the CPU) replays the kept calls themselves: no
 * faster, but the same decisions and the same bits, so CI tests everything above the backend. */
#ifndef WP_KERNELS_REPLAY_H
#define WP_KERNELS_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"

typedef struct wp_kern_replay wp_kern_replay;

typedef enum {
    WP_REPLAY_EAGER = 0, /* fn ran as without replays (first sight of its key, or unreplayable) */
    WP_REPLAY_RECORDED,  /* fn was recorded, then the recording launched */
    WP_REPLAY_REPLAYED,  /* an earlier recording of the same key launched; fn issued nothing */
} wp_replay_how;

/* The span's recordings, for one repeated piece of work (say one action of a rank's list): a few
 * keys each (the work may alternate between buffers). NULL (and an error in k) on failure. */
wp_kern_replay *kern_replay_create(wp_kern *k);
void kern_replay_destroy(wp_kern *k, wp_kern_replay *r);

/* Runs the work fn(arg) issues on k through r (above); *how says which way. fn's result is
 * returned; a capture that fails (a library that cannot be captured) is reported as a note
 * (kern_notes), and that key runs eagerly from then on. why, when not NULL, gets what made an
 * eager run eager ("kern_to_host", "first sight", ...; "" otherwise). */
typedef wp_result (*wp_replay_fn)(void *arg);
wp_result kern_replay_run(wp_kern *k, wp_kern_replay *r, wp_replay_fn fn, void *arg, wp_replay_how *how,
                          const char **why);

/* Whether k replays through the device's own graphs (CUDA) rather than the dispatcher's record. */
bool kern_replay_on_device(const wp_kern *k);

#endif
