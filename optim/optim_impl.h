/* Private to optim/: the optimizer's state (optim.c) and where it lives (placement.c). */
#ifndef WP_OPTIM_IMPL_H
#define WP_OPTIM_IMPL_H

#include <pthread.h>

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
    /* host placement: the sequence number of the last job queued for this chunk on the update
     * worker (0: none yet); the chunk's state is the worker's until the worker's done count
     * reaches it (worker_settle) */
    uint64_t queued;
    /* device placement: its kern_adamw pieces, [piece0, piece0 + npieces) of wp_optim.pieces */
    int piece0, npieces;
} owned_chunk;

/* Host placement's update worker (update_worker.c): one thread per optimizer that runs the
 * chunks' AdamW steps and what is chained to them (the tie's copy, the gradient's zeroing) on a CPU context of its own, in the order queued, while the
 * rank's thread goes on. */
typedef enum { JOB_STEP, JOB_ZERO_GRAD } job_kind;

typedef struct {
    job_kind kind;
    int slot; /* index into owned */
    uint64_t seq;
    /* JOB_STEP */
    float lr, grad_scale, bc1, bc2;
    bool tie;
    size_t tie_dst, tie_src, tie_n;
} update_job;

enum { WORKER_QUEUE = 64 };

typedef struct {
    wp_kern *k; /* the worker's own CPU context: no other thread uses it */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    /* under mu: the ring of queued jobs, what is queued and done so far, the first error */
    update_job q[WORKER_QUEUE];
    int head, n;
    uint64_t queued, done;
    bool quit;
    char err[300]; /* set once (sticky, then immutable), under mu */
    bool failed;
} update_worker;

/* Host placement's staging: two page-locked buffers of the largest owned range in fp32, used in
 * turn, each with the event of the last copy out of it, so that the working copy of one chunk is
 * made on the CPU while the previous one still travels to the device. */
enum { PLACE_STAGES = 2 };

struct wp_optim {
    wp_optim_model m;
    wp_kern *k;  /* the compute context: what every pointer handed in or out belongs to */
    wp_kern *sk; /* the state's context on the caller's thread: k, or (host placement) a CPU context */
    wp_adamw_hparams hp;
    int n_owned;
    bool sliced; /* a slice of each chunk: the tie is the schedule's (optim.h) */
    bool weights_only; /* masters alone (optim_create_weights): no moments, no gradient */
    bool host;   /* host placement: sk is a CPU context of its own, the state kern_host_alloc's,
                  * and the steps run on the update worker (wk) */
    update_worker *wk;
    owned_chunk *owned;
    int *slot_of; /* chunk -> index into owned, -1 when not owned; m.n_chunks entries */
    /* device placement: every owned chunk's pieces for kern_adamw_multi, in owned order, here
     * and in backend memory (pieces_dev: NULL with host placement, which keeps its per-piece
     * calls on the CPU) */
    wp_adamw_piece *pieces, *pieces_dev;
    int n_pieces;
    void *stage[PLACE_STAGES];
    wp_kern_event *stage_done[PLACE_STAGES];
    size_t stage_bytes;
    int next_stage;
};

/* ---- optim.c ---- */
/* A step's arithmetic on the state (AdamW over the chunk's tensor runs, the tie's copy), on
 * context k: the compute context's thread (device placement: one kern_adamw_multi over the
 * chunk's pieces) or the update worker (host placement: one kern_adamw per piece). */
void step_run(wp_optim *o, wp_kern *k, const update_job *j);

/* ---- update_worker.c ---- */
/* Start o's worker with a CPU context of `threads` threads; NULL with a reason in err. */
update_worker *worker_start(wp_optim *o, int threads, char *err, size_t errlen);
/* Queue a job (its seq is set here; waits for room when the ring is full): the chunk's state
 * belongs to the worker until worker_settle says the job is done. */
void worker_queue(update_worker *w, update_job *j);
/* Wait until every job up to seq is done (seq 0: nothing to wait for). */
void worker_wait(update_worker *w, uint64_t seq);
/* Whether the job seq is done, without waiting. */
bool worker_done(update_worker *w, uint64_t seq);
/* The worker's first error, or NULL (stays once set). */
const char *worker_error(update_worker *w);
/* Finish the queued jobs, stop the thread, release the context. */
void worker_stop(update_worker *w);

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
/* The chunk's state back from the worker: its queued jobs done (nothing with device placement). */
void place_settle(wp_optim *o, owned_chunk *oc);

#endif
