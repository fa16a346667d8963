/* Ranges of numeric flags, in one table (issue 31): a value beyond them did not fail but hung
 * or crashed far from the flag (--threads 100000 segfaulted in libgomp, --timeout 1e30s made
 * every rank spin, deaf to SIGTERM, --device-tflops 1e-30 never finished step 1). Issue 42:
 * every numeric flag is in it (--peak-tflops -1 was accepted), tests/cli checks that none is
 * missing. The ranges are outer bounds of sense; every value also keeps the checks its adapter
 * makes (below the layer count, a head count dividing the width, ...). */
#include "flag_bounds.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define DAY_S 86400.0
#define I32 2147483647.0
#define MANY 1e15 /* steps and intervals: more than any run makes, far below int64 */

typedef enum { B_RANGE, B_CORES_X4, B_ANY } bound_kind;

typedef struct {
    int flag;
    bound_kind kind;
    double lo, hi;      /* B_RANGE: [lo, hi], or (lo, hi] / [lo, hi) with lo_open / hi_open */
    bool lo_open, hi_open;
    bool except;        /* the value `special` keeps its own meaning outside the range */
    double special;     /* (0: unlimited, automatic; -1: none given) */
    const char *unit;   /* how the bound is printed */
} flag_bound;

#define R(f, lo, hi, unit) {FLAG_##f, B_RANGE, lo, hi, false, false, false, 0, unit}
#define R0(f, lo, hi, unit) {FLAG_##f, B_RANGE, lo, hi, false, false, true, 0, unit}   /* 0 also */
#define RM1(f, lo, hi, unit) {FLAG_##f, B_RANGE, lo, hi, false, false, true, -1, unit} /* -1 also */
#define ANY(f) {FLAG_##f, B_ANY, 0, 0, false, false, false, 0, ""}
/* TIME flags: (0 allowed) at most a day */
#define DAY(f) R(f, 0, DAY_S, " s (a day)")

static const flag_bound bounds[] = {
    /* model */
    R(num_layers, 1, 100000, ""),
    R(hidden_size, 1, 1 << 24, ""),
    R0(ffn_hidden_size, 1, 1 << 26, ""),
    R(num_attention_heads, 1, 1 << 20, ""),
    R0(num_query_groups, 1, 1 << 20, ""),
    R(seq_length, 1, I32, " tokens"),
    R(micro_batch_size, 1, I32, ""),
    R(vocab_size, 2, I32, ""),
    R(rope_theta, 1e-3, 1e15, ""),
    R0(rope_scaling_factor, 1e-3, 1e6, ""),
    R(rope_low_freq_factor, 1e-6, 1e6, ""),
    R(rope_high_freq_factor, 1e-6, 1e6, ""),
    R(rope_original_max_positions, 1, I32, ""),
    RM1(bos_token_id, 0, I32 - 1, ""),
    RM1(eos_token_id, 0, I32 - 1, ""),
    R0(doc_length_mean, 1, 1 << 30, " tokens"),
    RM1(doc_boundary_id, 0, I32 - 1, ""), /* below the vocabulary: model_cfg_from_opts, which knows it */
    R(max_position_embeddings, 0, I32, ""),
    R(norm_eps, 1e-30, 1, ""),
    R(init_std, 0, 3.4e38, ""), /* any float (runtime/metrics overflows the logits with 1e38 on purpose) */
    R(num_chunks, 0, 1 << 20, ""),
    RM1(device, 0, I32, ""),
    {FLAG_threads, B_CORES_X4, 0, 0, false, false, true, 0, ""},
    /* pipeline */
    R(nranks, 1, 1 << 20, ""),
    R(num_microbatches, 0, 1 << 30, ""),
    R(seq_segments, 1, 1 << 20, ""),
    /* training */
    R(steps, 1, MANY, ""),
    ANY(seed),
    R(lr, 0, 1e3, ""),
    RM1(min_lr, 0, 1e3, ""),
    R(warmup_steps, 0, MANY, ""),
    {FLAG_adam_beta1, B_RANGE, 0, 1, false, true, false, 0, ""}, /* 1 would divide by 1 - 1^t = 0 */
    {FLAG_adam_beta2, B_RANGE, 0, 1, false, true, false, 0, ""},
    R(adam_eps, 1e-30, 1, ""),
    R(weight_decay, 0, 100, ""),
    R(clip_grad, 0, 1e30, ""),
    R(loss_scale, 1, 1e38, ""), /* fp32 holds the scaled loss */
    R(loss_scale_window, 1, MANY, " steps"),
    R(max_skipped_steps, 0, MANY, " steps"),
    R(save_every, 0, MANY, " steps"),
    R(keep_last, 0, 1 << 20, ""),
    R(eval_every, 0, MANY, " steps"),
    R(eval_batches, 1, I32, ""),
    R(batches, 1, I32, ""),
    R(val_fraction, 0, 1, ""),
    R(sample_every, 0, MANY, " steps"),
    R(sample_tokens, 1, I32, ""),
    /* sample */
    R(max_new_tokens, 0, I32, ""),
    /* a temperature below 1e-6 multiplies logits past what float softmax holds; 0 = greedy */
    R0(temperature, 1e-6, 1e6, ""),
    R(top_k, 0, I32, ""),
    {FLAG_top_p, B_RANGE, 0, 1, true, false, false, 0, ""},
    /* transports and launch */
    R(tcp_streams, 1, 64, ""),
    DAY(connect_timeout),
    DAY(timeout),
    R(ib_port, 1, 255, ""),
    R(ib_gid_index, 0, 255, ""),
    /* links and devices; a device slower than 1 GFLOP/s would take hours for a step of the
     * tiny model, a link below 1 kByte/s hours for one of its chunks */
    R0(link_bandwidth, 1e3, 1e15, " bytes/s"),
    DAY(link_latency),
    R(ranks_per_node, 0, 1 << 20, ""),
    R0(node_link_bandwidth, 1e3, 1e15, " bytes/s"),
    DAY(node_link_latency),
    R0(device_tflops, 1e-6, 1e6, " TFLOP/s"), /* 1 MFLOP/s: a sanitized build calibrates at 0.7 GFLOP/s */
    R0(peak_tflops, 1e-6, 1e6, " TFLOP/s"),
    R(device_memory, 0, 9.2e18, " bytes"),
    R(host_memory, 0, 9.2e18, " bytes"),
    R(device_mem_bandwidth, 1e3, 1e15, " bytes/s"),
    R0(host_link_bandwidth, 1e3, 1e15, " bytes/s"),
    R0(host_memory_bandwidth, 1e3, 1e15, " bytes/s"),
    /* export */
    R(max_shard_size, 1, 9.2e18, " bytes"),
};

static const flag_bound *bound_of(int flag) {
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++)
        if (bounds[i].flag == flag) return &bounds[i];
    return NULL;
}

bool cli_flag_bounded(int flag) { return bound_of(flag) != NULL; }

/* The range as printed, e.g. "[1e-06, 1e+06] TFLOP/s (or 0)"; lo, hi set. */
static void range_text(const flag_bound *b, double *lo, double *hi, char *range, size_t rangelen) {
    *lo = b->lo;
    *hi = b->hi;
    if (b->kind == B_CORES_X4) {
        /* more threads than 4 per core only adds switching, and libgomp crashes near 10^5 */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        *lo = 1;
        *hi = 4.0 * (double)(cores > 0 ? cores : 1);
        snprintf(range, rangelen, "[1, %.0f] (4 x the %ld cores here; 0 = automatic)", *hi, cores > 0 ? cores : 1);
        return;
    }
    char also[32] = "";
    if (b->except) snprintf(also, sizeof also, " (or %g)", b->special);
    snprintf(range, rangelen, "%c%.10g, %.10g%c%s%s", b->lo_open ? '(' : '[', b->lo, b->hi, b->hi_open ? ')' : ']', b->unit,
             also);
}

wp_result cli_check_bound(int flag, wp_flag_type type, const void *field, const char *name, const char *where, char *err,
                    size_t errlen) {
    double v;
    switch (type) {
    case FT_INT: v = (double)*(const int64_t *)field; break;
    case FT_SIZE: v = (double)*(const int64_t *)field; break;
    case FT_NUM:
    case FT_RATE:
    case FT_TIME: v = *(const double *)field; break;
    default: return 0;
    }
    const flag_bound *b = bound_of(flag);
    if (!b || b->kind == B_ANY || (b->except && v == b->special)) return 0;
    double lo, hi;
    char range[128];
    range_text(b, &lo, &hi, range, sizeof range);
    bool low = b->lo_open ? !(v > lo) : !(v >= lo), high = b->hi_open ? !(v < hi) : !(v <= hi);
    if (low || high || !isfinite(v))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s--%s: %.10g is %s: the range is %s", where, name, v,
                       low && v > 0 && v < lo ? "too small" : "out of range", range);
    return 0;
}
