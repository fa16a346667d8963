/* One-line user messages with control bytes escaped (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

enum { LOG_MESSAGE_MAX = 4096 };

/* Copies msg into out with every byte below 0x20 and 0x7f written as \xNN; bytes from 0x80 up
 * pass, so UTF-8 paths stay readable. out holds 4 bytes per input byte plus the terminator. */
static void escape_controls(const char *msg, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            *out++ = '\\';
            *out++ = 'x';
            *out++ = hex[*p >> 4];
            *out++ = hex[*p & 15];
        } else {
            *out++ = (char)*p;
        }
    }
    *out = '\0';
}

void wp_log(const char *kind, const char *fmt, ...)
{
    char msg[LOG_MESSAGE_MAX];
    char line[4 * LOG_MESSAGE_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int head = snprintf(line, sizeof line, "weipipe: %s: ", kind);
    if (head < 0 || (size_t)head >= sizeof line) return;
    escape_controls(msg, line + head);
    fprintf(stderr, "%s\n", line);
}
