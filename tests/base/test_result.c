/* result.h: wp_fail writes the one line and returns its value, WP_TRY propagates the first
 * failure unchanged (later calls do not run), wp_context prefixes and truncates safely. */
#include <errno.h>
#include <string.h>

#include "../check.h"
#include "result.h"

static int calls;

static wp_result step(wp_result rc, char *err, size_t errlen)
{
    calls++;
    return rc == WP_OK ? WP_OK : wp_fail(rc, err, errlen, "step %d failed", calls);
}

static wp_result chain(wp_result second, char *err, size_t errlen)
{
    WP_TRY(step(WP_OK, err, errlen));
    WP_TRY(step(second, err, errlen));
    WP_TRY(step(WP_FAILED, err, errlen)); /* reached only when the second succeeded */
    return WP_OK;
}

static wp_result with_context(char *err, size_t errlen)
{
    WP_TRY_CTX(step(WP_BAD_INPUT, err, errlen), err, errlen, "shard %d", 7);
    return WP_OK;
}

static wp_result with_label(int *cleaned, char *err, size_t errlen)
{
    wp_result rc;
    WP_TRY_GOTO(rc, step(WP_OK, err, errlen), out);
    WP_TRY_GOTO(rc, step(WP_FAILED, err, errlen), out);
    rc = WP_OK;
out:
    (*cleaned)++;
    return rc;
}

int main(void)
{
    char err[64];
    memset(err, 'x', sizeof err); /* poison: an unterminated buffer must not survive */
    calls = 0;
    CHECK(chain(WP_BAD_INPUT, err, sizeof err) == WP_BAD_INPUT, "bad input propagates as 2");
    CHECK(calls == 2, "the call after the failure ran (%d calls)", calls);
    CHECK(strcmp(err, "step 2 failed") == 0, "reason '%s'", err);

    calls = 0;
    CHECK(chain(WP_OK, err, sizeof err) == WP_FAILED && calls == 3, "run-time failure propagates as 1");

    calls = 0;
    CHECK(with_context(err, sizeof err) == WP_BAD_INPUT, "context keeps the value");
    CHECK(strcmp(err, "shard 7: step 1 failed") == 0, "context '%s'", err);

    int cleaned = 0;
    calls = 0;
    CHECK(with_label(&cleaned, err, sizeof err) == WP_FAILED && cleaned == 1 && calls == 2, "goto form");

    /* truncation: a reason longer than the buffer, then a context longer than what is left */
    char small[16];
    CHECK(wp_fail(WP_FAILED, small, sizeof small, "%s", "0123456789abcdefghij") == WP_FAILED, "value");
    CHECK(strcmp(small, "0123456789abcde") == 0, "truncated '%s'", small);
    wp_context(WP_FAILED, small, sizeof small, "ctx");
    CHECK(strcmp(small, "ctx: 0123456789") == 0, "context truncates the tail '%s'", small);
    wp_context(WP_FAILED, small, sizeof small, "a context of more than sixteen bytes");
    CHECK(strlen(small) == sizeof small - 1, "an overlong context still terminates");
    CHECK(wp_fail(WP_BAD_INPUT, NULL, 0, "nothing") == WP_BAD_INPUT, "no buffer");

    errno = ENOENT;
    wp_fail_errno(WP_FAILED, err, sizeof err, "open %s", "x.bin");
    CHECK(strcmp(err, "open x.bin: No such file or directory") == 0, "errno '%s'", err);
    return check_result("base/result");
}
