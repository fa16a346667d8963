/* --strategy auto: every strategy and knob setting simulated on the model, ring and machine the
 * flags describe, at the same tokens per step (b*M), and ranked (issue 18). A knob is a flag:
 * micro-batch size b with M = tokens per step / (b s) (b over the powers of two that divide b*M,
 * and the given b), --chunk-layers auto beside even chunks (where they differ), --warmup-extra
 * 0..2 where there is a slow hop (1f1b, zb-h1, zb-h2, seq1f1b), --seq-segments 2, 4, 8
 * (seq1f1b), --wzb2-owner spread/last, --num-chunks 2N and 4N with --i1f1b-order depth-first and
 * breadth-first (interleaved-1f1b), --optimizer-memory device and host (every strategy: all have
 * owners; device first, so host is taken only where it fits alone or simulates faster). A shape
 * a strategy cannot lay out is no configuration. */
#ifndef WP_CLI_AUTOTUNE_H
#define WP_CLI_AUTOTUNE_H

#include "adapters.h"

/* The knobs a configuration sets (wp_knobs.given); the others keep the flags' values. */
enum {
    WP_KNOB_SPLIT = 1 << 0,        /* --chunk-layers even or auto */
    WP_KNOB_WARMUP = 1 << 1,       /* --warmup-extra */
    WP_KNOB_SEQ_SEGMENTS = 1 << 2, /* --seq-segments */
    WP_KNOB_WZB2_OWNER = 1 << 3,   /* --wzb2-owner */
    WP_KNOB_NUM_CHUNKS = 1 << 4,   /* --num-chunks */
    WP_KNOB_I1F1B_ORDER = 1 << 5,  /* --i1f1b-order */
    WP_KNOB_OPTIM_MEMORY = 1 << 6, /* --optimizer-memory */
};

/* One configuration, as typed values: a strategy and its knobs (b and M always). */
typedef struct {
    wp_strategy st;
    int b, nmb, warmup;  /* b, M and the extra warm-up it runs with (given or not: the baseline row is 1f1b at the
                          * given b, M and warm-up) */
    bool chunk_auto;     /* chunks balanced by FLOPs (WP_KNOB_SPLIT; else even) */
    int seq_segments, num_chunks;
    wp_wzb2_owner wzb2_owner;
    wp_i1f1b_order i1f1b_order;
    wp_optim_memory optim_memory; /* device first: a tie keeps the state on the device */
    unsigned given;      /* WP_KNOB_* */
} wp_knobs;

typedef struct {
    wp_knobs k;
    char knobs[240];  /* k as the flags that make it, for people: "--micro-batch-size 2 --num-microbatches 16 --warmup-extra 1" */
    int seq;          /* enumeration order (ties) */
    bool fits;        /* within --device-memory per rank and --host-memory per host (0: always) */
    unsigned over;    /* sim.h's WP_OVER_*: what it does not fit, 0 when it fits */
    double step_s, tokens_s, bubble;
    size_t sent, peak;
    size_t host;      /* --optimizer-memory host: host memory per rank (memory.h, wp_mem_host) */
    size_t host_need; /* the most one host holds (sim.h: sim_host_need) */
} wp_tuned;

/* Simulate every configuration; *rows (caller frees) sorted: those that fit by tokens/s, best
 * first, then those that do not fit, by tokens/s. Ties keep the enumeration order. 0; 2 with a
 * reason for bad flags (nothing to simulate: a device speed is needed); 1 when a schedule breaks
 * an invariant or memory runs out. */
wp_result autotune(const wp_opts *o, wp_tuned **rows, int *n, char *err, size_t errlen);

/* As autotune, but the knobs whose flags are set in o (o->set: the command line or a config
 * file) keep their values: --micro-batch-size or --num-microbatches (b and M together, the
 * tokens per step being kept anyway), --chunk-layers, --warmup-extra, --seq-segments,
 * --wzb2-owner, --num-chunks, --i1f1b-order. A held knob is not in a row's knobs string. What
 * train --strategy auto searches: the user's fixed flags constrain it. */
wp_result autotune_held(const wp_opts *o, wp_tuned **rows, int *n, char *err, size_t errlen);

/* o as if k's flags were given (marked set): the typed fields take k's strategy, b, M and the
 * knobs it sets; --chunk-layers and --warmup-extra, free-form text flags, take their spelling of
 * k's split and warm-up, so the run's recorded flags (metrics, the manifest) say what runs. The
 * search itself hands those two to the adapters as values (layout_split_from_opts, the
 * wp_gen_opts) and writes no flag text. */
void autotune_apply(wp_opts *o, const wp_knobs *k);

#endif
