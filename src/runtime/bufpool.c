/* The rank's buffer pool (bufpool.h). Counts are small (tens of buffers), so entries are found
 * by a linear scan; what matters is that memory is reused, not how fast a name is looked up. */
#include "bufpool.h"

#include "seq_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pool_init(rt_pool *p, wp_kern *k, const wp_layout *L) {
    memset(p, 0, sizeof *p);
    p->k = k;
    p->L = L;
    p->compute = kern_compute_dtype(k);
}

static void slot_free(rt_pool *p, void *data, void *view) {
    if (data) kern_free(p->k, data);
    if (view) kern_free(p->k, view);
}

void pool_free(rt_pool *p) {
    for (int i = 0; i < p->n; i++) {
        if (p->e[i]->used && !p->e[i]->parent) slot_free(p, p->e[i]->data, p->e[i]->view); /* a slice's data is its parent's */
        free(p->e[i]);
    }
    for (int i = 0; i < p->n_free; i++) slot_free(p, p->free[i].data, p->free[i].view);
    free(p->e);
    free(p->free);
    memset(p, 0, sizeof *p);
}

wp_dtype pool_wire_dtype(const rt_pool *p, wp_buf b) {
    wp_precision pr = p->L->cfg.precision;
    switch (b.kind) {
    case WP_BUF_W: return precision_weight_dtype(pr);
    case WP_BUF_GW: return b.lane == WP_LANE_SUM ? WP_F32 : precision_grad_dtype(pr); /* ir.h: a step sum is fp32 */
    case WP_BUF_T: return WP_F32; /* ir.h: tied pieces are optimizer state, fp32 */
    default: return precision_act_dtype(pr);
    }
}

rt_entry *pool_find(rt_pool *p, wp_buf b) {
    for (int i = 0; i < p->n; i++)
        if (p->e[i]->used && buf_eq(p->e[i]->name, b)) return p->e[i];
    return NULL;
}

/* A free slot of exactly this size, or new memory. Of the free slots, those with a compute-dtype
 * view (pool_view) go to what compute reads, those without to gradients (never read through a
 * view): otherwise gradients would carry views off and every slot of a size would grow one
 * (schedule/memory.c counts the views this way). */
static wp_result take_slot(rt_pool *p, size_t bytes, bool grad, rt_slot *out) {
    int pick = -1;
    for (int i = 0; i < p->n_free; i++)
        if (p->free[i].bytes == bytes && (pick < 0 || (!p->free[i].view) == grad)) {
            pick = i;
            if ((!p->free[i].view) == grad) break;
        }
    if (pick >= 0) {
        *out = p->free[pick];
        p->free[pick] = p->free[--p->n_free];
        return 0;
    }
    memset(out, 0, sizeof *out);
    out->bytes = bytes;
    out->data = kern_alloc(p->k, bytes);
    if (!out->data) return WP_FAILED;
    p->allocated += bytes;
    return 0;
}

/* Entries are allocated one by one so that a pointer to one stays valid while others come. */
static rt_entry *new_entry(rt_pool *p) {
    for (int i = 0; i < p->n; i++)
        if (!p->e[i]->used) return p->e[i];
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 32;
        rt_entry **e = realloc(p->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        p->e = e;
        p->cap = cap;
    }
    rt_entry *fresh = calloc(1, sizeof *fresh);
    if (!fresh) return NULL;
    p->e[p->n++] = fresh;
    return fresh;
}

/* A slice that lives inside its whole buffer's allocation (bufpool.h), or a whole W or GW name of
 * a sliced schedule, which is such an allocation. Partial sums travel on their own. */
static bool slice_of_whole(wp_buf b) {
    return b.nslices > 0 && (b.kind == WP_BUF_W || (b.kind == WP_BUF_GW && b.lane != WP_LANE_PART));
}

static bool sliced_whole(const rt_pool *p, wp_buf b) {
    return p->sched && p->sched->nslices > 0 && b.nslices == 0 &&
           (b.kind == WP_BUF_W || (b.kind == WP_BUF_GW && b.lane != WP_LANE_PART));
}

void pool_elem_range(const rt_pool *p, wp_buf b, size_t *off, size_t *len) {
    size_t E = b.chunk >= 0 && b.chunk < p->L->cfg.n_chunks ? p->L->chunk_numel[b.chunk] : 0;
    *off = 0;
    *len = E;
    if (b.nslices) slice_range(E, b.slice, b.nslices, off, len);
}

/* What a buffer's memory counts as (kern_memory_terms). */
static wp_mem_term term_of(wp_buf b) {
    switch (b.kind) {
    case WP_BUF_W: return WP_MEM_WEIGHTS;
    case WP_BUF_GW: case WP_BUF_T: return WP_MEM_GRADS;
    default: return WP_MEM_COMM;
    }
}

/* An entry with memory of its own. */
static rt_entry *create_own(rt_pool *p, wp_buf b, int nslices, char *err, size_t errlen) {
    char name[64];
    rt_entry *e = new_entry(p);
    rt_slot s;
    size_t bytes = p->sched ? sched_buf_bytes(p->sched, p->seg_t, p->L, b) : buf_bytes(p->L, b);
    wp_mem_term was = kern_mem_term(p->k, term_of(b));
    wp_result got = e ? take_slot(p, bytes, term_of(b) == WP_MEM_GRADS, &s) : WP_FAILED;
    kern_mem_term(p->k, was);
    if (got != 0) {
        snprintf(err, errlen, "out of memory for buffer %s (%zu bytes)%s%s", buf_name(b, name, sizeof name), bytes,
                 kern_error(p->k) ? ": " : "", kern_error(p->k) ? kern_error(p->k) : "");
        return NULL;
    }
    memset(e, 0, sizeof *e);
    e->used = true;
    e->name = b;
    e->bytes = bytes;
    e->wire = pool_wire_dtype(p, b);
    e->data = s.data;
    e->view = s.view;
    e->view_bytes = s.view_bytes;
    e->nslices = nslices;
    if (++p->held[b.kind] > p->peak[b.kind]) p->peak[b.kind] = p->held[b.kind];
    return e;
}

/* Slice b of the held parent: an entry whose data is the parent's elements of that slice. */
static rt_entry *create_part(rt_pool *p, rt_entry *parent, wp_buf b, char *err, size_t errlen) {
    rt_entry *e = new_entry(p);
    if (!e) {
        snprintf(err, errlen, "out of memory for a buffer entry");
        return NULL;
    }
    size_t off, len, es = wp_dtype_size(parent->wire);
    pool_elem_range(p, b, &off, &len);
    memset(e, 0, sizeof *e);
    e->used = true;
    e->name = b;
    e->wire = parent->wire;
    e->bytes = len * es;
    e->data = (char *)parent->data + off * es;
    e->parent = parent;
    parent->n_parts++;
    return e;
}

rt_entry *pool_create(rt_pool *p, wp_buf b, char *err, size_t errlen) {
    char name[64];
    if (pool_find(p, b)) {
        snprintf(err, errlen, "buffer %s is already held", buf_name(b, name, sizeof name));
        return NULL;
    }
    if (slice_of_whole(b)) {
        wp_buf whole = b;
        whole.nslices = whole.slice = 0;
        rt_entry *parent = pool_find(p, whole);
        /* a step sum's slice that travels to its owner lives alone there (gen_hier.c): its whole
         * would be a chunk in fp32 on every owner */
        if (!parent && b.kind == WP_BUF_GW && b.lane == WP_LANE_SUM) return create_own(p, b, 0, err, errlen);
        if (!parent && !(parent = create_own(p, whole, b.nslices, err, errlen))) return NULL;
        return create_part(p, parent, b, err, errlen);
    }
    if (!sliced_whole(p, b)) return create_own(p, b, 0, err, errlen);
    int n = p->sched->nslices;
    rt_entry *parent = create_own(p, b, n, err, errlen);
    for (int k = 0; parent && k < n; k++)
        if (!create_part(p, parent, buf_slice(b, k, n), err, errlen)) return NULL;
    return parent;
}

void pool_mark_arrived(rt_pool *p, rt_entry *e) {
    e->arrived = true;
    for (int i = 0; e->nslices && i < p->n; i++)
        if (p->e[i]->used && p->e[i]->parent == e) p->e[i]->arrived = true;
    pool_touch(e);
}

bool pool_present(const rt_pool *p, const rt_entry *e) {
    if (!e->nslices) return e->arrived;
    if (e->n_parts != e->nslices) return false;
    for (int i = 0; i < p->n; i++)
        if (p->e[i]->used && p->e[i]->parent == e && !p->e[i]->arrived) return false;
    return true;
}

static bool entry_idle(const rt_entry *e) { return e->n_sends == 0 && e->n_deferred == 0; }

bool pool_idle(const rt_pool *p, const rt_entry *e) {
    if (!entry_idle(e)) return false;
    for (int i = 0; e->nslices && i < p->n; i++)
        if (p->e[i]->used && p->e[i]->parent == e && !entry_idle(p->e[i])) return false;
    return true;
}

/* An entry with memory of its own goes back to the free list. */
static void release_own(rt_pool *p, rt_entry *e) {
    if (p->n_free == p->cap_free) {
        int cap = p->cap_free ? 2 * p->cap_free : 32;
        rt_slot *f = realloc(p->free, (size_t)cap * sizeof *f);
        if (!f) { /* cannot keep it for reuse: give the memory back instead */
            slot_free(p, e->data, e->view);
            p->allocated -= e->bytes + e->view_bytes;
            goto done;
        }
        p->free = f;
        p->cap_free = cap;
    }
    p->free[p->n_free++] = (rt_slot){.bytes = e->bytes, .view_bytes = e->view_bytes, .data = e->data, .view = e->view};
done:
    p->held[e->name.kind]--;
    memset(e, 0, sizeof *e);
}

void pool_release(rt_pool *p, rt_entry *e) {
    rt_entry *parent = e->parent;
    if (parent) {
        memset(e, 0, sizeof *e);
        if (--parent->n_parts == 0) release_own(p, parent);
        return;
    }
    for (int i = 0; e->nslices && i < p->n; i++)
        if (p->e[i]->used && p->e[i]->parent == e) memset(p->e[i], 0, sizeof *p->e[i]);
    release_own(p, e);
}

void *pool_view(rt_pool *p, rt_entry *e) {
    if (e->wire == p->compute) return e->data;
    size_t n = e->bytes / wp_dtype_size(e->wire);
    size_t vb = n * wp_dtype_size(p->compute);
    if (!e->view) {
        wp_mem_term was = kern_mem_term(p->k, term_of(e->name));
        e->view = kern_alloc(p->k, vb);
        kern_mem_term(p->k, was);
        if (!e->view) return NULL;
        e->view_bytes = vb;
        p->allocated += vb;
    }
    if (!e->view_valid) {
        kern_convert(p->k, e->view, p->compute, e->data, e->wire, n);
        e->view_valid = true;
    }
    return e->view;
}
