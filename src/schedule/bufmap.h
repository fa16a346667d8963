/* A hash map keyed by buffer name (wp_buf) for the schedule engine: which instance a rank holds
 * under a name, and how many slices of one whole it holds. The engine looked both up by scanning
 * every held buffer, which made a step quadratic in what a rank holds at once (fsdp at M = 2048
 * holds a block input per layer and micro-batch: minutes a simulation). Open addressing, linear
 * probing, deletion by backward shift (no tombstones); it doubles at half full. */
#ifndef WP_BUFMAP_H
#define WP_BUFMAP_H

#include <stdbool.h>
#include <stdint.h>

#include "result.h"
#include "ir.h"

typedef struct {
    wp_buf key;
    intptr_t val;
} wp_bufmap_entry;

typedef struct {
    wp_bufmap_entry *e; /* cap entries; a free one has key.kind == WP_BUF_KINDS */
    int n, cap;         /* cap a power of two (0 before the first put) */
} wp_bufmap;

/* Whether key is in m; its value into *val when it is (val may be NULL). */
bool bufmap_get(const wp_bufmap *m, wp_buf key, intptr_t *val);
/* key's value set to val (added when absent); WP_FAILED only when growing runs out of memory. */
wp_result bufmap_put(wp_bufmap *m, wp_buf key, intptr_t val);
/* key gone (nothing when absent). */
void bufmap_del(wp_bufmap *m, wp_buf key);
void bufmap_free(wp_bufmap *m);

#endif
