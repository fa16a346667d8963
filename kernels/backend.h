/* Private to kernels/: how kernels.h dispatches to a backend. Each backend fills one
 * wp_kern_ops table; kernels/dispatch.c implements kernels.h by checking the sticky error,
 * then calling through the table. The compute ops' slots come from ops_table.h (the same
 * signatures as kernels.h: every op receives the context first). */
#ifndef WP_KERNELS_BACKEND_H
#define WP_KERNELS_BACKEND_H

#include "kernels.h"
#include "wp_config.h"

typedef struct wp_kern_ops {
    const char *name;
    /* lifetime: init fills k->impl; fini releases it */
    wp_result (*init)(wp_kern *k, const wp_kern_opts *opts, char *err, size_t errlen);
    void (*fini)(wp_kern *k);
    void *(*alloc)(wp_kern *k, size_t bytes);
    void (*free)(wp_kern *k, void *p);
    void (*to_device)(wp_kern *k, void *dst, const void *src, size_t bytes);
    void (*to_host)(wp_kern *k, void *dst, const void *src, size_t bytes);
    void (*copy)(wp_kern *k, void *dst, const void *src, size_t bytes);
    void (*zero)(wp_kern *k, void *p, size_t bytes);
    void (*sync)(wp_kern *k);
    /* the compute ops, one slot per row of ops_table.h, in its order */
#define WP_KERN_SLOT(ret, name, params, ...) ret(*name) params;
    WP_KERN_OPS(WP_KERN_SLOT, WP_KERN_SLOT)
#undef WP_KERN_SLOT
    /* streams.h; NULL in a backend whose calls complete before they return (the CPU): the
     * dispatcher then treats events as complete and copies synchronously */
    void *(*event_create)(wp_kern *k);
    void (*event_destroy)(wp_kern *k, void *ev);
    void (*event_record)(wp_kern *k, void *ev);
    bool (*event_done)(wp_kern *k, void *ev);
    void (*event_wait)(wp_kern *k, void *ev);
    /* timers (NULL: the host's clock): an event that can time, recorded with event_record and
     * destroyed with event_destroy; elapsed seconds from a to b, 0 ok */
    void *(*timer_create)(wp_kern *k);
    int (*timer_elapsed)(wp_kern *k, void *a, void *b, double *seconds);
    void *(*host_alloc)(wp_kern *k, size_t bytes);
    void (*host_free)(wp_kern *k, void *p);
    void (*to_device_async)(wp_kern *k, void *dst, const void *src, size_t bytes);
    void (*to_host_async)(wp_kern *k, void *dst, const void *src, size_t bytes);
    int (*device)(const wp_kern *k);
    int (*mem_info)(wp_kern *k, size_t *free_bytes, size_t *total_bytes); /* 0 ok; NULL: host memory */
    /* kern_attention_docs; NULL in a backend whose attention reads qlo per query (the CPU) */
    void (*attention_docs)(wp_kern *k, const int32_t *qlo, const int32_t *host_lo, int b, int s);
    /* replay.h on the device (all four or none; none: the dispatcher keeps its own record of the
     * calls): capture the context's calls until graph_end, which hands back an executable graph;
     * launch it on the context's queue; free it. 0 ok, else -1 with why (a capture that failed
     * leaves no error in the context: nothing ran) */
    int (*graph_begin)(wp_kern *k, char *why, size_t whylen);
    int (*graph_end)(wp_kern *k, void **graph, char *why, size_t whylen);
    void (*graph_launch)(wp_kern *k, void *graph);
    void (*graph_free)(wp_kern *k, void *graph);
} wp_kern_ops;

struct wp_kern {
    const wp_kern_ops *ops;
    wp_backend_kind kind;
    wp_dtype compute;
    int threads;
    char error[512];  /* first error, "" while none */
    char notes[512];  /* kern_notes: choices a user may want to know, newline-separated */
    char device_name[256]; /* kern_device_name: the GPU's name (cudaDeviceProp.name), "cpu" */
    void *impl;       /* backend-private state (scratch, cuBLAS handle, streams, ...) */
    /* kern_memory: bytes held now and at most, kern_alloc's blocks (sizes by address in an
     * open-addressing table) plus what the backend reports with kern_mem_add */
    size_t mem_now, mem_peak;
    size_t term_now[WP_MEM_TERMS], term_peak[WP_MEM_TERMS], term_at_peak[WP_MEM_TERMS];
    wp_mem_term term; /* kern_mem_term: what the next allocations are for */
    struct wp_mem_block { void *p; size_t bytes; wp_mem_term term; } *blocks;
    size_t nblocks, cap_blocks;
    /* replays (replay.h, replay_impl.h): the mode calls are made in (run, record), the first call
     * that ended a recording (NULL while none), the record being made, and the epoch a backend's
     * scratch moves advance (kern_replay_stale) */
    int rp_mode;
    const char *rp_broken;
    struct rp_record *rp_rec;
    uint64_t rp_epoch;
};

/* A backend's own allocations (scratch, library workspaces) into kern_memory: +bytes when
 * taken, -bytes when given back; kern_mem_add_term names what they are for (kern_mem_add:
 * scratch). */
void kern_mem_add(wp_kern *k, int64_t delta);
void kern_mem_add_term(wp_kern *k, wp_mem_term t, int64_t delta);
/* Adds a line to kern_notes unless it is there already (a choice the user should hear of once). */
void kern_note(wp_kern *k, const char *fmt, ...);
/* A backend moved memory that recorded work may point at (a scratch buffer regrown): every
 * replay recorded before is stale (replay.h). */
void kern_replay_stale(wp_kern *k);

extern const wp_kern_ops wp_cpu_ops;
#if WP_HAVE_CUDA
extern const wp_kern_ops wp_cuda_ops;
int kern_cuda_device_count(void); /* cuda_context.c; 0 when none or the driver fails */
#endif

#endif
