/* weipipe simulate: one table comparing strategies on a model and a machine (sim.h): step time,
 * tokens/s, bubble, bytes sent per rank per step and peak memory per rank (the largest over the
 * ranks; --format json adds every rank's), throughput vs 1F1B.
 * --trace writes every simulated strategy into one Chrome trace (a process per strategy and rank). */
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "autotune.h"
#include "commands.h"
#include "draw.h"
#include "log.h"
#include "print.h"

typedef struct {
    wp_strategy st;
    bool shown;    /* asked for (1f1b is simulated anyway, as the baseline) */
    bool ok;
    char note[1100];
    bool fits;     /* within --device-memory and --host-memory (always, when they are 0) */
    unsigned over; /* sim.h's WP_OVER_*: what it does not fit */
    double step_s, tokens_s, bubble;
    size_t sent, peak, host;    /* host: --optimizer-memory host's host memory per rank */
    size_t host_need;           /* the most a host holds (sim.h: sim_host_need) */
    int n;                      /* ranks, for the per-rank lists */
    double rank_bubble[WP_MAX_CHUNKS];
    size_t rank_sent[WP_MAX_CHUNKS], rank_peak[WP_MAX_CHUNKS];
} row;

static void setting(const wp_opts *o, const wp_layout *L, const wp_machine *m, const wp_pipe_shape *ps) {
    const wp_model_cfg *c = &L->cfg;
    char a[32], b[32], d[32], e[32], f[32];
    printf("model: %d layers, h %d, ffn %d, %d heads, s %d, b %d, V %d: %.3g B parameters, %s precision%s\n", c->n_layers,
           c->h, c->ffn, c->n_heads, c->seq, c->micro_batch, c->vocab, (double)L->total_numel / 1e9, precision_name(c->precision),
           c->recompute ? ", recompute" : "");
    if (c->doc_mask) /* what the attention FLOPs are charged (layout.h: attn_share) */
        printf("document masks: attention scores %.4g of the causal query-key pairs (%s)\n", c->attn_share > 0 ? c->attn_share : 1.0,
               o->doc_length_mean > 0 ? "--doc-length-mean" : "no --doc-length-mean: counted unmasked");
    int per = m->ranks_per_node > 0 && m->ranks_per_node < ps->nranks ? m->ranks_per_node : m->ranks_per_node > 0 ? ps->nranks : 1;
    printf("ring: %d ranks, %d per node; inside a node %s/s %s, between nodes %s/s %s; %g TFLOP/s, memory %s/s\n",
           ps->nranks, per, m->node_bw > 0 ? fmt_bytes(a, sizeof a, m->node_bw) : "unlimited ",
           fmt_seconds(b, sizeof b, m->node_lat), m->link_bw > 0 ? fmt_bytes(d, sizeof d, m->link_bw) : "unlimited ",
           fmt_seconds(e, sizeof e, m->link_lat), o->device_tflops, fmt_bytes(f, sizeof f, m->mem_bw));
    if (m->host_optim)
        printf("optimizer state in host memory: host link %s/s per direction, host memory %s/s, each shared by %d rank%s\n",
               m->host_link_bw > 0 ? fmt_bytes(a, sizeof a, m->host_link_bw) : "unlimited ",
               m->host_mem_bw > 0 ? fmt_bytes(b, sizeof b, m->host_mem_bw) : "free ", per, per == 1 ? "" : "s");
    if (o->host_memory > 0)
        printf("host memory: %s per host (--host-memory), for %d rank%s\n", fmt_bytes(a, sizeof a, (double)o->host_memory), per,
               per == 1 ? "" : "s");
    printf("chunks: %d of ", c->n_chunks); /* uneven with --chunk-layers (auto) */
    for (int k = 0; k < c->n_chunks; k++) printf("%s%d", k ? "," : "", c->chunk_layers[k]);
    printf(" layers\n");
    printf("step: %d micro-batches of %d tokens\n\n", ps->nmb, c->micro_batch * c->seq);
}

static void print_text(const row *rows, int n, double base, bool host) {
    char a[32], b[32], c[32], d[32];
    printf("%-20s %12s %12s %8s %14s %14s %19s %9s%s\n", "strategy", "step time", "tokens/s", "bubble", "sent/rank/step",
           "peak mem/rank", "memory", "vs 1f1b", host ? "  host mem/rank" : "");
    for (int i = 0; i < n; i++) {
        const row *r = &rows[i];
        if (!r->shown) continue;
        if (!r->ok) {
            printf("%-20s %s\n", strategy_name(r->st), r->note);
            continue;
        }
        char ratio[16] = "-";
        if (base > 0) snprintf(ratio, sizeof ratio, "%.3fx", r->tokens_s / base);
        char fit[48] = "fits"; /* over the device alone: "does not fit", as before --host-memory */
        if (r->over == WP_OVER_DEVICE) snprintf(fit, sizeof fit, "does not fit");
        else if (r->over) snprintf(fit, sizeof fit, "does not fit (%s)", sim_over_name(r->over));
        printf("%-20s %12s %12.0f %7.1f%% %14s %14s %19s %9s", strategy_name(r->st), fmt_seconds(a, sizeof a, r->step_s),
               r->tokens_s, 100 * r->bubble, fmt_bytes(b, sizeof b, (double)r->sent), fmt_bytes(c, sizeof c, (double)r->peak),
               fit, ratio);
        if (host) printf("  %13s", fmt_bytes(d, sizeof d, (double)r->host));
        printf("\n");
    }
}

static void print_csv(const row *rows, int n, double base) {
    /* fits is last so that readers that count columns (scripts/compare_strategies.sh) keep working */
    printf("strategy,step_s,tokens_per_s,bubble,sent_bytes_per_rank,peak_bytes_per_rank,vs_1f1b,note,fits\n");
    for (int i = 0; i < n; i++) {
        const row *r = &rows[i];
        if (!r->shown) continue;
        if (r->ok)
            printf("%s,%.9g,%.9g,%.6f,%zu,%zu,%.6f,%s%s,%s\n", strategy_name(r->st), r->step_s, r->tokens_s, r->bubble, r->sent,
                   r->peak, base > 0 ? r->tokens_s / base : 0, r->over ? "over " : "", sim_over_name(r->over),
                   r->fits ? "true" : "false");
        else
            printf("%s,,,,,,,\"%s\",\n", strategy_name(r->st), r->note);
    }
}

static void print_json(const row *rows, int n, double base, const wp_pipe_shape *ps) {
    printf("{\"nranks\":%d,\"num_microbatches\":%d,\"strategies\":[", ps->nranks, ps->nmb);
    int k = 0;
    for (int i = 0; i < n; i++) {
        const row *r = &rows[i];
        if (!r->shown) continue;
        printf("%s\n{\"strategy\":\"%s\"", k++ ? "," : "", strategy_name(r->st));
        if (r->ok) {
            printf(",\"step_s\":%.9g,\"tokens_per_s\":%.9g,\"bubble\":%.6f,\"sent_bytes_per_rank\":%zu,"
                   "\"peak_bytes_per_rank\":%zu,\"vs_1f1b\":%.6f,\"fits\":%s,\"over\":\"%s\",\"host_bytes_per_rank\":%zu,"
                   "\"host_bytes_per_host\":%zu", r->step_s, r->tokens_s, r->bubble, r->sent, r->peak,
                   base > 0 ? r->tokens_s / base : 0, r->fits ? "true" : "false", sim_over_name(r->over), r->host, r->host_need);
            printf(",\"rank_bubble\":[");
            for (int k = 0; k < r->n; k++) printf("%s%.6f", k ? "," : "", r->rank_bubble[k]);
            printf("],\"rank_sent_bytes\":[");
            for (int k = 0; k < r->n; k++) printf("%s%zu", k ? "," : "", r->rank_sent[k]);
            printf("],\"rank_peak_bytes\":[");
            for (int k = 0; k < r->n; k++) printf("%s%zu", k ? "," : "", r->rank_peak[k]);
            printf("]}");
        } else {
            printf(",\"error\":\"");
            for (const char *c = r->note; *c; c++) printf(*c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
            printf("\"}");
        }
    }
    printf("]}\n");
}

/* One strategy on the layout L: generate, simulate, and (with a trace) draw. 0, or the exit code. */
/* A row whose schedule or layout could not be made: 2 (this strategy cannot run this shape)
 * notes why in the row and the table goes on; 1 is an error of the run. */
static int not_simulated(row *r, int rc, const char *err) {
    if (rc != 2) {
        wp_error("%s", err);
        return 1;
    }
    snprintf(r->note, sizeof r->note, "not simulated: %s", err);
    return 2;
}

static int one(row *r, const wp_opts *o, const wp_pipe_shape *ps, const wp_layout *L, const wp_costs *c, wp_trace *t, int idx) {
    char err[1024];
    wp_schedule s;
    int rc = schedule_generate(r->st, ps->nranks, ps->nmb, L->cfg.n_chunks, &ps->gen, &s, err, sizeof err);
    if (!rc && (rc = schedule_tie(&s, L, err, sizeof err))) sched_free(&s); /* tied: its pieces count too */
    if (rc) return not_simulated(r, rc, err);
    wp_sim sim;
    wp_mem_cfg mc;
    mem_cfg_from_opts(o, L, ps->nranks, &mc);
    rc = simulate_mem(&s, L, c, &mc, t != NULL, &sim, err, sizeof err);
    if (rc) {
        wp_error("%s schedule breaks an invariant: %s", strategy_name(r->st), err);
    } else {
        r->ok = true;
        r->step_s = sim.step_s;
        r->tokens_s = sim.tokens_per_s;
        r->bubble = sim.bubble;
        r->sent = sim.max_sent;
        r->peak = sim.max_peak;
        r->host = sim.max_host;
        r->n = s.nranks;
        r->host_need = sim_host_need(&sim, s.nranks, (int)o->ranks_per_node, mc.cpu);
        r->over = sim_over(&sim, s.nranks, (int)o->ranks_per_node, mc.cpu, (double)o->device_memory, (double)o->host_memory);
        for (int k = 0; k < s.nranks; k++) {
            r->rank_bubble[k] = sim.rank_bubble[k];
            r->rank_sent[k] = sim.rank_sent[k];
            r->rank_peak[k] = sim.rank_peak[k];
        }
        char prefix[48];
        snprintf(prefix, sizeof prefix, "%s ", strategy_name(r->st));
        if (t) draw_trace(t, &s, &sim.run, idx * 1000, prefix, 1);
    }
    sim_free(&sim);
    sched_free(&s);
    return rc ? 1 : 0;
}

/* A strategy whose default chunk count differs from the shared layout's (interleaved-1f1b: 2N
 * when --num-chunks is not given) runs on a layout of its own, with costs of its own. */
static int one_own_layout(row *r, const wp_opts *o, const wp_pipe_shape *ps, const wp_machine *m, wp_trace *t, int idx) {
    char err[1024];
    wp_layout L;
    bool raised;
    int chunks = strategy_default_chunks(r->st, ps->nranks, (int)o->ranks_per_node);
    int rc = layout_from_opts(o, ps->nranks, chunks, &L, &raised, err, sizeof err);
    if (rc) return not_simulated(r, rc, err);
    wp_costs c;
    costs_from_layout(&c, &L, ps->nranks, m);
    rc = one(r, o, ps, &L, &c, t, idx);
    layout_free(&L);
    return rc;
}

static bool needs_own_layout(const wp_opts *o, wp_strategy st, int nranks, const wp_layout *L) {
    return !o->num_chunks && !chunk_layers_listed(o) && strategy_default_chunks(st, nranks, (int)o->ranks_per_node) != L->cfg.n_chunks;
}

static int simulate_all(const wp_opts *o, const wp_pipe_shape *ps, const wp_layout *L, const wp_machine *m, wp_format fmt) {
    char err[1024];
    bool all = o->strategy == (wp_strategy)WP_STRAT_ALL;
    row rows[WP_STRAT_COUNT];
    wp_costs c;
    costs_from_layout(&c, L, ps->nranks, m);
    wp_trace *t = NULL;
    if (o->trace[0] && !(t = trace_open(o->trace, err, sizeof err))) {
        wp_error("%s", err);
        return 2;
    }
    int rc = 0;
    for (int i = 0; i < WP_STRAT_COUNT && !rc; i++) {
        rows[i] = (row){.st = (wp_strategy)i, .shown = all || o->strategy == (wp_strategy)i};
        if (!rows[i].shown && i != (int)strategy_baseline()) continue;
        wp_trace *ti = rows[i].shown ? t : NULL;
        if (needs_own_layout(o, rows[i].st, ps->nranks, L)) rc = one_own_layout(&rows[i], o, ps, m, ti, i);
        else rc = one(&rows[i], o, ps, L, &c, ti, i);
        rows[i].fits = rows[i].over == 0; /* one: sim_over (the CPU backend's device is the host) */
        if (rc == 2 && (all || !rows[i].shown)) rc = 0; /* a row that cannot be laid out says why */
        else if (rc == 2) wp_error("%s", rows[i].note + strlen("not simulated: "));
    }
    if (t && trace_close(t, err, sizeof err) && !rc) {
        wp_error("%s", err);
        rc = 1;
    }
    if (rc) return rc;
    const wp_strategy bs = strategy_baseline();
    double base = rows[bs].ok ? rows[bs].tokens_s : 0;
    if (fmt == WP_FMT_CSV) {
        print_csv(rows, WP_STRAT_COUNT, base);
    } else if (fmt == WP_FMT_JSON) {
        print_json(rows, WP_STRAT_COUNT, base, ps);
    } else {
        setting(o, L, m, ps);
        print_text(rows, WP_STRAT_COUNT, base, m->host_optim);
    }
    return 0;
}

/* --strategy auto: the ranking (autotune.h). Text: the rows that fit, best first, then how many
 * do not and the best of them; csv: every row, the columns of --strategy all plus knobs. */
static int simulate_auto(const wp_opts *o, const wp_pipe_shape *ps, const wp_layout *L, const wp_machine *m,
                         wp_format fmt) {
    char err[1024];
    wp_tuned *rows;
    int n;
    int rc = autotune(o, &rows, &n, err, sizeof err);
    if (rc) {
        wp_error("%s", err);
        return rc;
    }
    int warm = 0; /* the baseline: 1f1b at the given b, M and warm-up, even chunks */
    warmup_extra_from_opts(o, &warm, NULL, err, sizeof err);
    double base = 0;
    for (int i = 0; i < n; i++)
        if (rows[i].k.st == strategy_baseline() && rows[i].k.b == L->cfg.micro_batch && rows[i].k.nmb == ps->nmb &&
            rows[i].k.warmup == warm && !rows[i].k.chunk_auto && rows[i].k.optim_memory == WP_OPTIM_MEM_DEVICE)
            base = rows[i].tokens_s;
    int nfit = 0;
    while (nfit < n && rows[nfit].fits) nfit++;
    if (fmt == WP_FMT_CSV) {
        printf("strategy,step_s,tokens_per_s,bubble,sent_bytes_per_rank,peak_bytes_per_rank,vs_1f1b,note,fits,knobs\n");
        for (int i = 0; i < n; i++)
            printf("%s,%.9g,%.9g,%.6f,%zu,%zu,%.6f,%s%s,%s,%s\n", strategy_name(rows[i].k.st), rows[i].step_s,
                   rows[i].tokens_s, rows[i].bubble, rows[i].sent, rows[i].peak, base > 0 ? rows[i].tokens_s / base : 0,
                   rows[i].over ? "over " : "", sim_over_name(rows[i].over), rows[i].fits ? "true" : "false", rows[i].knobs);
    } else if (fmt == WP_FMT_JSON) {
        printf("{\"nranks\":%d,\"pick\":%s,\"configurations\":[", ps->nranks, nfit ? "0" : "null");
        for (int i = 0; i < n; i++)
            printf("%s\n{\"strategy\":\"%s\",\"knobs\":\"%s\",\"step_s\":%.9g,\"tokens_per_s\":%.9g,\"bubble\":%.6f,"
                   "\"sent_bytes_per_rank\":%zu,\"peak_bytes_per_rank\":%zu,\"vs_1f1b\":%.6f,\"fits\":%s,\"over\":\"%s\","
                   "\"host_bytes_per_rank\":%zu,\"host_bytes_per_host\":%zu}",
                   i ? "," : "", strategy_name(rows[i].k.st), rows[i].knobs, rows[i].step_s, rows[i].tokens_s, rows[i].bubble,
                   rows[i].sent, rows[i].peak, base > 0 ? rows[i].tokens_s / base : 0, rows[i].fits ? "true" : "false",
                   sim_over_name(rows[i].over), rows[i].host, rows[i].host_need);
        printf("]}\n");
    } else {
        char a[32], b[32], c[32];
        const char *limits = o->host_memory > 0 ? "--device-memory and --host-memory" : "--device-memory";
        setting(o, L, m, ps);
        printf("%d configurations of %d sequences per step; those that fit in %s, fastest first:\n\n", n,
               L->cfg.micro_batch * ps->nmb, limits);
        printf("%4s %-20s %12s %12s %8s %14s %14s %9s  %s\n", "rank", "strategy", "step time", "tokens/s", "bubble",
               "sent/rank/step", "peak mem/rank", "vs 1f1b", "knobs");
        for (int i = 0; i < nfit; i++) {
            char ratio[16] = "-";
            if (base > 0) snprintf(ratio, sizeof ratio, "%.3fx", rows[i].tokens_s / base);
            printf("%4d %-20s %12s %12.0f %7.1f%% %14s %14s %9s  %s\n", i + 1, strategy_name(rows[i].k.st),
                   fmt_seconds(a, sizeof a, rows[i].step_s), rows[i].tokens_s, 100 * rows[i].bubble,
                   fmt_bytes(b, sizeof b, (double)rows[i].sent), fmt_bytes(c, sizeof c, (double)rows[i].peak), ratio,
                   rows[i].knobs);
        }
        if (nfit < n)
            printf("\n%d more do not fit (over %s), not ranked; the fastest of them: %s %s, %.0f tokens/s at %s per rank, "
                   "over: %s\n", n - nfit, limits, strategy_name(rows[nfit].k.st), rows[nfit].knobs,
                   rows[nfit].tokens_s, fmt_bytes(c, sizeof c, (double)rows[nfit].peak), sim_over_name(rows[nfit].over));
        if (nfit)
            printf("\npick: %s %s: %.0f tokens/s predicted\n", strategy_name(rows[0].k.st), rows[0].knobs, rows[0].tokens_s);
        else
            printf("\npick: none, no configuration fits in %s\n", limits);
    }
    free(rows);
    return 0;
}

int cmd_simulate(const wp_opts *o) {
    char err[1024];
    const wp_format fmt = o->format; /* text, csv or json: simulate's choices (cli.c) */
    wp_pipe_shape ps;
    wp_machine m;
    wp_layout L;
    bool raised;
    if (pipe_shape_from_opts(o, &ps, err, sizeof err) || machine_from_opts(o, &m, err, sizeof err)) {
        wp_error("%s", err);
        return 2;
    }
    if (m.flops <= 0) {
        wp_error("--device-tflops: simulate needs the speed of one rank in TFLOP/s (e.g. 312 for an A800 in fp16)");
        return 2;
    }
    int rc = layout_from_opts(o, ps.nranks, ps.nranks, &L, &raised, err, sizeof err);
    if (rc) {
        wp_error("%s", err);
        return rc;
    }
    rc = o->strategy == (wp_strategy)WP_STRAT_AUTO ? simulate_auto(o, &ps, &L, &m, fmt) : simulate_all(o, &ps, &L, &m, fmt);
    layout_free(&L);
    return rc;
}
