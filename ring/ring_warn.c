/* The ring layer's warning hook (ring_warn.h). */
#include "ring_warn.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

static _Atomic(ring_warn_fn) hook; /* read by rank threads while the program may set it */

void ring_set_warn(ring_warn_fn fn) { atomic_store(&hook, fn); }

void ring_warn(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    ring_warn_fn fn = atomic_load(&hook);
    if (fn)
        fn(line);
    else
        fprintf(stderr, "weipipe: warning: %s\n", line);
}
