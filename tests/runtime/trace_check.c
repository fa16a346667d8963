/* Checks a `weipipe train --trace` file against the lists the run executed.
 *
 * usage: trace_check TRACE train ARGS...   (ARGS: the run's own flags, so that the checker builds
 * the same layout and schedule). TRACE is rank 0's file; over tcp ranks R > 0 wrote TRACE.rank-R (tr.rank-R.json for tr.json),
 * which are read too when present. Checks, for every rank:
 *   - every file parses as JSON (jansson) with a traceEvents array of complete events;
 *   - the compute track holds every device action of the list once per step, by name (F(2,5),
 *     UPDATE(3), LOAD W[0]@0, ZERO, ACC: the step's phases besides the model), one SAVE per
 *     checkpoint that --save and --save-every ask for, and nothing else;
 *   - each channel's send track holds every SEND of the list once per step, each channel's
 *     receive track every RECV, and their "bytes" add up to the lists' bytes times the steps;
 *   - every span has a non-negative duration; a wait track exists;
 *   - with --device-tflops X, every F/B/W/BW span lasts at least its FLOPs / X (pacing is a
 *     lower bound, so this holds however loaded the machine is);
 *   - on the job's common clock (ring/clock_sync.h): the k-th receive of a buffer from rank s in
 *     a step does not end before the k-th send of it to that rank starts, by more than the two
 *     ranks' stated residuals (weipipe_clock metadata) together: causality holds whatever the
 *     load, so only a wrong clock can break it. Works on per-rank files and on a trace-merge.
 * Exit 0 and one summary line, or 1 after a FAIL line naming the first difference. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "check.h"
#include "cli.h"
#include "layout.h"
#include "schedule.h"
#include "sim.h"

#define MAX_RANKS 16
#define MAX_NAMES 4096

/* Expected counts per (rank, name) on the compute track, and per (rank, channel) of transfers. */
typedef struct {
    int n;
    char name[MAX_NAMES][32];
    int rank[MAX_NAMES];
    long want[MAX_NAMES], got[MAX_NAMES];
    double min_s[MAX_NAMES];
} name_counts;

static int slot(name_counts *nc, int rank, const char *name) {
    for (int i = 0; i < nc->n; i++)
        if (nc->rank[i] == rank && strcmp(nc->name[i], name) == 0) return i;
    if (nc->n == MAX_NAMES) return -1;
    snprintf(nc->name[nc->n], sizeof nc->name[0], "%s", name);
    nc->rank[nc->n] = rank;
    nc->want[nc->n] = nc->got[nc->n] = 0;
    nc->min_s[nc->n] = 0;
    return nc->n++;
}

typedef struct {
    long sends[MAX_RANKS][WP_SCH_COUNT], recvs[MAX_RANKS][WP_SCH_COUNT];
    double sent_bytes[MAX_RANKS], recv_bytes[MAX_RANKS];
    bool wait_track[MAX_RANKS];
} xfer_counts;

/* Every transfer span, for the causality check. */
#define MAX_XFERS 200000
typedef struct {
    int rank, peer, send; /* peer: dst of a send, src of a receive */
    long step;
    char buf[48];
    double t0, t1; /* seconds on the trace's clock */
    bool used;
} xfer_span;
static xfer_span xfers[MAX_XFERS];
static int n_xfers;
static double residual[MAX_RANKS];
static bool have_clock[MAX_RANKS];

static void take_xfer(int pid, bool send, const char *name, json_t *ev) {
    CHECK(n_xfers < MAX_XFERS, "more than %d transfer spans", MAX_XFERS);
    xfer_span *x = &xfers[n_xfers++];
    json_t *args = json_object_get(ev, "args");
    const char *arrow = strstr(name, send ? " ->" : " <-");
    CHECK(arrow && (size_t)(arrow - name) < sizeof x->buf, "transfer span '%s' of rank %d is not 'BUF ->R' / 'BUF <-R'", name, pid);
    *x = (xfer_span){.rank = pid, .send = send, .step = (long)json_integer_value(json_object_get(args, "step")),
                     .peer = (int)json_integer_value(json_object_get(args, send ? "dst" : "src"))};
    memcpy(x->buf, name, (size_t)(arrow - name));
    x->t0 = json_number_value(json_object_get(ev, "ts")) * 1e-6;
    x->t1 = x->t0 + json_number_value(json_object_get(ev, "dur")) * 1e-6;
}

static int by_start(const void *a, const void *b) {
    const xfer_span *x = a, *y = b;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* The causality check (see the top); returns the smallest margin recv end - send start. */
static double check_causality(void) {
    qsort(xfers, (size_t)n_xfers, sizeof xfers[0], by_start);
    double worst = INFINITY;
    for (int i = 0; i < n_xfers; i++) {
        xfer_span *r = &xfers[i];
        if (r->send) continue;
        /* this receive's send: the earliest unused one with the same buffer, ends and step */
        xfer_span *s = NULL;
        for (int k = 0; k < n_xfers && !s; k++) {
            xfer_span *c = &xfers[k];
            if (c->send && !c->used && c->rank == r->peer && c->peer == r->rank && c->step == r->step &&
                strcmp(c->buf, r->buf) == 0)
                s = c;
        }
        CHECK(s, "rank %d's receive of %s from rank %d in step %ld has no send", r->rank, r->buf, r->peer, r->step);
        s->used = true;
        CHECK(have_clock[r->rank] && have_clock[s->rank], "rank %d or %d has no weipipe_clock metadata", r->rank, s->rank);
        double bound = residual[r->rank] + residual[s->rank] + 2e-9; /* + the file's microsecond rounding */
        double margin = r->t1 - s->t0;
        CHECK(margin >= -bound,
              "rank %d's receive of %s from rank %d (step %ld) ends %.6f s before its send starts, beyond the residual "
              "%.6f s: the ranks' clocks disagree",
              r->rank, r->buf, r->peer, r->step, -margin, bound);
        if (margin < worst) worst = margin;
    }
    return worst;
}

static bool on_device(int op) {
    return op_is_compute(op) || op == WP_OP_LOAD || op == WP_OP_ZERO || op == WP_OP_ACC || op == WP_OP_UPDATE;
}

static void expect(const wp_schedule *s, const wp_layout *L, const wp_costs *pace, long steps, name_counts *nc,
                   xfer_counts *want) {
    char text[96];
    for (int r = 0; r < s->nranks; r++) {
        const wp_rank_prog *p = &s->rank[r];
        for (int i = 0; i < p->n; i++) {
            const wp_action *a = &p->a[i];
            if (on_device(a->op)) {
                int k = slot(nc, r, action_text(a, text, sizeof text));
                if (k < 0) continue;
                nc->want[k] += steps;
                if (pace && op_is_compute(a->op)) nc->min_s[k] = pace->op_s[a->op][a->chunk];
            } else if (a->op == WP_OP_SEND) {
                want->sends[r][a->channel] += steps;
                want->sent_bytes[r] += (double)buf_bytes(L, a->buf) * (double)steps;
            } else if (a->op == WP_OP_RECV) {
                want->recvs[r][a->channel] += steps;
                want->recv_bytes[r] += (double)buf_bytes(L, a->buf) * (double)steps;
            }
        }
    }
}

/* One span of rank r's file; a malformed or unlisted one ends the check. */
static void take_span(json_t *ev, name_counts *nc, xfer_counts *got) {
    const char *ph = json_string_value(json_object_get(ev, "ph"));
    int pid = (int)json_integer_value(json_object_get(ev, "pid"));
    int tid = (int)json_integer_value(json_object_get(ev, "tid"));
    CHECK(ph && pid >= 0 && pid < MAX_RANKS, "event with ph %s pid %d tid %d", ph ? ph : "?", pid, tid);
    if (strcmp(ph, "M") == 0) {
        const char *nm = json_string_value(json_object_get(json_object_get(ev, "args"), "name"));
        if (nm && strcmp(nm, "waits") == 0) got->wait_track[pid] = true;
        const char *what = json_string_value(json_object_get(ev, "name"));
        if (what && strcmp(what, "weipipe_clock") == 0) {
            json_t *res = json_object_get(json_object_get(ev, "args"), "residual_s");
            CHECK(json_is_number(res) && json_number_value(res) >= 0, "rank %d's weipipe_clock has no residual_s", pid);
            residual[pid] = json_number_value(res);
            have_clock[pid] = true;
        }
        return;
    }
    const char *name = json_string_value(json_object_get(ev, "name"));
    double dur = json_number_value(json_object_get(ev, "dur")) * 1e-6;
    CHECK(strcmp(ph, "X") == 0 && name && dur >= 0, "span '%s' of rank %d on track %d malformed", name ? name : "?", pid,
          tid);
    if (tid == 0) {
        int k = slot(nc, pid, name);
        CHECK(k >= 0 && nc->want[k] != 0, "compute track of rank %d holds '%s', not in its list", pid, name);
        nc->got[k]++;
        /* a span is written in microseconds with 3 decimals: allow that rounding */
        CHECK(dur + 2e-9 >= nc->min_s[k], "'%s' of rank %d lasted %.9f s, less than its paced budget %.9f s", name, pid,
              dur, nc->min_s[k]);
        return;
    }
    double bytes = json_number_value(json_object_get(json_object_get(ev, "args"), "bytes"));
    if (tid >= 1 && tid < 1 + WP_SCH_COUNT) {
        got->sends[pid][tid - 1]++;
        got->sent_bytes[pid] += bytes;
        take_xfer(pid, true, name, ev);
    } else if (tid >= 1 + WP_SCH_COUNT && tid < 1 + 2 * WP_SCH_COUNT) {
        got->recvs[pid][tid - 1 - WP_SCH_COUNT]++;
        got->recv_bytes[pid] += bytes;
        take_xfer(pid, false, name, ev);
    }
}

static void read_file(const char *path, name_counts *nc, xfer_counts *got) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK(root, "%s does not parse: line %d: %s", path, je.line, je.text);
    json_t *evs = json_object_get(root, "traceEvents");
    CHECK(json_is_array(evs), "%s has no traceEvents array", path);
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev) take_span(ev, nc, got);
    json_decref(root);
}

static void compare(const wp_schedule *s, const name_counts *nc, const xfer_counts *want, const xfer_counts *got) {
    for (int i = 0; i < nc->n; i++)
        CHECK(nc->got[i] == nc->want[i], "rank %d's compute track holds '%s' %ld times, its list %ld times", nc->rank[i],
              nc->name[i], nc->got[i], nc->want[i]);
    for (int r = 0; r < s->nranks; r++) {
        for (int ch = 0; ch < WP_SCH_COUNT; ch++) {
            CHECK(got->sends[r][ch] == want->sends[r][ch], "rank %d %s: %ld send spans, its list %ld", r,
                  channel_name(ch), got->sends[r][ch], want->sends[r][ch]);
            CHECK(got->recvs[r][ch] == want->recvs[r][ch], "rank %d %s: %ld receive spans, its list %ld", r,
                  channel_name(ch), got->recvs[r][ch], want->recvs[r][ch]);
        }
        CHECK(got->sent_bytes[r] == want->sent_bytes[r] && got->recv_bytes[r] == want->recv_bytes[r],
              "rank %d: traced bytes sent %.0f received %.0f, its list %.0f and %.0f", r, got->sent_bytes[r],
              got->recv_bytes[r], want->sent_bytes[r], want->recv_bytes[r]);
        CHECK(s->nranks == 1 || got->wait_track[r], "rank %d has no wait track", r);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: trace_check TRACE train ARGS...\n");
        return 2;
    }
    static wp_opts o;
    char err[512];
    if (cli_parse(argc - 2, argv + 2, &o, err, sizeof err)) return fprintf(stderr, "%s\n", err), 2;
    int N = (int)o.nranks, M = o.num_microbatches ? (int)o.num_microbatches : N;
    wp_model_cfg cfg;
    wp_layout L;
    const wp_strategy st = o.strategy;
    wp_schedule s;
    if (N > MAX_RANKS || model_cfg_from_opts(&o, N, &cfg, err, sizeof err) || layout_build(&cfg, &L, err, sizeof err) ||
        st >= WP_STRAT_COUNT || schedule_generate(st, N, M, cfg.n_chunks, NULL, &s, err, sizeof err))
        return fprintf(stderr, "cannot build the run's schedule: %s\n", err), 2;
    wp_costs pace;
    wp_machine m = {.flops = o.device_tflops * 1e12};
    if (o.device_tflops > 0) costs_from_layout(&pace, &L, N, &m);
    static name_counts nc;
    static xfer_counts want, got;
    expect(&s, &L, o.device_tflops > 0 ? &pace : NULL, (long)o.steps, &nc, &want);
    long saves = !o.save[0] ? 0 : o.save_every > 0 ? (long)(o.steps / o.save_every + (o.steps % o.save_every != 0)) : 1;
    for (int r = 0; r < N && saves > 0; r++) { /* every rank writes its shard (train.c save_checkpoint) */
        int k = slot(&nc, r, "SAVE");
        if (k >= 0) nc.want[k] += saves;
    }
    read_file(argv[1], &nc, &got);
    for (int r = 1; r < N; r++) {
        char path[600];
        size_t n = strlen(argv[1]); /* tr.json -> tr.rank-R.json (cmd_train.c), else TRACE.rank-R */
        if (n > 5 && strcmp(argv[1] + n - 5, ".json") == 0)
            snprintf(path, sizeof path, "%.*s.rank-%d.json", (int)(n - 5), argv[1], r);
        else
            snprintf(path, sizeof path, "%s.rank-%d", argv[1], r);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* threads: one file holds every rank */
        fclose(f);
        read_file(path, &nc, &got);
    }
    compare(&s, &nc, &want, &got);
    double margin = check_causality(), max_res = 0;
    for (int r = 0; r < N; r++) max_res = fmax(max_res, residual[r]);
    long spans = 0, nx = 0;
    for (int i = 0; i < nc.n; i++) spans += nc.got[i];
    for (int r = 0; r < N; r++)
        for (int ch = 0; ch < WP_SCH_COUNT; ch++) nx += got.sends[r][ch] + got.recvs[r][ch];
    printf("trace %s: %s on %d ranks, %ld device spans and %ld transfer spans, as the lists say%s; every receive ends "
           "after its send starts (closest %.1f us, clock residual at most %.1f us)\n",
           argv[1], strategy_name(st), N, spans, nx, o.device_tflops > 0 ? "; every compute span at least its paced budget" : "",
           isfinite(margin) ? margin * 1e6 : 0.0, max_res * 1e6);
    sched_free(&s);
    layout_free(&L);
    return 0;
}
