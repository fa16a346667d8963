/* Ranges of numeric flags, in one table (issue 31): a value beyond them did not fail but hung
 * or crashed far from the flag (--threads 100000 segfaulted in libgomp, --timeout 1e30s made
 * every rank spin, deaf to SIGTERM, --device-tflops 1e-30 never finished step 1). Every value
 * also keeps the checks its adapter makes (positive, below the layer count, ...). */
#include "flag_bounds.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define DAY_S 86400.0

typedef enum { B_RANGE, B_CORES_X4 } bound_kind;

typedef struct {
    int flag;
    bound_kind kind;
    double lo, hi;    /* B_RANGE: [lo, hi] */
    bool zero_ok;     /* 0 keeps its own meaning (unlimited, automatic) outside [lo, hi] */
    const char *unit; /* how the bound is printed */
} flag_bound;

/* Per flag; every TIME flag is also held to (0 allowed) at most a day, below. */
static const flag_bound bounds[] = {
    {FLAG_threads, B_CORES_X4, 0, 0, true, ""},
    /* a device slower than 1 GFLOP/s would take hours for a step of the tiny model */
    {FLAG_device_tflops, B_RANGE, 1e-6, 1e6, true, " TFLOP/s"}, /* 1 MFLOP/s: a sanitized build calibrates at 0.7 GFLOP/s */
    /* below 1 kByte/s a chunk of the tiny model takes hours to cross a link */
    {FLAG_link_bandwidth, B_RANGE, 1e3, 1e15, true, " bytes/s"},
    {FLAG_node_link_bandwidth, B_RANGE, 1e3, 1e15, true, " bytes/s"},
    {FLAG_device_mem_bandwidth, B_RANGE, 1e3, 1e15, false, " bytes/s"},
};

static wp_result fail(char *err, size_t errlen, const char *where, const char *name, double v, const char *range) {
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s--%s: %.6g is outside %s", where, name, v, range);
}

wp_result cli_check_bound(int flag, wp_flag_type type, const void *field, const char *name, const char *where, char *err,
                    size_t errlen) {
    double v;
    switch (type) {
    case FT_INT: v = (double)*(const int64_t *)field; break;
    case FT_SIZE: v = (double)*(const int64_t *)field; break;
    case FT_NUM:
    case FT_RATE:
    case FT_TIME: v = *(const double *)field; break;
    default: return 0;
    }
    char range[96];
    if (type == FT_TIME && !(v >= 0 && v <= DAY_S)) return fail(err, errlen, where, name, v, "[0, 86400] s (a day)");
    if (type == FT_RATE && !isfinite(v)) return fail(err, errlen, where, name, v, "the finite rates");
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        const flag_bound *b = &bounds[i];
        if (b->flag != flag || (b->zero_ok && v == 0)) continue;
        double lo = b->lo, hi = b->hi;
        if (b->kind == B_CORES_X4) {
            /* more threads than 4 per core only adds switching, and libgomp crashes near 10^5 */
            long cores = sysconf(_SC_NPROCESSORS_ONLN);
            lo = 1;
            hi = 4.0 * (double)(cores > 0 ? cores : 1);
            snprintf(range, sizeof range, "[1, %.0f] (4 x the %ld cores here; 0 = automatic)", hi, cores > 0 ? cores : 1);
        } else {
            snprintf(range, sizeof range, "[%g, %g]%s%s", lo, hi, b->unit, b->zero_ok ? " (or 0)" : "");
        }
        if (!(v >= lo && v <= hi)) return fail(err, errlen, where, name, v, range);
    }
    return 0;
}
