/* Calibration on the real ranks (calibrate.h): compute first, then the links, each phase
 * entered by every rank together so that what one measures shares the machine the way the run
 * will (every rank computing at once on its share of the cores; every hop carrying at once). */
#include "calibrate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fsutil.h"
#include "kernels.h"
#include "whole.h"

#define CAL_COMPUTE_SECONDS 1.0 /* timed model iterations take about this long (3..20 of them) */
#define CAL_MIN_ITERS 3
#define CAL_MAX_ITERS 20
#define CAL_LAT_ROUNDS 100     /* small messages around the ring, after CAL_LAT_WARM unmeasured */
#define CAL_LAT_WARM 10
#define CAL_BW_BYTES ((size_t)8 << 20) /* large enough that latency is a small part on a fast link */
#define CAL_BW_ROUNDS 4        /* after one unmeasured */

static wp_result fail(char *err, size_t errlen, const char *what, const char *why) { return wp_fail(WP_FAILED, err, errlen, "calibration: %s: %s", what, why ? why : "failed"); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* This rank's median forward and backward times of one micro-batch through the whole model.
 * The iteration count is agreed (from the slowest warm-up) so that every rank computes for the
 * same stretch and none measures a machine the others have already left. */
static wp_result time_compute(const wp_layout *L, const wp_kern_opts *ko, uint64_t seed, wp_control *ctl, double *fwd_s,
                        double *bwd_s, char *err, size_t errlen) {
    char why[512] = "";
    wp_kern *k = kern_create(ko, why, sizeof why);
    wp_whole *W = k ? whole_create(L, k, WP_F32, why, sizeof why) : NULL;
    double f[CAL_MAX_ITERS], b[CAL_MAX_ITERS], warm[2] = {0, 0};
    int rc = W && whole_load_random(W, seed, why, sizeof why) == 0 &&
                     whole_time_step(W, &warm[0], &warm[1], NULL) == 0
                 ? 0
                 : 1;
    if (rc && k && kern_error(k)) snprintf(why, sizeof why, "%s", kern_error(k));
    /* every rank reaches the collective, failed or not: the others would wait in it */
    double v[2] = {rc ? 1.0 : 0.0, warm[0] + warm[1]};
    if (ctl_allreduce(ctl, CTL_MAX, v, 2, err, errlen)) rc = 2;
    int iters = v[1] > 0 ? (int)(CAL_COMPUTE_SECONDS / v[1]) : CAL_MAX_ITERS;
    iters = iters < CAL_MIN_ITERS ? CAL_MIN_ITERS : iters > CAL_MAX_ITERS ? CAL_MAX_ITERS : iters;
    for (int i = 0; rc == 0 && v[0] == 0 && i < iters; i++)
        if (whole_time_step(W, &f[i], &b[i], NULL) != 0) {
            snprintf(why, sizeof why, "%s", kern_error(k) ? kern_error(k) : "kernel failure");
            rc = 1;
        }
    if (rc == 0 && v[0] == 0) {
        /* the median: one preemption on a shared machine does not move it */
        qsort(f, (size_t)iters, sizeof *f, cmp_double);
        qsort(b, (size_t)iters, sizeof *b, cmp_double);
        *fwd_s = f[iters / 2];
        *bwd_s = b[iters / 2];
    }
    whole_destroy(W);
    if (k) kern_destroy(k);
    if (rc == 2) return 1;
    if (rc) return fail(err, errlen, "timing the model", why);
    if (v[0] != 0) return snprintf(err, errlen, "calibration: another rank failed to time the model"), 1;
    return 0;
}

/* One round around the ring: send bytes to the next rank and receive as many from the previous
 * one, every rank at once (as a weight-passing schedule's hops carry). */
static wp_result ring_round(wp_transport *t, int rank, int n, void *sbuf, void *rbuf, size_t bytes, double timeout,
                      char *err, size_t errlen) {
    wp_request *rq = NULL, *sq = NULL;
    int rc = tp_post_recv(t, (rank + n - 1) % n, WP_CH_WFWD, rbuf, bytes, "calibrate", &rq, err, errlen);
    if (!rc) rc = tp_post_send(t, (rank + 1) % n, WP_CH_WFWD, sbuf, bytes, "calibrate", &sq, err, errlen);
    if (!rc) rc = tp_wait(&sq, timeout, err, errlen);
    if (!rc) rc = tp_wait(&rq, timeout, err, errlen);
    if (rc) { /* a posted request still refers to our buffers: fail the transport, then let go of them */
        char ignored[256];
        tp_abort(t, err);
        tp_wait(&sq, timeout, ignored, sizeof ignored);
        tp_wait(&rq, timeout, ignored, sizeof ignored);
    }
    return rc;
}

/* This rank's incoming hop (from rank - 1): one-way latency from small rounds, bandwidth from
 * large ones (their time less that latency). */
static wp_result time_hop(wp_transport *t, int rank, int n, double timeout, double *lat, double *bw, char *err,
                    size_t errlen) {
    char *buf = malloc(2 * CAL_BW_BYTES);
    if (!buf) return snprintf(err, errlen, "calibration: out of memory for %zu bytes", 2 * CAL_BW_BYTES), 1;
    memset(buf, 1, 2 * CAL_BW_BYTES);
    int rc = tp_connect_ring(t, err, errlen);
    double t0 = 0;
    for (int i = 0; rc == 0 && i < CAL_LAT_WARM + CAL_LAT_ROUNDS; i++) {
        if (i == CAL_LAT_WARM) t0 = wp_now();
        rc = ring_round(t, rank, n, buf, buf + CAL_BW_BYTES, 8, timeout, err, errlen);
    }
    *lat = (wp_now() - t0) / CAL_LAT_ROUNDS;
    for (int i = 0; rc == 0 && i < 1 + CAL_BW_ROUNDS; i++) {
        if (i == 1) t0 = wp_now();
        rc = ring_round(t, rank, n, buf, buf + CAL_BW_BYTES, CAL_BW_BYTES, timeout, err, errlen);
    }
    double per = (wp_now() - t0) / CAL_BW_ROUNDS;
    *bw = (double)CAL_BW_BYTES / (per > 2 * *lat ? per - *lat : per);
    free(buf);
    return rc;
}

wp_result calib_run(const wp_layout *L, int nranks, int ranks_per_node, int rank, const wp_kern_opts *ko, uint64_t seed, double timeout, wp_transport *t, wp_control *ctl, wp_calib *c, char *err,
              size_t errlen) {
    memset(c, 0, sizeof *c);
    const double start = wp_now();
    double fwd = 0, bwd = 0, lat = 0, bw = 0;
    if (time_compute(L, ko, seed, ctl, &fwd, &bwd, err, errlen)) return 1;
    if (nranks > 1 && t && time_hop(t, rank, nranks, timeout, &lat, &bw, err, errlen)) return 1;
    /* the hop from rank - 1 to rank: inside a node when --ranks-per-node puts both on one (0:
     * one rank per node, every hop between nodes) */
    const int prev = (rank + nranks - 1) % nranks;
    const bool inside = ranks_per_node > 0 && prev / ranks_per_node == rank / ranks_per_node;
    double v[8] = {fwd, bwd};
    if (nranks > 1) {
        v[inside ? 5 : 2] = lat, v[inside ? 6 : 3] = bw, v[inside ? 7 : 4] = 1;
    }
    if (ctl_allreduce(ctl, CTL_SUM, v, 8, err, errlen)) return 1;
    c->fwd_s = v[0] / nranks;
    c->bwd_s = v[1] / nranks;
    /* the timed steps' random tokens hold (almost) no document boundaries: their attention is
     * the unmasked one, so the rate is the unmasked FLOPs' (a run's masked share is charged by
     * the simulator, not hidden in a lower rate) */
    wp_layout unmasked = *L;
    unmasked.cfg.attn_share = 1.0;
    for (int k = 0; k < L->cfg.n_chunks; k++) {
        wp_flops f = layout_chunk_flops(&unmasked, k);
        c->fwd_flops += f.fwd;
        c->bwd_flops += f.bwd_input + f.bwd_weight;
    }
    c->tflops = (c->fwd_flops + c->bwd_flops) / (c->fwd_s + c->bwd_s) / 1e12;
    c->threads = ko->threads;
    c->hops_link = (int)v[4];
    c->hops_node = (int)v[7];
    if (c->hops_link) c->link_lat = v[2] / v[4], c->link_bw = v[3] / v[4];
    if (c->hops_node) c->node_lat = v[5] / v[7], c->node_bw = v[6] / v[7];
    c->seconds = wp_now() - start;
    if (!(c->tflops > 0 && isfinite(c->tflops)))
        return snprintf(err, errlen, "calibration: the model's time (%g s) gives no FLOP rate", c->fwd_s + c->bwd_s), 1;
    return 0;
}

wp_result calib_write_ini(const wp_calib *c, const wp_layout *L, int nranks, int ranks_per_node, const char *transport,
                    const char *backend, const char *path, char *err, size_t errlen) {
    char tmp[4200], why[512];
    int fd;
    /* a new file beside PATH that no one else holds: a user's PATH.tmp is never truncated */
    if (fs_create_beside(path, ".tmp", false, tmp, sizeof tmp, &fd, why, sizeof why))
        return snprintf(err, errlen, "--calibrate %s: %s", path, why), 1;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        remove(tmp);
        return snprintf(err, errlen, "--calibrate %s: cannot open %s", path, tmp), 1;
    }
    const wp_model_cfg *m = &L->cfg;
    time_t now = time(NULL);
    char when[64] = "";
    struct tm tmv;
    if (gmtime_r(&now, &tmv)) strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tmv);
    fprintf(f, "# weipipe train --calibrate, %s: %d rank%s over %s, %s backend, %d thread%s per rank, %.2f s\n", when,
            nranks, nranks == 1 ? "" : "s", transport, backend, c->threads, c->threads == 1 ? "" : "s", c->seconds);
    fprintf(f, "# model: %d layers, h %d, ffn %d, s %d, b %d, V %d, %d chunk%s, %s precision\n", m->n_layers, m->h, m->ffn,
            m->seq, m->micro_batch, m->vocab, m->n_chunks, m->n_chunks == 1 ? "" : "s", precision_name(m->precision));
    fprintf(f, "# one micro-batch, whole model, median over the ranks' runs: forward %.4g ms (%.4g TFLOP/s), "
               "backward %.4g ms (%.4g TFLOP/s)\n", 1e3 * c->fwd_s, c->fwd_flops / c->fwd_s / 1e12, 1e3 * c->bwd_s,
            c->bwd_flops / c->bwd_s / 1e12);
    fprintf(f, "# the simulator has one rate for every op (wp_machine): the effective one of forward + backward\n");
    fprintf(f, "[machine]\ndevice-tflops = %.6g\n", c->tflops);
    if (c->hops_link)
        fprintf(f, "# %d hop%s between nodes (every rank to the next at once, %zu-byte and 8-byte messages)\n"
                   "link-bandwidth = %.6gByte\nlink-latency = %.6gs\n",
                c->hops_link, c->hops_link == 1 ? "" : "s", CAL_BW_BYTES, c->link_bw, c->link_lat);
    if (c->hops_node)
        fprintf(f, "# %d hop%s inside a node (--ranks-per-node %d)\nnode-link-bandwidth = %.6gByte\nnode-link-latency = %.6gs\n",
                c->hops_node, c->hops_node == 1 ? "" : "s", ranks_per_node, c->node_bw, c->node_lat);
    if (!c->hops_link && !c->hops_node) fprintf(f, "# one rank: no link measured\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        remove(tmp);
        return snprintf(err, errlen, "--calibrate %s: writing %s failed", path, tmp), 1;
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return snprintf(err, errlen, "--calibrate %s: cannot rename %s onto it", path, tmp), 1;
    }
    return 0;
}
