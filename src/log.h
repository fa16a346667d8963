/* Messages for users: errors name the culprit on one line; progress goes to stderr. */
#ifndef WP_LOG_H
#define WP_LOG_H

#include <stdio.h>

#define wp_error(...) (fprintf(stderr, "weipipe: error: "), fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))
#define wp_warn(...) (fprintf(stderr, "weipipe: warning: "), fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))

#endif
