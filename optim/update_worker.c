/* Host placement's update worker (optim_impl.h: update_worker): the chunks' AdamW steps run on a
 * thread of the optimizer's own while the rank's thread goes on with its next actions (the GPU
 * computing, the ring moving weights), so the CPU update is off the step's path except where a
 * later call needs the chunk's state (place_settle). Jobs run in the order queued; the worker
 * has its own CPU context, so no two threads ever use one wp_kern (a CPU context's scratch and
 * sticky error are per context). Errors stay in that context; the first is copied under the lock
 * for the rank's thread, which reports it at its next call (optim.c: status). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_impl.h"

/* pthread calls on a mutex and condition variables that are valid and used correctly fail only
 * on a broken system: there is no caller to hand the error to (the worker's loop), so stop. */
static void must(int rc, const char *what) {
    if (rc == 0) return;
    fprintf(stderr, "optimizer update worker: %s: %s\n", what, strerror(rc));
    abort();
}

static void lock(update_worker *w) { must(pthread_mutex_lock(&w->mu), "pthread_mutex_lock"); }
static void unlock(update_worker *w) { must(pthread_mutex_unlock(&w->mu), "pthread_mutex_unlock"); }

typedef struct {
    update_worker *w;
    wp_optim *o;
} worker_arg;

static void run_job(wp_optim *o, wp_kern *k, const update_job *j) {
    owned_chunk *oc = &o->owned[j->slot];
    if (j->kind == JOB_STEP) step_run(o, k, j);
    else kern_zero(k, oc->buf[WP_OPT_GRAD], oc->numel * sizeof(float));
}

static void *worker_main(void *p) {
    worker_arg a = *(worker_arg *)p;
    free(p);
    update_worker *w = a.w;
    lock(w);
    for (;;) {
        while (w->n == 0 && !w->quit) must(pthread_cond_wait(&w->work, &w->mu), "pthread_cond_wait");
        if (w->n == 0) break; /* quit, and nothing left */
        update_job j = w->q[w->head];
        unlock(w);
        run_job(a.o, w->k, &j);
        const char *e = kern_error(w->k);
        lock(w);
        w->head = (w->head + 1) % WORKER_QUEUE;
        w->n--;
        w->done = j.seq;
        if (e && !w->failed) {
            snprintf(w->err, sizeof w->err, "%s", e);
            w->failed = true;
        }
        must(pthread_cond_broadcast(&w->done_cv), "pthread_cond_broadcast");
    }
    unlock(w);
    return NULL;
}

update_worker *worker_start(wp_optim *o, int threads, char *err, size_t errlen) {
    char why[300];
    update_worker *w = calloc(1, sizeof *w);
    worker_arg *a = malloc(sizeof *a);
    if (!w || !a) {
        free(w);
        free(a);
        snprintf(err, errlen, "optimizer in host memory: out of memory for the update worker");
        return NULL;
    }
    wp_kern_opts opts = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = threads};
    if (!(w->k = kern_create(&opts, why, sizeof why))) {
        snprintf(err, errlen, "optimizer in host memory: the update worker's CPU kernels: %s", why);
        free(w);
        free(a);
        return NULL;
    }
    /* the optimizer's chunks are filled in after this; the worker reads one only once a job
     * naming it has passed through the lock */
    *a = (worker_arg){w, o};
    int rc = pthread_mutex_init(&w->mu, NULL);
    bool mu = !rc, work = mu && !(rc = pthread_cond_init(&w->work, NULL));
    bool done = work && !(rc = pthread_cond_init(&w->done_cv, NULL));
    if (done && !(rc = pthread_create(&w->thread, NULL, worker_main, a))) return w;
    snprintf(err, errlen, "optimizer in host memory: starting the update worker: %s", strerror(rc));
    if (done) pthread_cond_destroy(&w->done_cv);
    if (work) pthread_cond_destroy(&w->work);
    if (mu) pthread_mutex_destroy(&w->mu);
    kern_destroy(w->k);
    free(w);
    free(a);
    return NULL;
}

void worker_queue(update_worker *w, update_job *j) {
    lock(w);
    while (w->n == WORKER_QUEUE) must(pthread_cond_wait(&w->done_cv, &w->mu), "pthread_cond_wait");
    j->seq = ++w->queued;
    w->q[(w->head + w->n) % WORKER_QUEUE] = *j;
    w->n++;
    must(pthread_cond_signal(&w->work), "pthread_cond_signal");
    unlock(w);
}

void worker_wait(update_worker *w, uint64_t seq) {
    lock(w);
    while (w->done < seq) must(pthread_cond_wait(&w->done_cv, &w->mu), "pthread_cond_wait");
    unlock(w);
}

bool worker_done(update_worker *w, uint64_t seq) {
    lock(w);
    bool done = w->done >= seq;
    unlock(w);
    return done;
}

const char *worker_error(update_worker *w) {
    lock(w);
    const char *e = w->failed ? w->err : NULL;
    unlock(w);
    return e;
}

void worker_stop(update_worker *w) {
    if (!w) return;
    lock(w);
    w->quit = true;
    must(pthread_cond_signal(&w->work), "pthread_cond_signal");
    unlock(w);
    must(pthread_join(w->thread, NULL), "pthread_join");
    pthread_cond_destroy(&w->done_cv);
    pthread_cond_destroy(&w->work);
    pthread_mutex_destroy(&w->mu);
    kern_destroy(w->k);
    free(w);
}
