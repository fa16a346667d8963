/* wp_fail, wp_fail_errno, wp_context (result.h). */
#include "result.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

wp_result wp_fail(wp_result rc, char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

wp_result wp_fail_errno(wp_result rc, char *err, size_t errlen, const char *fmt, ...)
{
    const int e = errno; /* vsnprintf may change it */
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < errlen) snprintf(err + n, errlen - (size_t)n, ": %s", strerror(e));
    }
    return rc;
}

wp_result wp_context(wp_result rc, char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return rc;
    char head[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    if (n < 0) return rc;
    size_t h = strlen(head), old = strnlen(err, errlen - 1);
    /* head + ": " + the old reason, truncated to errlen - 1 bytes: the callee's line moves right */
    size_t keep = h + 2 < errlen ? errlen - 1 - h - 2 : 0;
    if (old > keep) old = keep;
    if (h + 2 >= errlen) {
        memcpy(err, head, errlen - 1);
        err[errlen - 1] = '\0';
        return rc;
    }
    memmove(err + h + 2, err, old);
    memcpy(err, head, h);
    err[h] = ':';
    err[h + 1] = ' ';
    err[h + 2 + old] = '\0';
    return rc;
}
