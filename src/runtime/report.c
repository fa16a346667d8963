/* Progress, metrics and the end-of-run summary of train (report.h). */
#include "report.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ring/clock.h"
#include "schedule/exec.h"

static void progress_line(const train_job *j, int64_t step, double lr, const rt_step_stats *st, double elapsed,
                          double tok_s) {
    if (j->o.quiet) return;
    int64_t done = step + 1 - j->start_step, left = j->o.steps - step - 1;
    double eta = done > 0 ? elapsed / (double)done * (double)left : 0;
    bool tty = isatty(STDERR_FILENO);
    fprintf(stderr, "%sstep %" PRId64 "/%" PRId64 "  loss %.4f  lr %.3e  grad norm %.3f%s  %.0f tok/s  %.0f s left%s",
            tty ? "\r\033[K" : "", step + 1, j->o.steps, st->loss, lr, st->d.grad_norm, st->d.skip ? " (skipped)" : "",
            tok_s, eta, tty ? "" : "\n");
    fflush(stderr);
}

/* JSON has no inf or NaN: a non-finite value (the norm of a skipped step) is written as null. */
static const char *json_num(char *buf, size_t len, double x) {
    if (!isfinite(x)) return "null";
    snprintf(buf, len, "%.17g", x);
    return buf;
}

static void metrics_line(FILE *f, int64_t step, double lr, const rt_step_stats *st, double tok_s) {
    if (!f) return;
    char loss[32], norm[32];
    fprintf(f,
            "{\"step\": %" PRId64 ", \"loss\": %s, \"lr\": %.17g, \"grad_norm\": %s, \"loss_scale\": %.17g, "
            "\"skipped\": %s, \"tokens\": %" PRId64 ", \"tokens_per_s\": %.6g, \"seconds\": %.6f, \"compute_s\": %.6f, "
            "\"wait_s\": %.6f, \"bytes_sent\": %" PRIu64 ", \"bytes_recv\": %" PRIu64 "}\n",
            step + 1, json_num(loss, sizeof loss, st->loss), lr, json_num(norm, sizeof norm, st->d.grad_norm), st->loss_scale, st->d.skip ? "true" : "false", st->tokens, tok_s,
            st->step_s, st->compute_s, st->wait_s, st->sent, st->recv);
    fflush(f);
}

void report_step(const train_job *j, int rank, int64_t step, double lr, const rt_step_stats *st, double t_begin,
                 train_totals *tot, FILE *metrics) {
    if (tot->steps > 0) {
        tot->compute_s += st->compute_s;
        tot->step_s += st->step_s;
        tot->steady_steps++;
    }
    tot->steps++;
    if (rank != 0) return;
    double tok_s = st->step_s > 0 ? (double)st->tokens / st->step_s : 0;
    progress_line(j, step, lr, st, wp_now() - t_begin, tok_s);
    metrics_line(metrics, step, lr, st, tok_s);
}

/* The simulator on the same lists with this run's measured mean op times (links as --link-*):
 * the bubble it predicts for each rank in a steady step. */
static int predict_bubble(train_job *j, const double *sum, const double *cnt, double *pred, char *err, size_t errlen) {
    wp_costs costs;
    memset(&costs, 0, sizeof costs);
    for (int op = 0; op < 4; op++)
        for (int c = 0; c < j->s.nchunks; c++) {
            int i = op * WP_MAX_CHUNKS + c;
            costs.op_s[op][c] = cnt[i] > 0 ? sum[i] / cnt[i] : 0;
        }
    costs.ranks_per_node = j->net.ranks_per_node;
    costs.link_bw = j->net.link_bandwidth;
    costs.link_lat = j->net.link_latency;
    costs.node_bw = j->net.node_link_bandwidth;
    costs.node_lat = j->net.node_link_latency;
    wp_sizes sz;
    sizes_from_layout(&sz, &j->L, j->s.split);
    wp_run run;
    int rc = exec_run(&j->s, &sz, &costs, 2, false, &run, err, errlen);
    if (rc) return 1;
    double step = run.step_end[1] - run.step_end[0];
    for (int r = 0; r < j->nranks; r++) pred[r] = step > 0 ? 1.0 - run.rank[r].busy / step : 0;
    run_free(&run);
    return 0;
}

static uint64_t schedule_sent(const train_job *j, int r) {
    uint64_t s = 0;
    for (int k = 0; k < WP_BUF_KINDS; k++) s += j->run.rank[r].sent[k];
    return s;
}

/* The measured actions in the simulator's trace format (schedule/draw_trace.c): process = rank,
 * track 0 = compute, names as action_text, the same args. */
static void write_trace(train_job *j, int rank, wp_rt *rt) {
    int n;
    const rt_event *ev = rt_events(rt, &n);
    char name[96], args[160];
    snprintf(name, sizeof name, "rank %d", rank);
    trace_process(j->trace, rank, name);
    trace_thread(j->trace, rank, WP_TRACK_COMPUTE, "compute");
    for (int i = 0; i < n; i++) {
        const wp_action *a = &ev[i].a;
        action_text(a, name, sizeof name);
        snprintf(args, sizeof args, "\"chunk\":%d,\"mb\":%d,\"step\":%" PRId64 ",\"action\":%d", a->chunk, a->mb,
                 ev[i].step, ev[i].index);
        trace_span(j->trace, rank, WP_TRACK_COMPUTE, name, op_is_compute(a->op) ? "compute" : "optimizer", ev[i].t0,
                   ev[i].t1 - ev[i].t0, args);
    }
}

int report_final(train_job *j, int rank, wp_control *ctl, wp_transport *t, wp_rt *rt, const train_totals *tot,
                 char *err, size_t errlen) {
    const int N = j->nranks;
    if (j->trace) write_trace(j, rank, rt);
    if (ctl_barrier(ctl, err, errlen)) return 1; /* every transfer of the run has completed */
    if (3 * N > CTL_MAX_VALUES || 8 * WP_MAX_CHUNKS > CTL_MAX_VALUES) return 0;
    double *v = calloc((size_t)3 * N, sizeof *v);
    double *ops = calloc(8 * WP_MAX_CHUNKS, sizeof *ops);
    if (!v || !ops) {
        free(v), free(ops);
        return 0; /* the summary is optional; training succeeded */
    }
    wp_transport_stats now = {0};
    if (t && N > 1) tp_stats(t, &now);
    v[3 * rank] = tot->compute_s;
    v[3 * rank + 1] = tot->step_s;
    v[3 * rank + 2] = (double)(now.payload_sent - (tot->have_start ? tot->start.payload_sent : 0) - tot->eval_sent);
    rt_op_times(rt, ops, ops + 4 * WP_MAX_CHUNKS);
    int rc = ctl_allreduce(ctl, CTL_SUM, v, 3 * N, err, errlen);
    if (!rc) rc = ctl_allreduce(ctl, CTL_SUM, ops, 8 * WP_MAX_CHUNKS, err, errlen);
    if (!rc && rank == 0 && !j->o.quiet) {
        double *pred = calloc((size_t)N, sizeof *pred);
        char why[512];
        bool have_pred = pred && predict_bubble(j, ops, ops + 4 * WP_MAX_CHUNKS, pred, why, sizeof why) == 0;
        fprintf(stderr, "\nrank  bubble measured  predicted  payload bytes/step measured  schedule\n");
        for (int r = 0; r < N; r++) {
            double meas = v[3 * r + 1] > 0 ? 1.0 - v[3 * r] / v[3 * r + 1] : NAN;
            double sent = tot->steps > 0 ? v[3 * r + 2] / (double)tot->steps : 0;
            fprintf(stderr, "%4d  %15.3f  %9.3f  %27.0f  %8" PRIu64 "\n", r, meas, have_pred ? pred[r] : NAN, sent,
                    schedule_sent(j, r));
        }
        free(pred);
    }
    free(v);
    free(ops);
    return rc;
}
