/* Backend-neutral kernel API: the CPU backend (kernels/cpu, C + BLAS) is the reference,
 * the CUDA backend (kernels/cuda, cuBLAS) implements the same calls.
 *
 * kernels/ is the lowest layer: it includes nothing else of the project. Its public headers are
 * this one (with ops_table.h, the compute ops' signatures), streams.h and cuda/cuda_backend.h;
 * backend.h (the ops table each backend fills), cpu/cpu.h and cuda/cuda_impl.h are its own
 * (docs/architecture.md).
 *
 * Conventions
 * - Row-major everywhere. T = b*s token rows. Linear weights use the Hugging Face layout
 *   [out, in], so y[T,out] = x[T,in] @ W^T.
 * - "ct" buffers hold values in the backend's compute dtype (kern_compute_dtype): weights,
 *   activations and their gradients. The CPU backend computes and stores in fp32 (mixed and
 *   bf16 precision only change what travels the wire); the CUDA backend stores fp16/bf16.
 * - float* buffers are always fp32 (statistics: rstd, logsumexp, per-token losses).
 * - Weight-gradient outputs name their dtype (fp32 or bf16) and are always accumulated
 *   (+=), so a chunk's gW sums micro-batches without extra buffers.
 * - Pointers are backend memory (host memory for the CPU, device memory for CUDA);
 *   kern_alloc/kern_to_device/kern_to_host move data between host and backend.
 * - Errors are sticky: a failing call records the first error (call, file, line and the
 *   library's message) in the context and later calls become no-ops; callers check
 *   kern_error() at the points where they can report it. No kernel exits the process.
 */
#ifndef WP_KERNELS_H
#define WP_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "result.h"

typedef enum { WP_F32 = 0, WP_F16 = 1, WP_BF16 = 2 } wp_dtype;

size_t wp_dtype_size(wp_dtype t);
const char *wp_dtype_name(wp_dtype t);

/* Scalar conversions (round to nearest even), used by hosts, tests and the CPU backend. */
uint16_t wp_f32_to_f16(float x);
float wp_f16_to_f32(uint16_t h);
uint16_t wp_f32_to_bf16(float x);
float wp_bf16_to_f32(uint16_t b);
/* x rounded through dtype t and back (identity for WP_F32). */
float wp_round_to(float x, wp_dtype t);

typedef enum { WP_BACKEND_CPU = 0, WP_BACKEND_CUDA = 1 } wp_backend_kind;

/* Which attention kernels a CUDA context runs (the CPU backend has one). */
typedef enum { WP_ATTN_AUTO = 0, WP_ATTN_CUDNN, WP_ATTN_NATIVE } wp_attn_impl;

typedef struct {
    wp_backend_kind kind;
    wp_dtype compute;   /* requested compute dtype; the CPU backend always uses WP_F32 */
    int threads;        /* CPU threads for this context (0: all cores) */
    int device;         /* CUDA device ordinal */
    wp_attn_impl attention; /* AUTO: cuDNN's fused attention where built and supported, else ours */
    /* --deterministic false: cuDNN's faster attention backward, whose dK/dV sums run in a varying
     * order. Named so that a zeroed wp_kern_opts stays deterministic (the default). Everything
     * else either backend runs is deterministic regardless: the CPU backend, and our CUDA kernels,
     * which sum without atomics. */
    bool nondeterministic;
} wp_kern_opts;

typedef struct wp_kern wp_kern;

/* NULL with a one-line reason in err when the backend is not built or not usable
 * (e.g. "cuda: no GPU found (cudaGetDeviceCount: ...)"). */
wp_kern *kern_create(const wp_kern_opts *opts, char *err, size_t errlen);
void kern_destroy(wp_kern *k);
bool kern_available(wp_backend_kind kind, char *why, size_t whylen);
/* The devices a backend can open (CUDA: those CUDA_VISIBLE_DEVICES leaves visible; 0 when
 * none or the driver fails); 1 for the CPU. */
int kern_device_count(wp_backend_kind kind);
/* The device a rank opens: requested when >= 0, else its local rank modulo the visible devices
 * (the local rank itself when none are visible: opening it then names the missing device). */
int kern_pick_device(int requested, int local_rank, int visible);
/* What the context chose that a user may want to know, one line each, "" while nothing (e.g.
 * "attention: cuDNN 9.19.0 fused flash attention"); the caller prints it once. */
const char *kern_notes(const wp_kern *k);
/* The device: the GPU's name as CUDA reports it ("NVIDIA H100 80GB HBM3"), or "cpu". */
const char *kern_device_name(const wp_kern *k);
wp_backend_kind kern_kind(const wp_kern *k);
/* Threads a bulk elementwise kernel (convert, accumulate, scale, zero, AdamW) runs n elements
 * on: on the CPU the context's from KERN_BULK_PARALLEL_MIN elements, one below (threads would
 * cost more than they save); 0 on a GPU. weipipe bench reports it beside each phase. */
enum { KERN_BULK_PARALLEL_MIN = 1 << 16 };
int kern_bulk_threads(const wp_kern *k, size_t n);
wp_dtype kern_compute_dtype(const wp_kern *k);
const char *kern_error(const wp_kern *k);   /* NULL when no call has failed */
/* The sticky error as a status: WP_FAILED once a call has failed (the reason in kern_error), else
 * WP_OK; what a caller returns after a run of queued calls (`return kern_status(k);`). */
wp_result kern_status(const wp_kern *k);
void kern_set_error(wp_kern *k, const char *fmt, ...);

/* ---- memory ---- */
void *kern_alloc(wp_kern *k, size_t bytes);          /* zeroed; NULL (and error) on failure */
void kern_free(wp_kern *k, void *p);
/* Bytes of backend memory this context holds now and held at most since it was made: its
 * kern_alloc blocks plus the backend's own scratch and library workspaces (CUDA: device
 * memory, not the driver's context; CPU: the heap blocks kern_alloc made). */
void kern_memory(const wp_kern *k, size_t *now, size_t *peak);
/* A GPU's free and total memory now: 0, or -1 where the backend's memory is the host's. */
int kern_device_free(wp_kern *k, size_t *free_bytes, size_t *total_bytes);
/* Document masks: qlo [b*s] (backend memory, kern_attention_fwd's) now holds host_lo's values
 * (the same, on the host, where src/model/doc_mask.c made them); call it after each write of
 * qlo. A backend that takes documents as a list, not per query, keeps them from here rather
 * than reading qlo back at every attention call: CUDA's cuDNN path (ragged sequences). The CPU
 * needs nothing (no call). */
void kern_attention_docs(wp_kern *k, const int32_t *qlo, const int32_t *host_lo, int b, int s);
/* What the memory is for (docs/memory.md): every allocation is counted under the term current
 * when it is made (kern_mem_term), so the run's table can set each term's measured bytes beside
 * its predicted ones. */
typedef enum {
    WP_MEM_WEIGHTS,  /* weight buffers (W: what circulates, or what a stage keeps) */
    WP_MEM_GRADS,    /* weight-gradient buffers (GW, tied pieces) */
    WP_MEM_OPTIM,    /* the owner's fp32 master, Adam moments and fp32 accumulator */
    WP_MEM_ACTS,     /* activation states kept from F to B (and W) */
    WP_MEM_COMM,     /* stage-boundary activations and their gradients (A, GA) */
    WP_MEM_SCRATCH,  /* the model's and the backend's working memory */
    WP_MEM_LOGITS,   /* the LM head's logits blocks */
    WP_MEM_EVAL,     /* --eval-every: the validation pipeline */
    WP_MEM_SAMPLE,   /* --sample-every: the gathered weights and the decoder */
    WP_MEM_IO,       /* host side: loader, checkpoint writer, token staging */
    WP_MEM_TERMS
} wp_mem_term;
extern const char *const wp_mem_term_name[WP_MEM_TERMS];
/* The CUDA backend's cuBLAS workspace per context (cublasSetWorkspace; cuBLAS's own
 * recommendation for Hopper, also enough for Ampere): kern_memory counts it, and the memory
 * prediction (schedule/memory.c) with it. */
#define WP_CUDA_BLAS_WORKSPACE ((size_t)32 << 20)
/* Set the term of the allocations that follow; returns the one it replaces. */
wp_mem_term kern_mem_term(wp_kern *k, wp_mem_term t);
/* Each term's bytes at the moment the total peaked (at_peak: they sum to kern_memory's peak)
 * and each term's own high-water (own). */
void kern_memory_terms(const wp_kern *k, size_t at_peak[WP_MEM_TERMS], size_t own[WP_MEM_TERMS]);
/* A host allocation made outside kern_alloc (malloc of a staging copy): counted under t on the
 * CPU backend, whose "device" memory is the host's; a GPU's ledger is device memory only. */
void kern_mem_host(wp_kern *k, wp_mem_term t, int64_t delta);
void kern_to_device(wp_kern *k, void *dst, const void *host_src, size_t bytes);
void kern_to_host(wp_kern *k, void *host_dst, const void *src, size_t bytes);
void kern_copy(wp_kern *k, void *dst, const void *src, size_t bytes);
void kern_zero(wp_kern *k, void *p, size_t bytes);
void kern_sync(wp_kern *k);                           /* wait for all queued work */

/* Llama 3.x frequency scaling (rope_scaling type "llama3"; transformers'
 * _compute_llama3_parameters): with wavelength w = 2*pi/f of the plain frequency f and
 * lo = original_max_pos / low_freq_factor, hi = original_max_pos / high_freq_factor,
 * f stays for w < hi, becomes f / factor for w > lo, and in between
 * (1 - a) f / factor + a f with a = (original_max_pos / w - low_freq_factor) /
 * (high_freq_factor - low_freq_factor). factor == 0 means no scaling (the plain entry points). */
typedef struct {
    double factor, low_freq_factor, high_freq_factor, original_max_pos;
} wp_rope_scaling;

/* One piece of kern_adamw_multi: kern_adamw's per-tensor arguments (backend memory; n > 0).
 * first is the piece's place in the launch's index space: the first piece's first, plus the n
 * of the pieces before it (prefix sums: how the CUDA kernel maps its blocks to pieces). */
typedef struct {
    float *master, *m, *v;
    const float *grad;
    void *w_out;
    size_t n, first;
    float weight_decay;
} wp_adamw_piece;

/* ---- compute ops ----
 * One prototype per row of ops_table.h, kern_<name>(wp_kern *k, ...); each op's meaning is
 * documented at its row. The ops whose public form differs (CUSTOM rows) follow. */
#include "ops_table.h"
#define WP_KERN_PUBLIC(ret, name, params, ...) ret kern_##name params;
#define WP_KERN_PUBLIC_CUSTOM(...)
WP_KERN_OPS(WP_KERN_PUBLIC, WP_KERN_PUBLIC_CUSTOM)
#undef WP_KERN_PUBLIC
#undef WP_KERN_PUBLIC_CUSTOM

/* sum of squares in fp64; inf/NaN anywhere makes the result non-finite; NaN when the call cannot
 * run (an error, a NULL x): a norm computed from nothing must not look finite */
double kern_sumsq(wp_kern *k, const void *x, wp_dtype t, size_t n);

/* Rotary embedding in place on x [b*s, nheads*hd], Hugging Face "rotate half" layout:
 * element i < hd/2 pairs with i + hd/2, angle = pos * theta^(-2i/hd), pos = pos0 + position in
 * the sequence. bwd applies the inverse rotation (the transpose). */
void kern_rope_fwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta);
void kern_rope_bwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta);
/* As above with the frequencies scaled (wp_rope_scaling); sc NULL (or factor 0) is the plain
 * RoPE. plo NULL, or [b*s] int32 in backend memory (--doc-positions restart): token t of
 * sequence bi sits at position pos0 + t - plo[bi*s + t], its offset in its document when plo is
 * where the document starts (src/model/doc_mask.c makes it: pos0 + t - plo in [0, pos0 + t]).
 * The backends' rope_fwd / rope_bwd slots take these arguments, sc NULL when unscaled. */
void kern_rope_fwd_scaled(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                          const wp_rope_scaling *sc, const int32_t *plo);
void kern_rope_bwd_scaled(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                          const wp_rope_scaling *sc, const int32_t *plo);

#endif
