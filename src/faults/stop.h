/* Graceful stop on SIGTERM/SIGINT: the handler only records the signal; the train loop polls
 * stop_requested() between steps, saves a checkpoint and exits. A second signal of the same
 * kind is left to the default action, so a stuck run can still be interrupted. */
#ifndef WP_IO_STOP_H
#define WP_IO_STOP_H

#include <stddef.h>
#include "result.h"

/* Installs the handlers for SIGTERM and SIGINT. Returns 0, or 1 with the reason in err. */
wp_result stop_install(char *err, size_t errlen);
/* The signal received (SIGTERM or SIGINT), or 0. */
int stop_requested(void);
/* Forget a recorded signal (tests). */
void stop_clear(void);

#endif
