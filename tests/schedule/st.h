/* Shared by the schedule tests: checks that count failures and say what broke. */
#ifndef WP_TEST_SCHEDULE_ST_H
#define WP_TEST_SCHEDULE_ST_H

#include <stdio.h>

static int st_failures;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
            st_failures++;                                                 \
        }                                                                  \
    } while (0)

#endif
