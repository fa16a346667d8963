/* Private to optim/: the optimizer's state (optim.c) and where it lives (placement.c). */
#ifndef WP_OPTIM_IMPL_H
#define WP_OPTIM_IMPL_H

#include "optim.h"
#include "streams.h"

typedef struct {
    int chunk;
    size_t off, numel; /* the elements [off, off + numel) of the chunk held here */
    float *buf[4]; /* indexed by wp_optim_buf: master, m, v, grad (where the state lives) */
    int64_t steps;
    bool folded; /* the tie is folded and the gradient not handed out nor changed since */
    /* host placement: the gradient's device window (optim_grad), and whether it holds the
     * accumulator now (handed out, not yet copied home) */
    float *grad_window;
    bool grad_out;
} owned_chunk;

/* Host placement's staging: two page-locked buffers of the largest owned range in fp32, used in
 * turn, each with the event of the last copy out of it, so that the working copy of one chunk is
 * made on the CPU while the previous one still travels to the device. */
enum { PLACE_STAGES = 2 };

struct wp_optim {
    wp_optim_model m;
    wp_kern *k;  /* the compute context: what every pointer handed in or out belongs to */
    wp_kern *sk; /* the state's context: k, or (host placement) the host update context */
    wp_adamw_hparams hp;
    int n_owned;
    bool sliced; /* a slice of each chunk: the tie is the schedule's (optim.h) */
    bool weights_only; /* masters alone (optim_create_weights): no moments, no gradient */
    bool host;   /* host placement: sk is a CPU context of its own, the state kern_host_alloc's */
    owned_chunk *owned;
    int *slot_of; /* chunk -> index into owned, -1 when not owned; m.n_chunks entries */
    void *stage[PLACE_STAGES];
    wp_kern_event *stage_done[PLACE_STAGES];
    size_t stage_bytes;
    int next_stage;
};

/* ---- placement.c ---- */
/* Open the host update context (a CPU context of `threads` threads) and mark o host-placed. */
wp_result place_host(wp_optim *o, int threads, char *err, size_t errlen);
/* The staging buffers (host placement), once the buffers are allocated; errors in o->k. */
void place_staging(wp_optim *o);
/* Release the staging and the host update context (nothing with device placement). */
void place_release(wp_optim *o);
/* A state buffer where the state lives, and its release. */
void *place_alloc(wp_optim *o, size_t bytes);
void place_free(wp_optim *o, void *p);
/* Between the caller's host memory and a state buffer. */
void place_to_host(wp_optim *o, void *host, const void *state, size_t bytes);
void place_from_host(wp_optim *o, void *state, const void *host, size_t bytes);
/* Backend memory read by the state's context: src itself (device placement), or a staging
 * buffer holding a copy of it. */
const void *place_in(wp_optim *o, const void *backend_src, size_t bytes);
/* Backend memory src copied over a state buffer. */
void place_copy_in(wp_optim *o, void *state, const void *backend_src, size_t bytes);
/* A state buffer copied to backend memory, complete when the call returns. */
void place_out(wp_optim *o, void *backend_dst, const void *state, size_t bytes);
/* Where the state's context writes what goes to backend_dst: backend_dst itself, or a free
 * staging buffer; then place_send moves it there (queued: the stage stays busy until it lands). */
void *place_stage(wp_optim *o, void *backend_dst, size_t bytes);
void place_send(wp_optim *o, void *backend_dst, void *staged, size_t bytes);
/* The gradient accumulator: handed out as backend memory (the window, filled from the state),
 * and brought home before the state's context reads or changes it. */
float *place_grad_out(wp_optim *o, owned_chunk *oc);
void place_grad_home(wp_optim *o, owned_chunk *oc);

#endif
