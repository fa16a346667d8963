/* The machine at hand, measured on the real ranks (train --calibrate, train --strategy auto):
 * the model's forward and backward on each rank's real backend and thread count at the run's
 * shape (its effective FLOP rate), and every ring hop's latency and bandwidth over the real
 * transport. The figures are what the simulator reads (wp_machine): --device-tflops,
 * --link-bandwidth/--link-latency and, for hops inside a node (--ranks-per-node),
 * --node-link-*. Private to src/runtime. */
#ifndef WP_RUNTIME_CALIBRATE_H
#define WP_RUNTIME_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control.h"
#include "kernels.h"
#include "layout.h"
#include "transport.h"
#include "result.h"

typedef struct {
    double fwd_s, bwd_s;       /* one micro-batch through the whole model, mean over ranks */
    double fwd_flops, bwd_flops;
    double tflops;             /* effective: (forward + backward FLOPs) / (forward + backward time) / 1e12 */
    int threads;               /* CPU threads per rank it ran with */
    int hops_link, hops_node;  /* ring hops measured between nodes / inside a node */
    double link_bw, link_lat;  /* bytes/s and s, mean over the hops between nodes (0: none) */
    double node_bw, node_lat;  /* the same inside a node (0: none) */
    double seconds;            /* how long the calibration took */
} wp_calib;

/* Collective: every rank of the job calls it with the same layout and flags; every rank gets
 * bit-identical figures (summed by the control channel in rank order). ko: the backend as
 * the run opens it (kind, compute dtype, threads, device, attention); t: the data transport
 * (NULL or one rank: no hop). Returns 0, or 1 with the reason. */
wp_result calib_run(const wp_layout *L, int nranks, int ranks_per_node, int rank, const wp_kern_opts *ko, uint64_t seed,
              double timeout, wp_transport *t, wp_control *ctl, wp_calib *c, char *err, size_t errlen);

/* The INI fragment (--config FILE for simulate): the flags, each with the measurement behind it
 * in a comment. Written to FILE.tmp, then renamed. Returns 0 or 1 with the reason. */
wp_result calib_write_ini(const wp_calib *c, const wp_layout *L, int nranks, int ranks_per_node, const char *transport,
                    const char *backend, const char *path, char *err, size_t errlen);

#endif
