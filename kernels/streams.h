/* Streams and events of a backend context: what the ring needs to overlap weight transfers
 * with compute (the design's double-buffered prefetch: the next chunk's weights land in the
 * second buffer while this chunk computes).
 *
 * Every context has one queue (CUDA: its stream). A rank overlaps by holding two contexts on
 * one device: the compute context (kernels) and a sibling for transfers (copies into and out
 * of pinned host staging buffers, NCCL). Memory of one is memory of the other. Events order
 * them without blocking the host: record on the producer, wait on the consumer, or poll.
 *
 * The CPU backend runs every call to completion before it returns, so there its events are
 * always complete, waits do nothing, "pinned" host memory is plain memory and the async
 * copies are the synchronous ones: the same code path runs, only without concurrency.
 * Errors are sticky in the calling context, as everywhere in kernels.h. */
#ifndef WP_KERNELS_STREAMS_H
#define WP_KERNELS_STREAMS_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels.h"

typedef struct wp_kern_event wp_kern_event;

/* Another context on k's device with k's backend and compute dtype and its own queue; memory
 * from either context is valid in both. NULL with a reason in err. */
wp_kern *kern_create_sibling(wp_kern *k, char *err, size_t errlen);

/* NULL (and an error in k) on failure. Destroy with the context that created it. */
wp_kern_event *kern_event_create(wp_kern *k);
void kern_event_destroy(wp_kern *k, wp_kern_event *e);
/* e marks the work queued on k so far. */
void kern_event_record(wp_kern *k, wp_kern_event *e);
/* kern_event_create + kern_event_record: an event marking the work queued on k so far. NULL
 * (and an error in k) on failure. */
wp_kern_event *kern_event_after_queued(wp_kern *k);
/* Whether the work e marks has finished; never blocks. false once k holds an error (callers
 * check kern_error), true for an event never recorded. */
bool kern_event_done(wp_kern *k, wp_kern_event *e);
/* Work queued on k from now on starts after the work e marks (e may come from a sibling);
 * the host does not wait. */
void kern_event_wait(wp_kern *k, wp_kern_event *e);

/* Timers: a pair brackets queued work and says how long the device spent from one to the
 * other, without making the host wait at the record (the executor's op costs and the trace's
 * device spans, docs/performance.md). On CUDA a timer is an event with timing on, read with
 * cudaEventElapsedTime; on a backend whose calls complete before they return (the CPU) it
 * holds the host's monotonic clock at its record, which is then the same figure.
 * NULL (and an error in k) on failure. Destroy with the context that created it. */
typedef struct wp_kern_timer wp_kern_timer;
wp_kern_timer *kern_timer_create(wp_kern *k);
void kern_timer_destroy(wp_kern *k, wp_kern_timer *t);
/* t marks the work queued on k so far. */
void kern_timer_record(wp_kern *k, wp_kern_timer *t);
/* Seconds from a's mark to b's, both recorded on k and complete (after kern_sync, or
 * kern_event_done of an event recorded after b); -1 (and an error in k) otherwise. */
double kern_timer_elapsed(wp_kern *k, const wp_kern_timer *a, const wp_kern_timer *b);
/* Whether k's timers read the device's clock (CUDA) rather than the host's (CPU). */
bool kern_timer_on_device(const wp_kern *k);

/* Page-locked host memory (CUDA: cudaHostAlloc), which the async copies need to be truly
 * asynchronous; zeroed. NULL (and an error) on failure. */
void *kern_host_alloc(wp_kern *k, size_t bytes);
void kern_host_free(wp_kern *k, void *p);
/* Copies queued on k (host side from kern_host_alloc); complete when an event recorded after
 * them is done. */
void kern_to_device_async(wp_kern *k, void *dst, const void *host_src, size_t bytes);
void kern_to_host_async(wp_kern *k, void *host_dst, const void *src, size_t bytes);

/* The device ordinal of a CUDA context (0 for the CPU). */
int kern_device(const wp_kern *k);

#endif
