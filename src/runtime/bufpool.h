/* A rank's named buffers (ir.h's W[c]@v, GW[c], A[c][mb], GA[c][mb]) in backend memory.
 *
 * Each buffer lives in its WIRE dtype (W: precision_weight_dtype, GW: precision_grad_dtype,
 * A/GA: precision_act_dtype), sized by buf_bytes, because that is what travels. Compute reads a
 * view in the backend's compute dtype: when the two differ (the CPU computes in fp32) the view
 * is a per-entry copy converted on first read, so every strategy rounds weights and activations
 * through the wire dtype at the same places (mixed precision then compares across strategies);
 * when they agree (fp32, or a GPU computing in fp16) the view is the buffer itself.
 *
 * An entry also carries its transfer state: the pending receive, the pending sends, and whether
 * its data is present. Memory comes from a free list keyed by size, so a step reuses the slots
 * of the previous one and the pool never grows past the validator's peak counts.
 *
 * Sliced schedules (ir.h: W[c]@v/k:n, GW[c]/k:n): a whole W or GW name is one allocation (the
 * parent entry, what compute reads and writes), and each slice held is an entry of its own whose
 * data lies inside the parent's, so a slice travels and is filled in place and the whole is
 * present exactly when all n slices are. The parent lives while it holds a slice; FREE of the
 * whole drops the slices held. Partial sums (GW lane .p) are ordinary slice-sized entries. */
#ifndef WP_RUNTIME_BUFPOOL_H
#define WP_RUNTIME_BUFPOOL_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels.h"
#include "transport.h"
#include "ir.h"

#define RT_MAX_SENDS 8 /* sends of one buffer in flight at once (a relay sends each copy once) */

typedef struct rt_entry {
    bool used;
    wp_buf name;
    size_t bytes;        /* wire bytes */
    wp_dtype wire;
    void *data;          /* backend memory, wire dtype */
    void *view;          /* compute-dtype copy, or NULL when wire == compute */
    size_t view_bytes;
    bool view_valid;
    bool arrived;        /* data present (written locally, or its receive completed) */
    wp_request *recv;
    int src;             /* the rank its receive comes from (status notes) */
    wp_request *sends[RT_MAX_SENDS];
    int n_sends;
    int n_deferred;      /* SENDs posted by the list but waiting for the data to arrive */
    struct rt_entry *parent; /* a slice of a whole buffer: data lies inside parent's */
    int nslices;         /* a parent: how many slices make it whole (0: not a parent) */
    int n_parts;         /* a parent: slices held */
    int recv_ev;                /* the receive's transfer event (--trace), -1 none */
    int send_ev[RT_MAX_SENDS];  /* each pending send's transfer event, -1 none */
} rt_entry;

typedef struct rt_slot {
    size_t bytes, view_bytes;
    void *data, *view;
} rt_slot;

typedef struct {
    wp_kern *k;
    const wp_layout *L;
    const wp_schedule *sched; /* with seg_t: A/GA sized per sequence segment (sched_buf_bytes) */
    const int *seg_t;
    wp_dtype compute;
    int n, cap;          /* entries (used or not) */
    rt_entry **e;        /* each allocated once: pointers stay valid */
    int n_free, cap_free;
    rt_slot *free;
    int held[WP_BUF_KINDS], peak[WP_BUF_KINDS];
    size_t allocated;    /* backend bytes owned by the pool (entries + free slots) */
} rt_pool;

void pool_init(rt_pool *p, wp_kern *k, const wp_layout *L);
/* Frees every slot; pending requests must be gone (the transport closed or completed). */
void pool_free(rt_pool *p);

wp_dtype pool_wire_dtype(const rt_pool *p, wp_buf b);
rt_entry *pool_find(rt_pool *p, wp_buf b);
/* A new entry named b (not present yet). NULL with a reason when b is already held or memory
 * runs out. In a sliced schedule a slice creates its parent when that is not held yet, and a
 * whole W or GW name creates all its slices. */
rt_entry *pool_create(rt_pool *p, wp_buf b, char *err, size_t errlen);
/* e's data is now present (with all its slices for a parent). */
void pool_mark_arrived(rt_pool *p, rt_entry *e);
/* Whether e's data is present: every slice of a parent. */
bool pool_present(const rt_pool *p, const rt_entry *e);
/* Whether no send of e (of any slice of a parent) is posted or queued. */
bool pool_idle(const rt_pool *p, const rt_entry *e);
/* Elements [*off, *off + *len) of its chunk that a W or GW name covers (the whole chunk, or a
 * slice: ir.h's slice_range). */
void pool_elem_range(const rt_pool *p, wp_buf b, size_t *off, size_t *len);
/* Back to the free list (its requests must be complete); a parent's slices go with it, and a
 * parent goes with its last slice. */
void pool_release(rt_pool *p, rt_entry *e);
/* The compute-dtype view (converted on first use after the data changed); NULL on failure. */
void *pool_view(rt_pool *p, rt_entry *e);
/* The data changed: the next view converts again. */
static inline void pool_touch(rt_entry *e) {
    e->view_valid = false;
    if (e->parent) e->parent->view_valid = false;
}

#endif
