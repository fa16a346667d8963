/* The checks of every test folder (include as "../check.h").
 *
 *   CHECK(cond, fmt, ...)   cond false: "FAIL file:line: message" on stderr, exit 1.
 *   EXPECT(cond, fmt, ...)  the same line, but the test goes on: the failure is counted and
 *                           check_result() fails the test at the end (for tests that report
 *                           every broken case, not only the first).
 *   CHECK_NEAR(got, want, tol, fmt, ...), EXPECT_NEAR(...)
 *                           |got - want| <= tol (as doubles); the line adds got, want and tol.
 *   check_say(ok, fmt, ...) a verdict line on stdout, passed or not: "ok   message" or
 *                           "FAIL message"; a failure is counted as by EXPECT (for tests that
 *                           print every measurement next to its bound).
 *   check_close(a, b, rel)  |a - b| <= rel * max(|a|, |b|).
 *   check_failures()        failures counted so far.
 *   check_result(name)      0 after "name: all checks passed", or 1 after "name: N check(s)
 *                           failed"; what main returns.
 *
 * Header-only: the count is one weak symbol, shared by every file of a test executable that
 * includes this one (a harness library's checks count with the test's own). */
#ifndef WP_TESTS_CHECK_H
#define WP_TESTS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((weak)) int check_failures_;

static inline int check_failures(void) { return check_failures_; }

/* "FAIL file:line: message[: got G, want W (tolerance T)]"; then exit 1 (fatal) or count. */
__attribute__((format(printf, 3, 0))) static inline void check_vfail_(const char *file, int line, const char *fmt,
                                                                       va_list ap, bool fatal, const double *near) {
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    if (near) fprintf(stderr, ": got %.17g, want %.17g (tolerance %.3g)", near[0], near[1], near[2]);
    fputc('\n', stderr);
    if (fatal) exit(1);
    check_failures_++;
}

__attribute__((format(printf, 4, 5))) static inline void check_fail_(bool fatal, const char *file, int line,
                                                                      const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    check_vfail_(file, line, fmt, ap, fatal, NULL);
    va_end(ap);
}

__attribute__((format(printf, 5, 6))) static inline void check_near_fail_(bool fatal, const char *file, int line,
                                                                           const double near[3], const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    check_vfail_(file, line, fmt, ap, fatal, near);
    va_end(ap);
}

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) check_fail_(true, __FILE__, __LINE__, __VA_ARGS__);   \
    } while (0)

#define EXPECT(cond, ...)                                                  \
    do {                                                                   \
        if (!(cond)) check_fail_(false, __FILE__, __LINE__, __VA_ARGS__);  \
    } while (0)

#define CHECK_NEAR_(fatal, got, want, tol, ...)                                               \
    do {                                                                                      \
        const double near_[3] = {(double)(got), (double)(want), (double)(tol)};               \
        if (!(fabs(near_[0] - near_[1]) <= near_[2]))                                         \
            check_near_fail_(fatal, __FILE__, __LINE__, near_, __VA_ARGS__);                  \
    } while (0)
#define CHECK_NEAR(got, want, tol, ...) CHECK_NEAR_(true, got, want, tol, __VA_ARGS__)
#define EXPECT_NEAR(got, want, tol, ...) CHECK_NEAR_(false, got, want, tol, __VA_ARGS__)

__attribute__((format(printf, 2, 3))) static inline bool check_say(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    if (!ok) check_failures_++;
    return ok;
}

static inline bool check_close(double a, double b, double rel) {
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + 1e-300;
}

static inline int check_result(const char *name) {
    int n = check_failures();
    if (n) {
        fflush(stdout);
        fprintf(stderr, "%s: %d check(s) failed\n", name, n);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
