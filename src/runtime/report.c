/* Progress, metrics and the end-of-run summary of train (report.h). */
#include "report.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "replay.h"
#include "engine.h"
#include "sim.h"
#include "wp_commit.h"
#include "wp_config.h"

static void progress_line(const train_job *j, int64_t step, double lr, const rt_step_stats *st, double elapsed,
                          double tok_s) {
    if (j->o.quiet) return;
    int64_t done = step + 1 - j->start_step, left = j->o.steps - step - 1;
    double eta = done > 0 ? elapsed / (double)done * (double)left : 0;
    bool tty = isatty(STDERR_FILENO);
    double peak = j->peak_tflops * 1e12 * j->nranks;
    char mfu[32] = "";
    if (peak > 0 && st->step_s > 0) snprintf(mfu, sizeof mfu, "  MFU %.1f%%", 100 * report_step_flops(j) / st->step_s / peak);
    char targets[48] = ""; /* with target masks: how many tokens the loss averaged over */
    if (st->masked) snprintf(targets, sizeof targets, " over %" PRId64 " targets", st->targets);
    fprintf(stderr, "%sstep %" PRId64 "/%" PRId64 "  loss %.4f%s  lr %.3e  grad norm %.3f%s  %.0f tok/s%s  %.0f s left%s",
            tty ? "\r\033[K" : "", step + 1, j->o.steps, st->loss, targets, lr, st->d.grad_norm, st->d.skip ? " (skipped)" : "",
            tok_s, mfu, eta, tty ? "" : "\n");
    fflush(stderr);
}

/* JSON has no inf or NaN: a non-finite value (the norm of a skipped step) is written as null. */
static const char *json_num(char *buf, size_t len, double x) {
    if (!isfinite(x)) return "null";
    snprintf(buf, len, "%.17g", x);
    return buf;
}

/* Unix time in seconds: metrics lines of several runs (a resume) and other logs line up on it. */
static double unix_now(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return NAN; /* written as null */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double report_step_flops(const train_job *j) {
    double f = 0;
    for (int c = 0; c < j->L.cfg.n_chunks; c++) {
        wp_flops k = layout_chunk_flops(&j->L, c);
        f += k.fwd + k.bwd_input + k.bwd_weight;
    }
    return f * j->nmb;
}

void report_run_line(const train_job *j, FILE *f) {
    if (!f) return;
    char t[32], peak[32];
    fprintf(f, "{\"run\": {\"time\": %s, \"version\": \"%s\", \"commit\": \"%s\", \"ranks\": %d, \"micro_batches\": %d, "
               "\"start_step\": %" PRId64 ", \"model_flops_per_step\": %.17g, \"peak_flops\": %s, \"flags\": ",
            json_num(t, sizeof t, unix_now()), WP_VERSION, WP_COMMIT, j->nranks, j->nmb, j->start_step,
            report_step_flops(j), j->peak_tflops > 0 ? json_num(peak, sizeof peak, j->peak_tflops * 1e12 * j->nranks) : "null");
    cli_write_json(f, &j->o, C_TRAIN);
    fputs("}}\n", f);
    fflush(f);
}

void report_val_line(FILE *f, wp_tb *tb, int64_t step, double loss) {
    double now = unix_now();
    tb_scalars(tb, step + 1, now, &(tb_scalar){"val/loss", loss}, 1);
    if (!f) return;
    char t[32], l[32];
    fprintf(f, "{\"step\": %" PRId64 ", \"time\": %s, \"val_loss\": %s}\n", step + 1, json_num(t, sizeof t, now),
            json_num(l, sizeof l, loss));
    fflush(f);
}

/* How a step's number is written in JSON: %.17g (null when not finite), an integer, true or
 * false, seconds with 6 decimals. */
typedef enum { MV_NUM, MV_INT, MV_BOOL, MV_SEC } mv_form;

/* One number of a step's metrics line: its JSON key, its form there, and the TensorBoard
 * scalar (tag and value) that carries the same value. */
typedef struct {
    const char *key;
    mv_form form;
    tb_scalar tb;
} step_value;

/* MFU: the model's FLOPs of a step over the step's time, as a share of every rank's peak
 * (--peak-tflops, else peak.h's: a known GPU's datasheet figure or the CPU's measured GEMM
 * rate; NaN, so null, when neither is known). Each number is computed once, here, and goes to
 * both the metrics line and the TensorBoard event. */
static void metrics_line(const train_job *j, FILE *f, wp_tb *tb, int64_t step, double lr, const rt_step_stats *st,
                         double tok_s, int64_t tokens_seen) {
    if (!f && !tb) return;
    double peak = j->peak_tflops * 1e12 * j->nranks; /* --peak-tflops or peak.h's, never the pacing --device-tflops */
    double mfu = peak > 0 && st->step_s > 0 ? report_step_flops(j) / st->step_s / peak : NAN;
    const step_value v[] = {
        {"loss", MV_NUM, {"train/loss", st->loss}},
        {"lr", MV_NUM, {"train/lr", lr}},
        {"grad_norm", MV_NUM, {"train/grad_norm", st->d.grad_norm}},
        {"loss_scale", MV_NUM, {"train/loss_scale", st->loss_scale}},
        {"skipped", MV_BOOL, {"train/skipped", st->d.skip ? 1 : 0}},
        {"tokens", MV_INT, {"train/tokens", (double)st->tokens}},
        {"targets", MV_INT, {"train/targets", (double)st->targets}},
        {"tokens_seen", MV_INT, {"train/tokens_seen", (double)tokens_seen}},
        {"tokens_per_s", MV_NUM, {"train/tokens_per_s", tok_s}},
        {"mfu", MV_NUM, {"train/mfu", mfu}},
        {"seconds", MV_SEC, {"train/seconds", st->step_s}},
        {"compute_s", MV_SEC, {"train/compute_s", st->compute_s}},
        {"wait_s", MV_SEC, {"train/wait_s", st->wait_s}},
        {"issue_s", MV_SEC, {"train/issue_s", st->issue_s}},
        {"device_s", MV_SEC, {"train/device_s", st->device_s}},
        {"bytes_sent", MV_INT, {"train/bytes_sent", (double)st->sent}},
        {"bytes_recv", MV_INT, {"train/bytes_recv", (double)st->recv}},
    };
    enum { NV = sizeof v / sizeof v[0] };
    double now = unix_now();
    if (tb) {
        tb_scalar s[NV];
        for (int i = 0; i < NV; i++) s[i] = v[i].tb;
        tb_scalars(tb, step + 1, now, s, NV);
    }
    if (!f) return;
    char num[32];
    fprintf(f, "{\"step\": %" PRId64 ", \"time\": %s", step + 1, json_num(num, sizeof num, now));
    for (int i = 0; i < NV; i++) {
        double x = v[i].tb.value;
        fprintf(f, ", \"%s\": ", v[i].key);
        switch (v[i].form) {
        case MV_NUM: fputs(json_num(num, sizeof num, x), f); break;
        case MV_INT: fprintf(f, "%.0f", x); break; /* counts below 2^53: exact in a double */
        case MV_BOOL: fputs(x != 0 ? "true" : "false", f); break;
        case MV_SEC: fprintf(f, "%.6f", x); break;
        }
    }
    fputs("}\n", f);
    fflush(f);
}

void report_step(const train_job *j, int rank, int64_t step, double lr, const rt_step_stats *st, double t_begin,
                 train_totals *tot, FILE *metrics, wp_tb *tb) {
    if (tot->steps > 0) {
        tot->compute_s += st->compute_s;
        tot->issue_s += st->issue_s;
        tot->device_s += st->device_s;
        tot->wait_s += st->wait_s;
        tot->step_s += st->step_s;
        tot->steady_steps++;
    }
    /* a resumed run counts the steps before it at this run's tokens per step */
    if (tot->steps == 0) tot->tokens_seen = j->start_step * st->tokens;
    tot->tokens_seen += st->tokens;
    tot->steps++;
    if (rank != 0) return;
    double tok_s = st->step_s > 0 ? (double)st->tokens / st->step_s : 0;
    progress_line(j, step, lr, st, wp_now() - t_begin, tok_s);
    metrics_line(j, metrics, tb, step, lr, st, tok_s, tot->tokens_seen);
}

/* The costs the simulator needs to predict this run. Compute: with --device-tflops the layout's
 * FLOPs at that speed (what `weipipe simulate` uses and what pacing enforces), else this run's
 * measured mean per op and chunk. The memory-bound ops (LOAD, ZERO, ACC, UPDATE), which train
 * does not pace, at their measured means. Links and the REDUCE's latency as --link-*. */
static void run_costs(const train_job *j, const double *sum, const double *cnt, wp_costs *c) {
    /* ring/transport.h paces every hop as --link-* when --ranks-per-node is 0; the simulator
     * reads 0 as one node (--node-link-*): one rank per node says what the transport does. */
    wp_machine m = {.flops = j->o.device_tflops * 1e12, .ranks_per_node = j->job.net.ranks_per_node > 0 ? j->job.net.ranks_per_node : 1,
                    .link_bw = j->job.net.link_bandwidth, .link_lat = j->job.net.link_latency,
                    .node_bw = j->job.net.node_link_bandwidth, .node_lat = j->job.net.node_link_latency};
    bool paced = m.flops > 0;
    if (!paced) m.flops = 1; /* compute times are replaced by the measured ones below */
    costs_from_layout(c, &j->L, j->nranks, &m);
    for (int op = 0; op < WP_OP_COUNT; op++)
        for (int k = 0; k < j->s.nchunks; k++) {
            if (paced && op_is_compute(op)) continue;
            int i = op * WP_MAX_CHUNKS + k;
            c->op_s[op][k] = cnt[i] > 0 ? sum[i] / cnt[i] : 0;
        }
}

/* The simulator on the same lists and costs: its steady step time and each rank's bubble. */
static wp_result predict(const train_job *j, const double *sum, const double *cnt, double *step_s, double *bubble,
                   char *err, size_t errlen) {
    wp_costs costs;
    run_costs(j, sum, cnt, &costs);
    wp_sizes sz;
    sizes_from_layout(&sz, &j->L, j->s.split);
    wp_run run;
    if (engine_run(&j->s, &sz, &costs, 2, false, &run, err, errlen)) return 1;
    *step_s = run.step_end[1] - run.step_end[0];
    /* idle = neither computing nor on the memory-bound ops: waiting for other ranks */
    for (int r = 0; r < j->nranks; r++) bubble[r] = *step_s > 0 ? 1.0 - (run.rank[r].busy + run.rank[r].other) / *step_s : 0;
    run_free(&run);
    return 0;
}

static uint64_t schedule_sent(const train_job *j, int r) {
    uint64_t s = 0;
    for (int k = 0; k < WP_BUF_KINDS; k++) s += j->run.rank[r].sent[k];
    return s;
}

/* Tracks beyond the simulator's (compute, and 1 + channel for sends): receives and waits. */
static int recv_track(int channel) { return 1 + WP_SCH_COUNT + channel; }
enum { WAIT_TRACK = 1 + 2 * WP_SCH_COUNT, DEVICE_TRACK };

/* This host's name, with anything a host name may not hold replaced (it goes into JSON). */
static void host_name(char *host, size_t len) {
    if (gethostname(host, len) != 0) snprintf(host, len, "unknown");
    host[len - 1] = 0;
    for (char *p = host; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            *p = '_';
}

/* Process = rank, named with its host; the clock estimate (clock_sync.h) as metadata, so that
 * trace-merge can state the residual and undo the correction (--local-clocks). */
static void trace_tracks(wp_trace *t, int rank, const wp_clock_sync *clk, bool device) {
    char name[400], host[256];
    host_name(host, sizeof host);
    snprintf(name, sizeof name, "rank %d @ %s", rank, host);
    trace_process(t, rank, name);
    snprintf(name, sizeof name,
             "\"rank\":%d,\"host\":\"%s\",\"offset_s\":%.9f,\"residual_s\":%.9f,\"rounds\":%d,\"test_skew_s\":%.9f", rank,
             host, clk->offset, clk->residual, clk->rounds, clk->skew);
    trace_metadata(t, rank, "weipipe_clock", name);
    trace_thread(t, rank, WP_TRACK_COMPUTE, "compute");
    for (int ch = 0; ch < WP_SCH_COUNT; ch++) {
        snprintf(name, sizeof name, "send %s", channel_name(ch));
        trace_thread(t, rank, trace_track_of_channel(ch), name);
        snprintf(name, sizeof name, "recv %s", channel_name(ch));
        trace_thread(t, rank, recv_track(ch), name);
    }
    trace_thread(t, rank, WAIT_TRACK, "waits");
    if (device) trace_thread(t, rank, DEVICE_TRACK, "device (GPU clock)");
}

/* A transfer as the simulator names it ("W[3]@0 ->2"; receives "W[3]@0 <-1"), a wait by what
 * it waited for. One that never completed (a failed run) is left out. */
static void trace_xfer(wp_trace *t, int rank, const rt_xfer_event *x) {
    char name[128], buf[48], args[160];
    if (x->t1 < x->t0) return;
    if (x->kind == RT_EV_SAVE) { /* the checkpoint shard's write: the step's last phase, on the compute track */
        snprintf(args, sizeof args, "\"step\":%" PRId64, x->step);
        trace_span(t, rank, WP_TRACK_COMPUTE, x->what, "checkpoint", x->t0, x->t1 - x->t0, args);
        return;
    }
    if (x->kind == RT_EV_WAIT) {
        snprintf(args, sizeof args, "\"step\":%" PRId64, x->step);
        trace_span(t, rank, WAIT_TRACK, x->what, "wait", x->t0, x->t1 - x->t0, args);
        return;
    }
    bool send = x->kind == RT_EV_SEND;
    snprintf(name, sizeof name, "%s %s%d", buf_name(x->buf, buf, sizeof buf), send ? "->" : "<-", x->peer);
    snprintf(args, sizeof args, "\"bytes\":%zu,\"%s\":%d,\"step\":%" PRId64, x->bytes, send ? "dst" : "src", x->peer,
             x->step);
    int ch = x->channel < WP_SCH_COUNT ? x->channel : WP_SCH_COUNT - 1;
    trace_span(t, rank, send ? trace_track_of_channel(ch) : recv_track(ch), name, channel_name(ch), x->t0,
               x->t1 - x->t0, args);
}

/* The measured run in the simulator's trace format (schedule/draw_trace.c): process = rank,
 * track 0 = compute with the action names and args, one track per channel for the sends; then
 * what only a real run has: one track per channel for the receives, and the waits. */
static void write_trace(train_job *j, int rank, wp_rt *rt, const wp_clock_sync *clk) {
    int n;
    const rt_event *ev = rt_events(rt, &n);
    char name[96], args[160];
    bool device = false;
    for (int i = 0; i < n && !device; i++) device = ev[i].device;
    trace_tracks(j->trace, rank, clk, device);
    for (int i = 0; i < n; i++) {
        const wp_action *a = &ev[i].a;
        const char *cat = op_is_compute(a->op) ? "compute" : "optimizer";
        action_text(a, name, sizeof name);
        snprintf(args, sizeof args, "\"chunk\":%d,\"mb\":%d,\"step\":%" PRId64 ",\"action\":%d", a->chunk, a->mb,
                 ev[i].step, ev[i].index);
        trace_span(j->trace, rank, WP_TRACK_COMPUTE, name, cat, ev[i].t0, ev[i].t1 - ev[i].t0, args);
        /* the device's own span of the same action beside it: the gap to the host span is the
         * launch and the sync */
        if (ev[i].device) trace_span(j->trace, rank, DEVICE_TRACK, name, cat, ev[i].d0, ev[i].d1 - ev[i].d0, args);
    }
    const rt_xfer_event *xe = rt_xfer_events(rt, &n);
    for (int i = 0; i < n; i++) trace_xfer(j->trace, rank, &xe[i]);
}

/* Values per rank in report_final's all-reduce: compute_s, step_s, payload sent, the backend's
 * peak memory (kern_memory), the resident high-water, the terms at the peak. */
#define RV_MEM 5
#define RV_DEV (RV_MEM + WP_MEM_TERMS) /* the device's figure: at open, peak, device ordinal + 1 (0: none) */
#define RV_ISSUE (RV_DEV + 3) /* host issue seconds, device busy seconds (rt_step_stats) */
#define RV_REPLAY (RV_ISSUE + 2) /* --graphs: actions replayed, recorded, eager (rt_replay_counts) */
#define RV (RV_REPLAY + 3)

/* Rank 0's table: measured bubble and step time beside the simulator's, bytes beside the
 * validator's, the backend's peak memory beside the prediction. v holds RV values per rank,
 * ops the op times. */
static void print_summary(train_job *j, const train_totals *tot, const double *v, const double *ops, const double *pace,
                          const char *replay_why) {
    const int N = j->nranks;
    double *pred = calloc((size_t)N, sizeof *pred);
    double pred_step = NAN, meas_step = 0;
    char why[512];
    bool have_pred = pred && predict(j, ops, ops + WP_OP_COUNT * WP_MAX_CHUNKS, &pred_step, pred, why, sizeof why) == 0;
    int64_t steady = tot->steady_steps;
    for (int r = 0; r < N; r++) meas_step += steady > 0 ? v[RV * r + 1] / (double)steady / N : NAN;
    char meas_text[64] = "n/a (one step: --steps 2 or more)";
    if (steady > 0) snprintf(meas_text, sizeof meas_text, "%.4g s", meas_step);
    fprintf(stderr, "\nstep time (steps after the first, mean over ranks): measured %s, simulator %.4g s%s\n", meas_text,
            have_pred ? pred_step : NAN, j->o.device_tflops > 0 ? " (paced compute)" : " (measured op times)");
    fprintf(stderr, "rank  bubble measured  predicted  payload bytes/step measured  schedule  "
                    "memory MiB %s peak  predicted\n", j->o.backend == WP_BACKEND_CUDA ? " alloc" : "  heap");
    for (int r = 0; r < N; r++) {
        double meas = v[RV * r + 1] > 0 ? 1.0 - v[RV * r] / v[RV * r + 1] : NAN;
        double sent = tot->steps > 0 ? v[RV * r + 2] / (double)tot->steps : 0;
        double terms[WP_MEM_TERMS];
        train_mem_predict(j, r, terms);
        double mem_pred = mem_total(terms);
        fprintf(stderr, "%4d  %15.3f  %9.3f  %27.0f  %8" PRIu64 "  %22.1f  %9.1f\n", r, meas, have_pred ? pred[r] : NAN,
                sent, schedule_sent(j, r), v[RV * r + 3] / 1048576.0, mem_pred / 1048576.0);
    }
    if (!have_pred) fprintf(stderr, "(no prediction: %s)\n", pred ? why : "out of memory");
    if (j->o.backend == WP_BACKEND_CUDA && steady > 0) { /* the CPU's "device" is the host: nothing to say */
        double issue = 0, busy = 0;
        for (int r = 0; r < N; r++) {
            issue += v[RV * r + RV_ISSUE] / (double)steady / N;
            busy += v[RV * r + RV_ISSUE + 1] / (double)steady / N;
        }
        fprintf(stderr, "launch: the host spent %.4g s a step issuing the device's work, which kept the device busy %.4g s "
                        "(ratio %.2f: near 1, the device waited for launches and CUDA graphs would pay; well below 1, "
                        "launches ran ahead of it)\n",
                issue, busy, busy > 0 ? issue / busy : NAN);
    }

    if (j->o.graphs) {
        double n[3] = {0, 0, 0};
        for (int r = 0; r < N; r++)
            for (int i = 0; i < 3; i++) n[i] += v[RV * r + RV_REPLAY + i];
        fprintf(stderr, "graphs: %.0f of %.0f compute actions replayed a recording, %.0f recorded, %.0f eager (%s)%s%s\n",
                n[WP_REPLAY_REPLAYED], n[0] + n[1] + n[2], n[WP_REPLAY_RECORDED], n[WP_REPLAY_EAGER],
                j->o.backend == WP_BACKEND_CUDA ? "CUDA graphs" : "the CPU backend's record of the calls",
                replay_why[0] ? "; rank 0's first eager one after step 2: " : "", replay_why);
    }
    if (pace[1] > 0)
        fprintf(stderr, "pacing: %.0f of %.0f compute actions took longer than FLOPs / --device-tflops for real (%.3g s in all): "
                        "a lower --device-tflops makes the run follow the simulator\n", pace[1], pace[0], pace[2]);
    free(pred);
}

/* --strategy auto: the pick's promise against the run, also under --quiet (it is the answer to
 * "was the pick right"): tokens per step over the mean step time of the steps after the first. */
static void print_auto(const train_job *j, const train_totals *tot, const double *v) {
    const int N = j->nranks;
    double step = 0;
    for (int r = 0; r < N; r++) step += v[RV * r + 1] / N;
    const double tokens = (double)j->L.cfg.micro_batch * j->L.cfg.seq * j->nmb;
    const double meas = tot->steady_steps > 0 && step > 0 ? tokens / (step / (double)tot->steady_steps) : NAN;
    if (meas > 0)
        printf("auto: %s predicted %.0f tokens/s, measured %.0f tokens/s (%.2fx; steps after the first)\n", strategy_name(j->strategy),
               j->auto_predicted, meas, meas / j->auto_predicted);
    else
        printf("auto: %s predicted %.0f tokens/s, not measured (no step after the first: --steps 2 or more)\n",
               strategy_name(j->strategy), j->auto_predicted);
    fflush(stdout);
}

/* A sum over ranks of n values, in pieces of what one all-reduce carries. */
static wp_result allreduce_sum(wp_control *ctl, double *v, size_t n, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i += CTL_MAX_VALUES) {
        size_t k = n - i < CTL_MAX_VALUES ? n - i : CTL_MAX_VALUES;
        if (ctl_allreduce(ctl, CTL_SUM, v + i, (int)k, err, errlen)) return 1;
    }
    return 0;
}

wp_result report_final(train_job *j, int rank, wp_control *ctl, wp_transport *t, wp_rt *rt, const train_totals *tot,
                 char *err, size_t errlen) {
    const int N = j->nranks;
    const size_t nops = (size_t)WP_OP_COUNT * WP_MAX_CHUNKS;
    if (j->trace) write_trace(j, rank, rt, &tot->clock);
    if (ctl_barrier(ctl, err, errlen)) return 1; /* every transfer of the run has completed */
    double *v = calloc((size_t)RV * N, sizeof *v);
    double *ops = calloc(2 * nops, sizeof *ops);
    if (!v || !ops) { /* fail rather than skip: the other ranks are about to wait in the all-reduce */
        free(v), free(ops);
        return snprintf(err, errlen, "rank %d: out of memory for the end-of-run summary", rank), 1;
    }
    wp_transport_stats now = {0};
    if (t && N > 1) tp_stats(t, &now);
    v[RV * rank] = tot->step_s - tot->wait_s; /* working: the bubble is the time spent waiting for peers */
    v[RV * rank + 1] = tot->step_s;
    v[RV * rank + 2] = (double)(now.payload_sent - (tot->have_start ? tot->start.payload_sent : 0) - tot->eval_sent);
    v[RV * rank + 3] = (double)tot->mem_peak;
    v[RV * rank + 4] = tot->mem_resident;
    for (int t = 0; t < WP_MEM_TERMS; t++) v[RV * rank + RV_MEM + t] = (double)tot->mem_terms[t];
    v[RV * rank + RV_DEV] = tot->dev_open;
    v[RV * rank + RV_DEV + 1] = tot->dev_peak;
    v[RV * rank + RV_DEV + 2] = tot->dev_ordinal + 1;
    v[RV * rank + RV_ISSUE] = tot->issue_s;
    v[RV * rank + RV_ISSUE + 1] = tot->device_s;
    int64_t rp[3];
    const char *replay_why;
    rt_replay_counts(rt, rp, &replay_why);
    for (int i = 0; i < 3; i++) v[RV * rank + RV_REPLAY + i] = (double)rp[i];
    rt_op_times(rt, ops, ops + nops);
    double pace[3];
    int64_t paced, over;
    rt_pace_overrun(rt, &paced, &over, &pace[2]);
    pace[0] = (double)paced;
    pace[1] = (double)over;
    wp_result rc = allreduce_sum(ctl, v, (size_t)RV * N, err, errlen);
    if (!rc) rc = allreduce_sum(ctl, ops, 2 * nops, err, errlen);
    if (!rc) rc = allreduce_sum(ctl, pace, 3, err, errlen);
    /* the memory table first: scripts read the summary's rank lines to the end of the output */
    if (!rc && rank == 0) report_memory(j, v + 3, v + RV_DEV, RV, tot->metrics, tot->tb, j->start_step + tot->steps);
    if (!rc && rank == 0 && !j->o.quiet) print_summary(j, tot, v, ops, pace, replay_why);
    if (!rc && rank == 0 && j->auto_predicted > 0) print_auto(j, tot, v);
    free(v);
    free(ops);
    return rc;
}

/* The length of the well-formed UTF-8 sequence at p (at most n bytes; Unicode's table 3-7: no
 * overlong forms, surrogates or code points above U+10FFFF), 0 when it is not one. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    const unsigned c = p[0];
    size_t k = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (k == 0 || k > n) return 0;
    unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    return k;
}

/* One --sample-every sample: the tokenizer's text (a byte vocabulary without one: the bytes),
 * valid UTF-8 kept, any other byte as U+FFFD; with neither a tokenizer nor bytes, the ids
 * comma-separated. json: as a JSON string's contents, so the metrics line stays one valid JSON
 * line whatever the model writes (quotes, backslashes and control bytes escaped); else for the
 * console: newlines and tabs as they are, other control bytes (a terminal's escapes) as \xNN. */
static void sample_text(const train_job *j, const int32_t *ids, int n, bool json, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    char *decoded = NULL, why[256];
    size_t dn = 0;
    if (j->tok && tok_decode(j->tok, ids, (size_t)n, &decoded, why, sizeof why) == 0) {
        dn = strlen(decoded);
    } else if (j->L.cfg.vocab == 256 && (decoded = malloc((size_t)n + 1))) {
        for (int i = 0; i < n; i++) decoded[i] = (char)ids[i];
        dn = (size_t)n;
    } else {
        for (int i = 0; i < n && at + 16 < len; i++) at += (size_t)snprintf(buf + at, len - at, "%s%d", i ? "," : "", ids[i]);
        return;
    }
    const unsigned char *p = (const unsigned char *)decoded;
    for (size_t i = 0; i < dn && at + 16 < len;) {
        unsigned c = p[i];
        size_t k = c >= 0x80 ? utf8_len(p + i, dn - i) : 1;
        if (json && (c == '"' || c == '\\'))
            at += (size_t)snprintf(buf + at, len - at, "\\%c", c);
        else if ((c >= 0x20 && c < 0x7f) || (!json && (c == '\n' || c == '\t')))
            buf[at++] = (char)c, buf[at] = '\0';
        else if (c < 0x80 && !json)
            at += (size_t)snprintf(buf + at, len - at, "\\x%02x", c);
        else if (k == 0 && !json)
            at += (size_t)snprintf(buf + at, len - at, "\xef\xbf\xbd"); /* U+FFFD in UTF-8 */
        else if (c < 0x80 || k == 0)
            at += (size_t)snprintf(buf + at, len - at, "\\u%04x", c < 0x80 ? c : 0xfffdu);
        else if (at + k + 1 < len)
            memcpy(buf + at, p + i, k), at += k, buf[at] = '\0';
        i += k ? k : 1;
    }
    free(decoded);
}

void report_sample(const train_job *j, int64_t step, const int32_t *ids, int n, FILE *metrics) {
    size_t len = (size_t)n * 64 + 32; /* a token's text escaped, or its id */
    char *text = malloc(len);
    if (!text) return; /* a sample is a courtesy: no memory, no sample */
    sample_text(j, ids, n, false, text, len);
    if (!j->o.quiet) fprintf(stderr, "%sstep %" PRId64 "  sample: %s\n", isatty(STDERR_FILENO) ? "\n" : "", step + 1, text);
    sample_text(j, ids, n, true, text, len);
    if (metrics) {
        fprintf(metrics, "{\"step\": %" PRId64 ", \"sample\": \"%s\"}\n", step + 1, text);
        fflush(metrics);
    }
    free(text);
}
