/* Flag-setting signal handlers for a graceful stop. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "stop.h"

/* Atomic, not just volatile sig_atomic_t: rank threads read it while the handler writes it
 * (ThreadSanitizer reported the race); a lock-free atomic is async-signal-safe. */
static atomic_int received;

static void on_signal(int sig) { atomic_store(&received, sig); }

wp_result stop_install(char *err, size_t errlen) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    /* one-shot: the next signal of this kind takes the default action (terminate) */
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGTERM, SIGINT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigaction(sigs[i], &sa, NULL) != 0) return wp_fail(WP_FAILED, err, errlen, "sigaction(%s): %s", strsignal(sigs[i]), strerror(errno));
    return 0;
}

int stop_requested(void) { return atomic_load(&received); }

void stop_clear(void) { atomic_store(&received, 0); }
