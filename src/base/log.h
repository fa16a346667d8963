/* Messages for users: errors name the culprit on one line; progress goes to stderr.
 * src/base is the bottom of src/ and uses nothing of the project (docs/architecture.md). */
#ifndef WP_LOG_H
#define WP_LOG_H

/* Prints "weipipe: <kind>: <message>" as one line, written with one call so that lines from
 * rank threads never interleave. The message often echoes what a user, a file or a network peer
 * supplied (a flag value, a path, a peer's address), so control bytes in it are written as \xNN:
 * a value holding a newline or a terminal escape cannot forge a second line or repaint the
 * terminal. */
void wp_log(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define wp_error(...) wp_log("error", __VA_ARGS__)
#define wp_warn(...) wp_log("warning", __VA_ARGS__)

#endif
