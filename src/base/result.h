/* The one result type of every fallible function in the project, kernels and ring included
 * (NCCL's ncclResult_t + NCCLCHECK is the model; docs/architecture.md "Return convention").
 * A failing function writes ONE line naming the culprit into the caller's err buffer and
 * returns WP_FAILED or WP_BAD_INPUT; its callers propagate that value unchanged with WP_TRY, so
 * the command exits with it (2 for bad input found however deep) and prints the line. */
#ifndef WP_RESULT_H
#define WP_RESULT_H

#include <stddef.h>

typedef enum wp_result {
    WP_OK = 0,
    /* failed at run time: a peer died, a write failed, memory ran out, a broken invariant */
    WP_FAILED = 1,
    /* bad input or usage: a flag, a file's contents, a peer's message, a checkpoint of another
     * shape; the line names it (the flag, the file and field, the peer) */
    WP_BAD_INPUT = 2,
} wp_result;

/* Writes the reason (printf-style) into err (errlen bytes, truncated; err may be NULL when
 * errlen is 0) and returns rc: `return wp_fail(WP_BAD_INPUT, err, errlen, "--x: ...");`. */
wp_result wp_fail(wp_result rc, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* wp_fail with ": " and strerror(errno) appended (errno read before anything else runs). */
wp_result wp_fail_errno(wp_result rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Prefixes "<context>: " to the reason already in err (the callee's line stays whole, the
 * caller says where it was) and returns rc unchanged. */
wp_result wp_context(wp_result rc, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Propagates a failure: evaluates call once; anything but WP_OK returns that value from the
 * enclosing function, the reason already in err. */
#define WP_TRY(call)                                                                                                   \
    do {                                                                                                               \
        wp_result wp_try_rc_ = (call);                                                                                 \
        if (wp_try_rc_ != WP_OK) return wp_try_rc_;                                                                    \
    } while (0)

/* The same for functions with a cleanup label: stores the value in rc and jumps there. */
#define WP_TRY_GOTO(rc, call, label)                                                                                   \
    do {                                                                                                               \
        (rc) = (call);                                                                                                 \
        if ((rc) != WP_OK) goto label;                                                                                 \
    } while (0)

/* WP_TRY that first prefixes context to the reason (wp_context): WP_TRY_CTX(f(..., err, errlen),
 * err, errlen, "shard %d", i). */
#define WP_TRY_CTX(call, err, errlen, ...)                                                                             \
    do {                                                                                                               \
        wp_result wp_try_rc_ = (call);                                                                                 \
        if (wp_try_rc_ != WP_OK) return wp_context(wp_try_rc_, (err), (errlen), __VA_ARGS__);                          \
    } while (0)

#endif
