/* Warnings of the ring layer (a refused connection, a failed accept): things a user should see
 * that do not fail the job. The layer cannot use the command's log (it sits below src/), so it
 * hands each line to a hook: by default "weipipe: warning: LINE" on stderr; the weipipe command
 * routes them through its own log (src/base/log.h), which escapes control bytes. */
#ifndef WP_RING_RING_WARN_H
#define WP_RING_RING_WARN_H

typedef void (*ring_warn_fn)(const char *line);

/* fn receives one line without its newline; NULL restores the default. */
void ring_set_warn(ring_warn_fn fn);
void ring_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
