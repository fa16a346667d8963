/* CPU backend context: thread count, scratch memory, host "device" memory. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu.h"
#include "wp_config.h"

#if WP_HAVE_BLAS
#include <cblas.h>
#endif

enum { CPU_ALIGN = 64 };

/* OpenBLAS keeps one process-wide thread count. Contexts that share the process (ranks as
 * threads) each ask for their own share; the last one created wins, which is what a run of
 * identical ranks wants. The lock keeps concurrent kern_create calls from racing in it.
 * Returns 0, or the failing pthread call's error number. */
static int set_blas_threads(int threads) {
#if WP_HAVE_BLAS && defined(OPENBLAS_VERSION)
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    WP_TRY(pthread_mutex_lock(&lock));
    if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
    return pthread_mutex_unlock(&lock);
#else
    (void)threads;
    return 0;
#endif
}

wp_result cpu_init(wp_kern *k, const wp_kern_opts *opts, char *err, size_t errlen) {
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "cpu: out of memory for the context");
        return WP_FAILED;
    }
    /* 0 means all cores, as OpenMP counts them (OMP_NUM_THREADS narrows it). */
    c->threads = opts->threads > 0 ? opts->threads : omp_get_max_threads();
    /* glibc's memcpy streams above a fraction of the last-level cache; outputs of a whole
     * last-level cache or more do the same here (32 MiB where the size is not known) */
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    c->stream_min = llc > 0 ? (size_t)llc : (size_t)32 << 20;
    c->use_blas = WP_HAVE_BLAS;
    k->impl = c;
    k->compute = WP_F32; /* the CPU computes in fp32 whatever was requested */
    k->threads = c->threads;
    int rc = set_blas_threads(c->threads);
    if (rc != 0) {
        snprintf(err, errlen, "cpu: setting the BLAS thread count: pthread mutex: %s", strerror(rc));
        cpu_fini(k);
        return WP_FAILED;
    }
    return 0;
}

void cpu_fini(wp_kern *k) {
    cpu_ctx *c = cpu_of(k);
    if (!c) return;
    for (int i = 0; i < CPU_SCRATCH_SLOTS; i++) free(c->scratch[i].p);
    free(c->rope.cos);
    free(c->rope.sin);
    free(c);
    k->impl = NULL;
}

void *cpu_aligned_alloc(wp_kern *k, size_t bytes, const char *who) {
    /* round up (a zero-byte request still gets a unique pointer) */
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (rounded < bytes) {
        kern_set_error(k, "%s: %zu bytes is too large", who, bytes);
        return NULL;
    }
    if (rounded == 0) rounded = CPU_ALIGN;
    void *p = NULL;
    int rc = posix_memalign(&p, CPU_ALIGN, rounded);
    if (rc != 0) {
        kern_set_error(k, "%s: posix_memalign of %zu bytes failed: %s", who, rounded, strerror(rc));
        return NULL;
    }
    memset(p, 0, rounded);
    return p;
}

void *cpu_scratch(wp_kern *k, int slot, size_t bytes, const char *who) {
    cpu_buf *b = &cpu_of(k)->scratch[slot];
    if (b->bytes >= bytes && b->p) return b->p;
    free(b->p);
    kern_mem_add_term(k, b->term, -(int64_t)b->bytes);
    b->bytes = 0;
    b->p = cpu_aligned_alloc(k, bytes, who);
    /* the LM head's rows of logits are a term of their own (kern_memory_terms) */
    b->term = strncmp(who, "kern_lmhead", 11) == 0 ? WP_MEM_LOGITS : WP_MEM_SCRATCH;
    if (b->p) b->bytes = bytes, kern_mem_add_term(k, b->term, (int64_t)bytes);
    return b->p;
}

void *cpu_alloc(wp_kern *k, size_t bytes) { return cpu_aligned_alloc(k, bytes, "kern_alloc"); }

void cpu_free(wp_kern *k, void *p) {
    (void)k;
    free(p);
}

/* to_device, to_host and copy: all memory is host memory. */
void cpu_memcpy(wp_kern *k, void *dst, const void *src, size_t bytes) {
    (void)k;
    memmove(dst, src, bytes);
}

/* On the context's threads, one memset of its share each: one thread does not reach the
 * memory's write bandwidth on every machine. One call a thread, not pieces: glibc's memset of
 * a large buffer is rep stosb, which on the development machine (AMD EPYC, Zen 3) zeroed 652 MB
 * at 59 GB/s in one call and at 21 GB/s in pieces of 64 KiB to 16 MiB (two threads: 79 and
 * 28), faster than non-temporal stores (25 at two threads); docs/performance-cpu.md. */
void cpu_zero(wp_kern *k, void *p, size_t bytes) {
    const int t = kern_bulk_threads(k, bytes / sizeof(float));
#pragma omp parallel for num_threads(t) schedule(static)
    for (int i = 0; i < t; i++) {
        size_t a = bytes * (size_t)i / (size_t)t, b = bytes * (size_t)(i + 1) / (size_t)t;
        memset((char *)p + a, 0, b - a);
    }
}

/* Every CPU kernel has finished when it returns. */
void cpu_sync(wp_kern *k) { (void)k; }
