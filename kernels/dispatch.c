/* kernels.h for every backend: the sticky error, argument checks (so each backend only sees
 * valid shapes and skips empty work), then a call through the backend's wp_kern_ops table. */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "replay_impl.h"
#include "ops_slots.h"
#include "rope_factor.h"
#include "rope_freq.h"
#include "wp_config.h"

/* ---- completeness of a backend's table (kernels/ops_slots.h) ---- */

typedef void (*any_fn)(void);

enum {
#define WP_SLOT(s, g) SLOT_INDEX_##s,
    WP_KERN_OPS_SLOTS
#undef WP_SLOT
    SLOT_COUNT
};

/* The list and the struct agree: the name string first, then exactly the listed slots, each
 * the size of a function pointer, in the listed order. A slot added to wp_kern_ops without
 * being listed fails the size check; a listed name the struct lacks does not compile. */
static_assert(offsetof(wp_kern_ops, name) == 0 && offsetof(wp_kern_ops, init) == sizeof(const char *),
              "wp_kern_ops starts with its name string, then the slots");
#define WP_SLOT(s, g)                                                                                         \
    static_assert(sizeof(((wp_kern_ops *)0)->s) == sizeof(any_fn), "wp_kern_ops." #s " is not a function pointer"); \
    static_assert(offsetof(wp_kern_ops, s) == offsetof(wp_kern_ops, init) + SLOT_INDEX_##s * sizeof(any_fn),        \
                  "kernels/ops_slots.h lists wp_kern_ops." #s " out of the struct's order");
WP_KERN_OPS_SLOTS
#undef WP_SLOT
static_assert(sizeof(wp_kern_ops) == offsetof(wp_kern_ops, init) + SLOT_COUNT * sizeof(any_fn),
              "wp_kern_ops has a member that kernels/ops_slots.h does not list");

static const char *const slot_names[SLOT_COUNT] = {
#define WP_SLOT(s, g) #s,
    WP_KERN_OPS_SLOTS
#undef WP_SLOT
};

static const wp_slot_group slot_groups[SLOT_COUNT] = {
#define WP_SLOT(s, g) g,
    WP_KERN_OPS_SLOTS
#undef WP_SLOT
};

size_t wp_kern_ops_slot_count(void) { return SLOT_COUNT; }
const char *wp_kern_ops_slot_name(size_t i) { return i < SLOT_COUNT ? slot_names[i] : NULL; }
int wp_kern_ops_slot_group(size_t i) { return i < SLOT_COUNT ? (int)slot_groups[i] : -1; }

static bool slot_required(wp_slot_group g) { return g == WP_SLOT_CONTEXT || g == WP_SLOT_MEMORY || g == WP_SLOT_OP; }

/* -1 when the table is complete, SLOT_COUNT when it has no name, else the slot's index */
static int missing_slot(const wp_kern_ops *ops) {
    if (!ops || !ops->name) return SLOT_COUNT;
    bool present[SLOT_COUNT];
#define WP_SLOT(s, g) present[SLOT_INDEX_##s] = ops->s != NULL;
    WP_KERN_OPS_SLOTS
#undef WP_SLOT
    int filled[WP_SLOT_OPTIONAL + 1] = {0};
    for (int i = 0; i < SLOT_COUNT; i++) filled[slot_groups[i]] += present[i];
    for (int i = 0; i < SLOT_COUNT; i++) {
        wp_slot_group g = slot_groups[i];
        if (present[i] || g == WP_SLOT_OPTIONAL) continue;
        if (slot_required(g) || filled[g] > 0) return i;
    }
    return -1;
}

const char *wp_kern_ops_missing(const wp_kern_ops *ops) {
    int i = missing_slot(ops);
    return i < 0 ? NULL : i == SLOT_COUNT ? "name" : slot_names[i];
}

wp_result wp_kern_ops_check(const wp_kern_ops *ops, char *err, size_t errlen) {
    int i = missing_slot(ops);
    if (i < 0) return WP_OK;
    if (i == SLOT_COUNT) return wp_fail(WP_FAILED, err, errlen, "kern_create: a backend's dispatch table (wp_kern_ops) has no name");
    if (slot_required(slot_groups[i]))
        return wp_fail(WP_FAILED, err, errlen,
                       "kern_create: the %s backend's dispatch table has no entry for %s (every op of kernels.h needs one; "
                       "kernels/ops_slots.h)",
                       ops->name, slot_names[i]);
    return wp_fail(WP_FAILED, err, errlen,
                   "kern_create: the %s backend's dispatch table has no entry for %s but fills others of its group "
                   "(streams.h events, pinned memory, replay.h graphs: all or none; kernels/ops_slots.h)",
                   ops->name, slot_names[i]);
}

/* ---- context ---- */

static const wp_kern_ops *ops_for(wp_backend_kind kind, char *err, size_t errlen) {
    switch (kind) {
    case WP_BACKEND_CPU: return &wp_cpu_ops;
    case WP_BACKEND_CUDA:
#if WP_HAVE_CUDA
        return &wp_cuda_ops;
#else
        snprintf(err, errlen, "cuda: this weipipe was built without the CUDA backend (configure with -Dcuda=enabled)");
        return NULL;
#endif
    }
    snprintf(err, errlen, "kern_create: unknown backend kind %d", (int)kind);
    return NULL;
}

wp_kern *kern_create(const wp_kern_opts *opts, char *err, size_t errlen) {
    if (!opts) {
        snprintf(err, errlen, "kern_create: opts is NULL");
        return NULL;
    }
    if (opts->compute != WP_F32 && opts->compute != WP_F16 && opts->compute != WP_BF16) {
        snprintf(err, errlen, "kern_create: unknown compute dtype %d", (int)opts->compute);
        return NULL;
    }
    if (opts->threads < 0) {
        snprintf(err, errlen, "kern_create: threads = %d is negative", opts->threads);
        return NULL;
    }
    const wp_kern_ops *ops = ops_for(opts->kind, err, errlen);
    if (!ops || wp_kern_ops_check(ops, err, errlen) != 0) return NULL; /* not a NULL call later */
    wp_kern *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, errlen, "kern_create: out of memory");
        return NULL;
    }
    k->ops = ops;
    k->kind = opts->kind;
    k->compute = opts->compute;
    k->threads = opts->threads;
    k->term = WP_MEM_SCRATCH;
    if (ops->init(k, opts, err, errlen) != 0) {
        free(k);
        return NULL;
    }
    return k;
}

void kern_destroy(wp_kern *k) {
    if (!k) return;
    k->ops->fini(k);
    free(k->blocks);
    free(k);
}

/* The CPU is always there; another backend is available when a context can be made (which
 * is how a missing GPU or driver shows up). */
bool kern_available(wp_backend_kind kind, char *why, size_t whylen) {
    if (kind == WP_BACKEND_CPU) return true;
    wp_kern_opts opts = {.kind = kind, .compute = WP_F32, .threads = 1, .device = 0};
    wp_kern *k = kern_create(&opts, why, whylen);
    if (!k) return false;
    kern_destroy(k);
    return true;
}

const char *kern_notes(const wp_kern *k) { return k ? k->notes : ""; }

void kern_note(wp_kern *k, const char *fmt, ...) {
    char line[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!k || strstr(k->notes, line)) return;
    size_t used = strlen(k->notes);
    snprintf(k->notes + used, sizeof k->notes - used, "%s%s", used ? "\n" : "", line);
}

const char *kern_device_name(const wp_kern *k) { return k && k->device_name[0] ? k->device_name : "cpu"; }

int kern_pick_device(int requested, int local_rank, int visible) {
    if (requested >= 0) return requested;
    return visible > 0 && local_rank >= 0 ? local_rank % visible : local_rank;
}

int kern_device_count(wp_backend_kind kind) {
#if WP_HAVE_CUDA
    if (kind == WP_BACKEND_CUDA) return kern_cuda_device_count();
#endif
    return kind == WP_BACKEND_CPU ? 1 : 0;
}

wp_backend_kind kern_kind(const wp_kern *k) { return k ? k->kind : WP_BACKEND_CPU; }

int kern_bulk_threads(const wp_kern *k, size_t n) {
    if (k->kind != WP_BACKEND_CPU) return 0;
    return n >= KERN_BULK_PARALLEL_MIN && k->threads > 1 ? k->threads : 1;
}
wp_dtype kern_compute_dtype(const wp_kern *k) { return k ? k->compute : WP_F32; }

const char *kern_error(const wp_kern *k) {
    if (!k) return "kern: NULL context";
    return k->error[0] ? k->error : NULL;
}

wp_result kern_status(const wp_kern *k) { return kern_error(k) ? WP_FAILED : WP_OK; }

void kern_set_error(wp_kern *k, const char *fmt, ...) {
    if (!k || k->error[0]) return; /* the first error is the one worth reporting */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->error, sizeof k->error, fmt, ap);
    va_end(ap);
    if (!k->error[0]) snprintf(k->error, sizeof k->error, "kern: error without a message");
}

/* ---- argument checks: each sets an error naming the kernel and the argument ---- */

static bool live(wp_kern *k) { return k && !k->error[0]; }

#define ARG(x) #x, (const void *)(x)
#define END (const char *)NULL

/* (name, pointer) pairs up to END: all non-NULL. */
static bool ptrs_ok(wp_kern *k, const char *fn, ...) {
    va_list ap;
    va_start(ap, fn);
    const char *name;
    bool ok = true;
    while (ok && (name = va_arg(ap, const char *))) {
        if (!va_arg(ap, const void *)) {
            kern_set_error(k, "%s: %s is NULL", fn, name);
            ok = false;
        }
    }
    va_end(ap);
    return ok;
}

#define SIZE(x) #x, (long)(x)

/* (name, long) pairs up to END: all >= 0. */
static bool sizes_ok(wp_kern *k, const char *fn, ...) {
    va_list ap;
    va_start(ap, fn);
    const char *name;
    bool ok = true;
    while (ok && (name = va_arg(ap, const char *))) {
        long v = va_arg(ap, long);
        if (v < 0) {
            kern_set_error(k, "%s: %s = %ld is negative", fn, name, v);
            ok = false;
        }
    }
    va_end(ap);
    return ok;
}

static bool cond_ok(wp_kern *k, bool cond, const char *fmt, ...) {
    if (cond) return true;
    if (k->error[0]) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->error, sizeof k->error, fmt, ap);
    va_end(ap);
    return false;
}

static bool dtype_ok(wp_kern *k, const char *fn, const char *name, wp_dtype t) {
    return cond_ok(k, t == WP_F32 || t == WP_F16 || t == WP_BF16, "%s: %s = %d is not a dtype", fn, name, (int)t);
}

/* Weight gradients are fp32 or bf16 (kernels.h). */
static bool grad_dtype_ok(wp_kern *k, const char *fn, const char *name, wp_dtype t) {
    return cond_ok(k, t == WP_F32 || t == WP_BF16, "%s: %s = %s, weight gradients are fp32 or bf16", fn, name,
                   wp_dtype_name(t));
}

/* ---- memory ---- */

const char *const wp_mem_term_name[WP_MEM_TERMS] = {
    [WP_MEM_WEIGHTS] = "weights", [WP_MEM_GRADS] = "gradients", [WP_MEM_OPTIM] = "optimizer", [WP_MEM_ACTS] = "activations",
    [WP_MEM_COMM] = "comm", [WP_MEM_SCRATCH] = "scratch", [WP_MEM_LOGITS] = "logits", [WP_MEM_EVAL] = "evaluation",
    [WP_MEM_SAMPLE] = "sampling", [WP_MEM_IO] = "io",
};
_Static_assert(sizeof wp_mem_term_name / sizeof *wp_mem_term_name == WP_MEM_TERMS, "a name per memory term");

static size_t sub_floor(size_t a, int64_t delta) {
    return delta < 0 && (size_t)-delta > a ? 0 : a + (size_t)delta;
}

void kern_mem_add_term(wp_kern *k, wp_mem_term t, int64_t delta) {
    if (!k || t < 0 || t >= WP_MEM_TERMS) return;
    k->mem_now = sub_floor(k->mem_now, delta);
    k->term_now[t] = sub_floor(k->term_now[t], delta);
    if (k->term_now[t] > k->term_peak[t]) k->term_peak[t] = k->term_now[t];
    if (k->mem_now > k->mem_peak) {
        k->mem_peak = k->mem_now;
        memcpy(k->term_at_peak, k->term_now, sizeof k->term_at_peak);
    }
}

void kern_mem_add(wp_kern *k, int64_t delta) { kern_mem_add_term(k, WP_MEM_SCRATCH, delta); }

void kern_mem_host(wp_kern *k, wp_mem_term t, int64_t delta) {
    if (k && k->kind == WP_BACKEND_CPU) kern_mem_add_term(k, t, delta);
}

wp_mem_term kern_mem_term(wp_kern *k, wp_mem_term t) {
    if (!k) return WP_MEM_SCRATCH;
    wp_mem_term old = k->term;
    if (t >= 0 && t < WP_MEM_TERMS) k->term = t;
    return old;
}

void kern_memory_terms(const wp_kern *k, size_t at_peak[WP_MEM_TERMS], size_t own[WP_MEM_TERMS]) {
    for (int t = 0; t < WP_MEM_TERMS; t++) {
        at_peak[t] = k ? k->term_at_peak[t] : 0;
        own[t] = k ? k->term_peak[t] : 0;
    }
}

void kern_attention_docs(wp_kern *k, const int32_t *qlo, const int32_t *host_lo, int b, int s) {
    if (!live(k) || !k->ops->attention_docs) return;
    if (k->rp_mode) rp_break(k, "kern_attention_docs"); /* host data, read at the call */
    if (b <= 0 || s <= 0 || !qlo || !host_lo) {
        kern_set_error(k, "kern_attention_docs: bad arguments (b=%d s=%d qlo %s host_lo %s)", b, s,
                       qlo ? "set" : "NULL", host_lo ? "set" : "NULL");
        return;
    }
    k->ops->attention_docs(k, qlo, host_lo, b, s);
}

int kern_device_free(wp_kern *k, size_t *free_bytes, size_t *total_bytes) {
    if (!live(k) || !k->ops->mem_info) return -1;
    return k->ops->mem_info(k, free_bytes, total_bytes);
}

void kern_memory(const wp_kern *k, size_t *now, size_t *peak) {
    *now = k ? k->mem_now : 0;
    *peak = k ? k->mem_peak : 0;
}

/* The block table: open addressing on the address, linear probing, deletion by moving the
 * rest of the run back (no tombstones), kept at most half full. */
static size_t block_slot(const wp_kern *k, const void *p) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 20) & (k->cap_blocks - 1);
    while (k->blocks[i].p && k->blocks[i].p != p) i = (i + 1) & (k->cap_blocks - 1);
    return i;
}

static bool block_add(wp_kern *k, void *p, size_t bytes) {
    if (2 * (k->nblocks + 1) > k->cap_blocks) {
        size_t cap = k->cap_blocks ? 2 * k->cap_blocks : 64;
        struct wp_mem_block *old = k->blocks, *nb = calloc(cap, sizeof *nb);
        if (!nb) return false;
        size_t oldcap = k->cap_blocks;
        k->blocks = nb, k->cap_blocks = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].p) k->blocks[block_slot(k, old[i].p)] = old[i];
        free(old);
    }
    k->blocks[block_slot(k, p)] = (struct wp_mem_block){p, bytes, k->term};
    k->nblocks++;
    return true;
}

static size_t block_remove(wp_kern *k, const void *p, wp_mem_term *term) {
    if (!k->cap_blocks) return 0;
    size_t i = block_slot(k, p), mask = k->cap_blocks - 1;
    if (!k->blocks[i].p) return 0;
    size_t bytes = k->blocks[i].bytes;
    *term = k->blocks[i].term;
    k->blocks[i].p = NULL;
    k->nblocks--;
    for (size_t j = (i + 1) & mask; k->blocks[j].p; j = (j + 1) & mask) { /* re-seat the run after i */
        struct wp_mem_block b = k->blocks[j];
        k->blocks[j].p = NULL;
        k->blocks[block_slot(k, b.p)] = b;
    }
    return bytes;
}

void *kern_alloc(wp_kern *k, size_t bytes) {
    if (!live(k)) return NULL;
    if (k->rp_mode) rp_break(k, "kern_alloc");
    void *p = k->ops->alloc(k, bytes);
    if (p && !block_add(k, p, bytes)) {
        k->ops->free(k, p);
        kern_set_error(k, "kern_alloc: out of host memory for the block table");
        return NULL;
    }
    if (p) kern_mem_add_term(k, k->term, (int64_t)bytes);
    return p;
}

/* Frees even after an error, so that callers can clean up. */
void kern_free(wp_kern *k, void *p) {
    if (!k || !p) return;
    wp_mem_term t = WP_MEM_SCRATCH;
    size_t bytes = block_remove(k, p, &t);
    kern_mem_add_term(k, t, -(int64_t)bytes);
    /* Recordings that pointed at p stay: a recording replays only for the same arguments, which
     * the caller holds valid when it makes them. Memory the calls do not name (a backend's
     * scratch) moves with kern_replay_stale. */
    if (k->rp_mode) rp_break(k, "kern_free");
    k->ops->free(k, p);
}

void kern_to_device(wp_kern *k, void *dst, const void *host_src, size_t bytes) {
    if (!live(k) || bytes == 0 || !ptrs_ok(k, "kern_to_device", ARG(dst), ARG(host_src), END)) return;
    if (k->rp_mode) rp_break(k, "kern_to_device"); /* host data, read at the call */
    k->ops->to_device(k, dst, host_src, bytes);
}

void kern_to_host(wp_kern *k, void *host_dst, const void *src, size_t bytes) {
    if (!live(k) || bytes == 0 || !ptrs_ok(k, "kern_to_host", ARG(host_dst), ARG(src), END)) return;
    if (k->rp_mode) rp_break(k, "kern_to_host"); /* the host reads the result */
    k->ops->to_host(k, host_dst, src, bytes);
}

void kern_copy(wp_kern *k, void *dst, const void *src, size_t bytes) {
    if (!live(k) || bytes == 0 || !ptrs_ok(k, "kern_copy", ARG(dst), ARG(src), END)) return;
    if (k->rp_mode) { rp_mem(k, dst, src, bytes); return; }
    k->ops->copy(k, dst, src, bytes);
}

void kern_zero(wp_kern *k, void *p, size_t bytes) {
    if (!live(k) || bytes == 0 || !ptrs_ok(k, "kern_zero", ARG(p), END)) return;
    if (k->rp_mode) { rp_mem(k, p, NULL, bytes); return; }
    k->ops->zero(k, p, bytes);
}

void kern_sync(wp_kern *k) {
    if (live(k) && k->rp_mode) rp_break(k, "kern_sync");
    if (live(k)) k->ops->sync(k);
}

/* ---- the compute ops (ops_table.h): the checks the rows name, then one wrapper per row ---- */

static int at_least_1(int v) { return v > 1 ? v : 1; }

static bool gemm_ok(wp_kern *k, const char *fn, bool trans_a, bool trans_b, int m, int n, int kk, int lda, int ldb,
                    wp_dtype ctype, int ldc) {
    if (!sizes_ok(k, fn, SIZE(m), SIZE(n), SIZE(kk), END)) return false;
    if (!cond_ok(k, ctype == WP_F32 || ctype == WP_BF16 || ctype == k->compute,
                 "%s: ctype = %s is neither fp32, bf16 nor the compute dtype", fn, wp_dtype_name(ctype)))
        return false;
    int a_cols = trans_a ? m : kk, b_cols = trans_b ? kk : n;
    return cond_ok(k, lda >= at_least_1(a_cols), "%s: lda = %d is less than the %d columns of A", fn, lda, a_cols) &&
           cond_ok(k, ldb >= at_least_1(b_cols), "%s: ldb = %d is less than the %d columns of B", fn, ldb, b_cols) &&
           cond_ok(k, ldc >= at_least_1(n), "%s: ldc = %d is less than the %d columns of C", fn, ldc, n);
}

static bool rows_ok(wp_kern *k, const char *fn, int T, int h) {
    return sizes_ok(k, fn, SIZE(T), END) && cond_ok(k, h >= 1, "%s: h = %d is not positive", fn, h);
}

static bool attention_ok(wp_kern *k, const char *fn, int b, int sq, int skv, int nh, int nkv, int hd) {
    return sizes_ok(k, fn, SIZE(b), SIZE(sq), END) &&
           cond_ok(k, skv >= sq, "%s: skv = %d is less than sq = %d", fn, skv, sq) &&
           cond_ok(k, nh >= 1 && nkv >= 1 && nh % nkv == 0,
                   "%s: nh = %d is not a positive multiple of nkv = %d", fn, nh, nkv) &&
           cond_ok(k, hd >= 1, "%s: hd = %d is not positive", fn, hd);
}

static bool lmhead_ok(wp_kern *k, const char *fn, int T, int h, int V) {
    return rows_ok(k, fn, T, h) && cond_ok(k, V >= 1, "%s: V = %d is not positive", fn, V);
}

/* Every pointer non-NULL; names is the stringified list ("y, gate, up") the error quotes from. */
static bool ptrs_named(wp_kern *k, const char *fn, const char *names, const void *const *p, size_t n) {
    const char *name = names;
    for (size_t i = 0; i < n; i++) {
        while (*name == ' ') name++;
        size_t len = strcspn(name, ",");
        if (!p[i]) {
            kern_set_error(k, "%s: %.*s is NULL", fn, (int)len, name);
            return false;
        }
        name += len + (name[len] == ',');
    }
    return true;
}

/* The helpers of the rows' checks: k and fn ("kern_<name>") are the wrapper's. */
#define PTRS(...)                                                                                                     \
    ptrs_named(k, fn, #__VA_ARGS__, (const void *const[]){__VA_ARGS__},                                               \
               sizeof((const void *const[]){__VA_ARGS__}) / sizeof(const void *))
#define DTYPE(t) dtype_ok(k, fn, #t, t)
#define GRAD_DTYPE(t) grad_dtype_ok(k, fn, #t, t)

/* kern_<name> for each OP row: nothing after an error, then the row's check (false: refused
 * with an error naming the call and the argument, or empty work skipped), then the backend. */
#define WP_KERN_FORWARD(ret, name, params, args, check)                                                               \
    ret kern_##name params {                                                                                          \
        const char *fn = "kern_" #name;                                                                               \
        (void)fn;                                                                                                     \
        if (!live(k) || !(check)) return;                                                                             \
        if (k->rp_mode) { /* recording a span (replay.h) */                                                  \
            rp_op_##name args;                                                                                        \
            return;                                                                                                   \
        }                                                                                                             \
        k->ops->name args;                                                                                            \
    }
#define WP_KERN_BY_HAND(...)
WP_KERN_OPS(WP_KERN_FORWARD, WP_KERN_BY_HAND)
#undef WP_KERN_FORWARD
#undef WP_KERN_BY_HAND
#undef PTRS
#undef DTYPE
#undef GRAD_DTYPE

/* ---- the CUSTOM rows ---- */

/* NaN when the call cannot run: a norm computed from nothing must not look finite. */
double kern_sumsq(wp_kern *k, const void *x, wp_dtype t, size_t n) {
    const char *fn = "kern_sumsq";
    if (!live(k) || !dtype_ok(k, fn, "t", t)) return NAN;
    if (n == 0) return 0.0;
    if (!ptrs_ok(k, fn, ARG(x), END)) return NAN;
    if (k->rp_mode) rp_break(k, fn); /* the host reads the result */
    return k->ops->sumsq(k, x, t, n);
}

static bool rope_ok(wp_kern *k, const char *fn, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                    const wp_rope_scaling *sc) {
    bool scaled = sc && sc->factor != 0.0;
    return sizes_ok(k, fn, SIZE(b), SIZE(s), SIZE(nheads), SIZE(pos0), END) &&
           cond_ok(k, hd >= 2 && hd % 2 == 0, "%s: hd = %d is not a positive even number", fn, hd) &&
           cond_ok(k, theta > 0.0f, "%s: theta = %g is not positive", fn, theta) &&
           cond_ok(k, !scaled || (sc->factor > 0.0 && sc->original_max_pos > 0.0 && sc->low_freq_factor > 0.0 &&
                                  sc->high_freq_factor > sc->low_freq_factor),
                   "%s: rope scaling (factor %g, low %g, high %g, original %g) needs positive values and high > low",
                   fn, scaled ? sc->factor : 0.0, scaled ? sc->low_freq_factor : 0.0,
                   scaled ? sc->high_freq_factor : 0.0, scaled ? sc->original_max_pos : 0.0) &&
           ptrs_ok(k, fn, ARG(x), END);
}

void kern_rope_fwd_scaled(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                          const wp_rope_scaling *sc, const int32_t *plo) {
    if (!live(k) || !rope_ok(k, "kern_rope_fwd", x, b, s, nheads, hd, pos0, theta, sc) || b == 0 || s == 0 || nheads == 0)
        return;
    if (k->rp_mode) { rp_op_rope_fwd(k, x, b, s, nheads, hd, pos0, theta, sc && sc->factor != 0.0 ? sc : NULL, plo); return; }
    k->ops->rope_fwd(k, x, b, s, nheads, hd, pos0, theta, sc && sc->factor != 0.0 ? sc : NULL, plo);
}

void kern_rope_bwd_scaled(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                          const wp_rope_scaling *sc, const int32_t *plo) {
    if (!live(k) || !rope_ok(k, "kern_rope_bwd", x, b, s, nheads, hd, pos0, theta, sc) || b == 0 || s == 0 || nheads == 0)
        return;
    if (k->rp_mode) { rp_op_rope_bwd(k, x, b, s, nheads, hd, pos0, theta, sc && sc->factor != 0.0 ? sc : NULL, plo); return; }
    k->ops->rope_bwd(k, x, b, s, nheads, hd, pos0, theta, sc && sc->factor != 0.0 ? sc : NULL, plo);
}

double wp_rope_freq_factor(int i, int hd, double theta, const wp_rope_scaling *sc) {
    return pow(theta, -2.0 * i / (double)hd) / wp_rope_inv_freq(i, hd, theta, sc);
}

void kern_rope_fwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta) {
    kern_rope_fwd_scaled(k, x, b, s, nheads, hd, pos0, theta, NULL, NULL);
}

void kern_rope_bwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta) {
    kern_rope_bwd_scaled(k, x, b, s, nheads, hd, pos0, theta, NULL, NULL);
}
