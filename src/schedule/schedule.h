/* Schedule generators: one pure function per strategy, (N, M, C) -> IR (ir.h); the strategies and
 * their generators are the rows of strategies.def (strategy.h: names, traits, default chunks).
 *
 * Accepted shapes (anything else is bad input, return code 2 with a one-line reason):
 *   - N >= 1 ranks, M >= 1 micro-batches per step.
 *   - C = N chunks (one per rank) for every strategy but interleaved-1f1b: the stream layouts
 *     below are built for one chunk per ring position; finer chunking (C = kN) would need a second
 *     lap per turn. interleaved-1f1b: C = vN, v >= 1 chunks per rank (v = 1 is plain 1F1B).
 *     zb-v: C = 2N (the two legs of its V).
 *   - 1f1b, gpipe, zb-h1, zb-h2, zb-v: any M (activation passing: a rank runs every micro-batch).
 *     interleaved-1f1b: any M breadth-first; depth-first M a multiple of N (Megatron's groups of
 *     N micro-batches per chunk). weipipe-*, wzb*: M a multiple of N (each rank runs M/N whole
 *     micro-batches, as in the authors' code). fsdp: M a multiple of N (M/N per rank), and any
 *     C >= 1 (a chunk is the unit one all-gather moves; C = N by default). weipipe-hier: G
 *     (wp_gen_opts.ranks_per_node) dividing N, C = G chunks, M a multiple of N. tawpipe: G
 *     dividing N, C = N, M a multiple of N.
 * Ownership (owner[c]: fp32 master, AdamW state and the fp32 gradient accumulator):
 *   - 1f1b, gpipe, interleaved-1f1b, zb-h1, zb-h2: rank c mod N owns chunk c (weights never
 *     move; act_build.h). zb-v: chunk c on rank c for c < N, else on rank 2N-1-c (the V).
 *   - weipipe-naive, weipipe-interleave, wzb1: owner[c] = (N - c) mod N, the rank that holds
 *     chunk c in the forward stream at turn 0, so a step starts without a transfer.
 *   - wzb2: the same spread by default, or every chunk on rank N-1 (the paper's) with
 *     wp_gen_opts.wzb2_owner_last.
 *   - tawpipe: chunk i on rank (i mod K)*G + i/K (K = N/G nodes): consecutive chunks cycle
 *     through the nodes (gen_tawpipe.c).
 *   - fsdp, weipipe-hier: sliced (ir.h): rank k owns slice k of every chunk; one rank owns every
 *     chunk whole. */
#ifndef WP_SCHEDULE_H
#define WP_SCHEDULE_H

#include "ir.h"
#include "result.h"

typedef struct {
    bool wzb2_owner_last; /* wzb2: the last rank owns, updates and stages every chunk */
    bool i1f1b_breadth_first; /* interleaved-1f1b: breadth-first loop order (else depth-first) */
    int seq_segments; /* seq1f1b: segments k per micro-batch; 0 = WP_SEQ1F1B_DEFAULT_SEGMENTS */
    /* Extra warm-up before a slow hop (1f1b, zb-h1, zb-h2, seq1f1b; not gpipe nor
     * interleaved-1f1b: gen_common.c says why). A slow hop is a node boundary, after rank q with
     * (q+1) mod ranks_per_node = 0. Rank r runs warmup_extra more warm-up forwards than the
     * textbook count for every slow hop downstream of it (capped at its micro-batches), so the
     * round trip over the slow link overlaps forwards instead of sitting on the critical path
     * once per micro-batch. Every rank upstream takes the same extra, so a rank never runs more
     * warm-up forwards than the rank feeding it (which would wait for a backward in a circle).
     * Headline (configs/paper-h4096-s16k.ini, b = 1): 1f1b 37815 -> 41483 tokens/s at 1.
     * 0 = the textbook schedule; ranks_per_node 0 (or >= N) = no slow hop. */
    int warmup_extra;
    /* warmup_extra is --warmup-extra auto's choice: it applies to 1f1b and seq1f1b only (zb-h1,
     * zb-h2 measured slower with it: gen_common.c); an explicit count applies as given. */
    bool warmup_auto;
    int ranks_per_node; /* also weipipe-hier, tawpipe: G ranks per node (0 = all ranks on one node) */
} wp_gen_opts;

#define WP_1F1B_MAX_WARMUP_EXTRA 3 /* more is bad input for 1f1b (gen_1f1b.c says why) */

/* Extra warm-up forwards of rank r (the rule above). */
int gen_warmup_extra(const wp_gen_opts *opt, wp_strategy s, int nranks, int r);

#define WP_SEQ1F1B_DEFAULT_SEGMENTS 2

/* Fill *out (caller frees with sched_free on success). Returns 0; 2 for bad input (err says what
 * would be valid); 1 when building fails (out of memory, or an internal inconsistency). */
wp_result schedule_generate(wp_strategy s, int nranks, int nmb, int nchunks, const wp_gen_opts *opt, wp_schedule *out,
                      char *err, size_t errlen);

/* Tied word embeddings (ir.h: T buffers, TOUT, TIN; tie.c): when L ties the head to the
 * embedding, add to every rank's list the pieces that carry the head's gradient to the
 * embedding's accumulator before REDUCE and the updated embedding to the head's master before the
 * last chunk's next LOAD. Nothing when L is untied, or when one owner holds the one chunk whole
 * (the optimizer folds that tie, optim.h). 0, or 1 with a reason. Call after schedule_generate
 * wherever a tied model's schedule runs, is validated or simulated. */
wp_result schedule_tie(wp_schedule *s, const wp_layout *L, char *err, size_t errlen);

/* The shape check alone (2 with a reason, or 0). */
wp_result schedule_check_shape(wp_strategy s, int nranks, int nmb, int nchunks, char *err, size_t errlen);

#endif
