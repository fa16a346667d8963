/* The registry of transports (transport_table.h): one list of the rows, each defined by its own
 * transport at the end of transport/<name>/<name>_job.c. */
#include "transport_table.h"

#include <stdio.h>
#include <string.h>

#define TP_EXTERN_(n) extern const tp_row tp_row_##n;
#define TP_NONE_
WP_TRANSPORTS(TP_EXTERN_, TP_NONE_)

#define TP_ADDR_(n) &tp_row_##n
#define TP_COMMA_ ,
static const tp_row *const table[] = {WP_TRANSPORTS(TP_ADDR_, TP_COMMA_)};
enum { TP_ROWS = sizeof table / sizeof table[0] };

const tp_row *tp_table_row(int i) { return i >= 0 && i < TP_ROWS ? table[i] : NULL; }

const tp_row *tp_table_find(const char *name) {
    for (int i = 0; i < TP_ROWS; i++)
        if (strcmp(table[i]->name, name) == 0) return table[i];
    return NULL;
}

const tp_row *tp_table_pick(const char *name, char *err, size_t errlen) {
    const tp_row *k = tp_table_find(name);
    if (!k) {
        snprintf(err, errlen, "--transport: '%s' is not one of {%s}", name, WP_TRANSPORT_CHOICES);
        return NULL;
    }
    if (!k->built) {
        snprintf(err, errlen, "--transport %s: not built into this weipipe (%s)", name, k->how_to_build);
        return NULL;
    }
    return k;
}
