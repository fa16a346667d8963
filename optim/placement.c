/* Where an optimizer's state lives (optim.h: wp_optim_place) and every move between it and the
 * compute context's memory. Device placement: the state is backend memory and each move is the
 * compute context's own copy (or none). Host placement: the state is page-locked host memory
 * (kern_host_alloc of the compute context), computed on by a CPU context of the optimizer's own
 * (o->sk), and reaches the device through two staging buffers used in turn (a copy out of one is
 * queued on the compute stream while the CPU fills the other) or, for the gradient window and
 * the pieces of a tie, by direct copies to and from the pinned state. The steps themselves run on
 * the update worker (update_worker.c), and every call on a chunk first takes its state back
 * (place_settle). */
#include <stdio.h>
#include <string.h>

#include "optim_impl.h"

wp_result place_host(wp_optim *o, int threads, char *err, size_t errlen) {
    char why[300];
    wp_kern_opts opts = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = threads};
    wp_kern *hk = kern_create(&opts, why, sizeof why);
    if (!hk) return wp_fail(WP_FAILED, err, errlen, "optimizer in host memory: the CPU kernels: %s", why);
    o->sk = hk;
    o->host = true;
    /* the caller's and the worker's CPU work can run at once: each on `threads` threads */
    o->wk = worker_start(o, threads, err, errlen);
    return o->wk ? 0 : WP_FAILED;
}

void place_staging(wp_optim *o) {
    size_t most = 0;
    for (int i = 0; i < o->n_owned; i++)
        if (o->owned[i].numel > most) most = o->owned[i].numel;
    o->stage_bytes = most * sizeof(float); /* the widest thing staged: an fp32 gradient or piece */
    for (int s = 0; s < PLACE_STAGES && !kern_error(o->k); s++) {
        o->stage[s] = kern_host_alloc(o->k, o->stage_bytes);
        o->stage_done[s] = kern_event_create(o->k);
    }
}

void place_release(wp_optim *o) {
    if (!o->host) return;
    worker_stop(o->wk); /* normally stopped already, before the state was freed (optim_destroy) */
    o->wk = NULL;
    kern_sync(o->k); /* copies still queued out of the staging or the state */
    for (int i = 0; i < o->n_owned; i++)
        if (o->owned[i].grad_window) kern_free(o->k, o->owned[i].grad_window);
    for (int s = 0; s < PLACE_STAGES; s++) {
        if (o->stage_done[s]) kern_event_destroy(o->k, o->stage_done[s]);
        if (o->stage[s]) kern_host_free(o->k, o->stage[s]);
    }
    kern_destroy(o->sk);
    o->sk = o->k;
    o->host = false;
}

void *place_alloc(wp_optim *o, size_t bytes) { return o->host ? kern_host_alloc(o->k, bytes) : kern_alloc(o->k, bytes); }

void place_free(wp_optim *o, void *p) {
    if (o->host) kern_host_free(o->k, p);
    else kern_free(o->k, p);
}

void place_to_host(wp_optim *o, void *host, const void *state, size_t bytes) {
    if (o->host) kern_copy(o->sk, host, state, bytes);
    else kern_to_host(o->k, host, state, bytes);
}

void place_from_host(wp_optim *o, void *state, const void *host, size_t bytes) {
    if (o->host) kern_copy(o->sk, state, host, bytes);
    else kern_to_device(o->k, state, host, bytes);
}

/* The next staging buffer, once the copy last queued out of it has left; NULL after an error. */
static void *take_stage(wp_optim *o, size_t bytes) {
    if (bytes > o->stage_bytes) {
        kern_set_error(o->k, "optimizer: %zu bytes to stage, more than its %zu-byte buffers", bytes, o->stage_bytes);
        return NULL;
    }
    int s = o->next_stage;
    o->next_stage = (s + 1) % PLACE_STAGES;
    if (!kern_event_done(o->k, o->stage_done[s])) kern_sync(o->k); /* streams.h has no host wait on one event */
    return kern_error(o->k) ? NULL : o->stage[s];
}

const void *place_in(wp_optim *o, const void *backend_src, size_t bytes) {
    if (!o->host) return backend_src;
    void *s = take_stage(o, bytes);
    if (s) kern_to_host(o->k, s, backend_src, bytes);
    return s;
}

void place_copy_in(wp_optim *o, void *state, const void *backend_src, size_t bytes) {
    if (o->host) kern_to_host(o->k, state, backend_src, bytes);
    else kern_copy(o->k, state, backend_src, bytes);
}

void place_out(wp_optim *o, void *backend_dst, const void *state, size_t bytes) {
    if (o->host) kern_to_device(o->k, backend_dst, state, bytes);
    else kern_copy(o->k, backend_dst, state, bytes);
}

void *place_stage(wp_optim *o, void *backend_dst, size_t bytes) { return o->host ? take_stage(o, bytes) : backend_dst; }

void place_send(wp_optim *o, void *backend_dst, void *staged, size_t bytes) {
    if (!o->host || !staged) return;
    for (int s = 0; s < PLACE_STAGES; s++)
        if (staged == o->stage[s]) {
            kern_to_device_async(o->k, backend_dst, staged, bytes);
            kern_event_record(o->k, o->stage_done[s]);
        }
}

float *place_grad_out(wp_optim *o, owned_chunk *oc) {
    if (!o->host) return oc->buf[WP_OPT_GRAD];
    const size_t bytes = oc->numel * sizeof(float);
    if (!oc->grad_window) {
        wp_mem_term was = kern_mem_term(o->k, WP_MEM_OPTIM);
        oc->grad_window = kern_alloc(o->k, bytes);
        kern_mem_term(o->k, was);
        if (!oc->grad_window) return NULL;
    }
    if (!oc->grad_out) kern_to_device(o->k, oc->grad_window, oc->buf[WP_OPT_GRAD], bytes);
    oc->grad_out = !kern_error(o->k);
    return oc->grad_out ? oc->grad_window : NULL;
}

void place_grad_home(wp_optim *o, owned_chunk *oc) {
    if (!o->host || !oc->grad_out) return;
    kern_to_host(o->k, oc->buf[WP_OPT_GRAD], oc->grad_window, oc->numel * sizeof(float));
    oc->grad_out = false;
}

void place_settle(wp_optim *o, owned_chunk *oc) {
    if (o->host && oc->queued) worker_wait(o->wk, oc->queued);
}
