/* The simulator: the schedule engine (engine.h) with costs, i.e. a discrete-event run of the very lists the
 * runtime executes, under the same transfer semantics.
 *
 * Cost model
 *   - Compute: layout_chunk_flops / device FLOP/s. F = fwd; B = bwd_input (+ fwd with
 *     --recompute, the forward redone inside B); W = bwd_weight; BW = B + W. Or measured per-op
 *     times (costs_set_measured), which is how the runtime feeds its own timings back.
 *   - --optimizer-memory host (engine.h costs.host, engine_host.c): LOAD, ACC and UPDATE leave the
 *     device stream for the rank's share (1 / ranks per node) of its host's memory bandwidth and,
 *     per direction, of its host link; byte counts beside WP_HOST_LOAD_BYTES below.
 *   - Memory-bound ops at the device memory bandwidth: UPDATE reads master, moments and
 *     accumulator and writes master and moments and zeroes the accumulator (32 bytes/param);
 *     LOAD reads the fp32 master and writes the wire copy (4 + weight bytes); ACC reads the bf16
 *     gradient, updates the fp32 accumulator and zeroes the gradient (2*grad bytes + 8); ZERO
 *     writes the gradient (grad bytes).
 *   - Links: ranks 0..N-1 in ring order, ranks_per_node consecutive ranks per node (so the ring
 *     crosses between nodes as few times as possible: once per node). A hop inside a node uses
 *     the node link, between nodes the link. Each direction of each (src, dst) pair is one link;
 *     transfers on it at the same time share its bandwidth equally (the ring transport sends the
 *     frames of its channels round robin: ring/link_model.h); a transfer arrives latency after its last
 *     byte left. With ranks_per_node G > 0 and N > G, the link between nodes is instead one NIC
 *     per direction per node (link_bw each): the transfers leaving a node share its egress NIC,
 *     those entering one its ingress NIC, max-min fair, re-shared whenever one starts or ends;
 *     inside a node the pairs stay as above. With ranks_per_node 0 nothing is shared.
 *   - REDUCE: 2*ceil(log2 N) one-way latencies of the slowest link after the last rank arrives
 *     (a tree all-reduce of two scalars on the control connections).
 *   - Unit model (no device speed given): F = B = W = 1, BW = 2, memory-bound ops free, every
 *     transfer `xfer` units: for drawings and closed-form checks.
 * Results: step time (the period of the second of two consecutive steps, so that strategies that
 * carry state across steps are measured in steady state), tokens/s, bubble per rank and overall
 * (1 - F/B/W compute time / step time), bytes per rank per step, and peak memory per rank: buffers
 * and activation states at their peak plus the owner's 16 bytes/param (fp32 master, two Adam
 * moments, fp32 gradient accumulator). */
#ifndef WP_SCHEDULE_SIM_H
#define WP_SCHEDULE_SIM_H

#include "engine.h"
#include "memory.h"
#include "result.h"

typedef struct {
    double flops;    /* device FLOP/s, > 0 (costs_unit is the model without a device speed) */
    double mem_bw;   /* bytes/s for memory-bound ops; 0 = free */
    int ranks_per_node;
    double link_bw, link_lat, node_bw, node_lat; /* bytes/s (0 = unlimited), s */
    bool host_optim;     /* --optimizer-memory host: owner state in host memory (engine.h costs.host) */
    double host_link_bw; /* bytes/s per direction between a host and its devices, shared by its ranks; 0 = unlimited */
    double host_mem_bw;  /* bytes/s of the host's memory for the CPU's part, shared by its ranks; 0 = free */
} wp_machine;

#define WP_UPDATE_BYTES_PER_PARAM 32
/* The host's part with --optimizer-memory host, bytes per parameter: UPDATE as on the device
 * (AdamW reads master, m, v and the fp32 accumulator, writes master, m, v: 16 + 12, and zeroes
 * the accumulator: 4); LOAD's CPU part reads the fp32 master and writes the wire copy into
 * pinned staging (4 + weight bytes), its copy up moves the weight bytes; ACC's copy down moves
 * the grad bytes, its CPU part reads them and reads and writes the fp32 accumulator (grad + 8). */
#define WP_HOST_LOAD_BYTES(w) (4 + (w))
#define WP_HOST_ACC_BYTES(g) ((g) + 8)

void costs_from_layout(wp_costs *c, const wp_layout *L, int nranks, const wp_machine *m);
void costs_unit(wp_costs *c, int nchunks, double xfer);
/* Measured times of one micro-batch through chunk c: sets F, B, W and BW = B + W. */
void costs_set_measured(wp_costs *c, int chunk, double f, double b, double w);

typedef struct {
    double step_s, tokens_per_s, bubble;
    double *rank_bubble;        /* [N] */
    size_t *rank_peak;          /* [N] peak bytes including owner state */
    size_t *rank_sent;          /* [N] bytes sent per step */
    size_t *rank_host;          /* [N] host memory for the optimizer (memory.h: mem_predict_host), 0 on the device */
    size_t max_sent, max_recv, max_peak, max_host;
    wp_run run;                 /* events of both steps when recorded */
} wp_sim;

/* L may be NULL only with the unit model (no bytes then). Returns 0, or 1 with the reason in err
 * (the lists break an invariant, naming where, or memory ran out). Free with sim_free. */
/* simulate_mem: rank_peak is memory.h's prediction for the run mc describes (simulate: the
 * precision's compute dtype on a GPU, no evaluation or sampling). */
wp_result simulate_mem(const wp_schedule *s, const wp_layout *L, const wp_costs *c, const wp_mem_cfg *mc, bool record, wp_sim *out,
                 char *err, size_t errlen);
wp_result simulate(const wp_schedule *s, const wp_layout *L, const wp_costs *c, bool record, wp_sim *out, char *err,
             size_t errlen);
void sim_free(wp_sim *out);

/* Memory a simulated run needs of the machine (docs/memory.md), from its per-rank figures:
 * device: the largest rank's peak, plus its host column on the CPU backend (cpu: the device is
 *         the host, so host state saves nothing there);
 * host:   the largest sum over the ranks of one host (rank r on host r / per, per =
 *         ranks_per_node, at most nranks; 0 = one rank per host, as the links and costs count
 *         them) of each rank's host column (--optimizer-memory host: masters, moments,
 *         accumulator and pinned staging), plus its peak on the CPU backend. */
size_t sim_device_need(const wp_sim *sim, int nranks, bool cpu);
size_t sim_host_need(const wp_sim *sim, int nranks, int ranks_per_node, bool cpu);
/* What the run is over: WP_OVER_DEVICE when sim_device_need exceeds device_memory,
 * WP_OVER_HOST when sim_host_need exceeds host_memory (bytes; 0 = unlimited); 0 = it fits. */
enum { WP_OVER_DEVICE = 1, WP_OVER_HOST = 2 };
unsigned sim_over(const wp_sim *sim, int nranks, int ranks_per_node, bool cpu, double device_memory, double host_memory);
/* "device", "host", "device and host" for a nonzero sim_over; "" for 0. */
const char *sim_over_name(unsigned over);

#endif
