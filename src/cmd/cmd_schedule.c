/* weipipe schedule: generate one strategy's action lists, validate them, print them with their
 * summary, and draw their timeline (--svg, --trace; text timeline in text format).
 * Exit 0 only when the lists validate; 1 when they break an invariant; 2 for bad input.
 * Test hook: WEIPIPE_SCHEDULE_BREAK=<mutation> (mutate.h) breaks the generated lists on purpose
 * before validation, so that the exit code 1 path can be tested. */
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "commands.h"
#include "draw.h"
#include "log.h"
#include "mutate.h"
#include "print.h"
#include "seq_split.h"
#include "validate.h"

static int apply_break_hook(wp_schedule *s) {
    const char *name = getenv("WEIPIPE_SCHEDULE_BREAK");
    if (!name || !*name) return 0;
    wp_mutation m;
    char err[256];
    if (!mutation_parse(name, &m)) {
        wp_error("WEIPIPE_SCHEDULE_BREAK: '%s' is not a mutation (drop-send, swap-version, double-gw, reorder-recv, "
                 "free-early, drop-acc, update-early)", name);
        return 2;
    }
    int rc = sched_mutate(s, m, err, sizeof err);
    if (rc) wp_error("WEIPIPE_SCHEDULE_BREAK: %s", err);
    return rc;
}

static void title(char *out, size_t len, const wp_schedule *s, const wp_sim *sim, bool unit) {
    char st[32];
    if (unit)
        snprintf(out, len, "%s: N = %d ranks, M = %d micro-batches; step %g (F = B = W = 1, transfers 0.25), bubble %.1f%%",
                 strategy_name(s->strategy), s->nranks, sched_samples(s), sim->step_s, 100 * sim->bubble);
    else
        snprintf(out, len, "%s: N = %d ranks, M = %d micro-batches; step %s, bubble %.1f%%", strategy_name(s->strategy),
                 s->nranks, sched_samples(s), fmt_seconds(st, sizeof st, sim->step_s), 100 * sim->bubble);
}

static int write_svg(const char *path, const wp_schedule *s, const wp_sim *sim, const wp_draw_opts *d) {
    FILE *f = fopen(path, "w");
    if (!f) {
        wp_error("--svg: cannot create '%s'", path);
        return 2;
    }
    draw_svg(f, s, &sim->run, d);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        wp_error("--svg: writing '%s' failed", path);
        return 1;
    }
    return 0;
}

static int write_trace(const char *path, const wp_schedule *s, const wp_sim *sim, bool unit) {
    char err[512];
    wp_trace *t = trace_open(path, err, sizeof err);
    if (!t) {
        wp_error("%s", err);
        return 2;
    }
    draw_trace(t, s, &sim->run, 0, "", unit ? 1e-3 : 1);
    if (trace_close(t, err, sizeof err)) {
        wp_error("%s", err);
        return 1;
    }
    return 0;
}

/* The timeline: simulated with the machine when its speed is given, else with unit times. */
static int timeline(const wp_opts *o, const wp_schedule *s, const wp_layout *L, wp_format fmt) {
    bool text = fmt == WP_FMT_TEXT, unit = o->device_tflops <= 0;
    if (!text && !o->svg[0] && !o->trace[0]) return 0;
    char err[1024], head[256];
    wp_costs c;
    wp_machine m;
    if (machine_from_opts(o, &m, err, sizeof err)) {
        wp_error("%s", err);
        return 2;
    }
    if (unit) costs_unit(&c, s->nchunks, 0.25);
    else costs_from_layout(&c, L, s->nranks, &m);
    wp_sim sim;
    if (simulate(s, unit ? NULL : L, &c, true, &sim, err, sizeof err)) {
        wp_error("%s", err);
        sim_free(&sim);
        return 1;
    }
    title(head, sizeof head, s, &sim, unit);
    wp_draw_opts d = {.title = head, .unit_time = unit, .step = 0};
    int rc = 0;
    if (text) {
        fputc('\n', stdout);
        draw_text(stdout, s, &sim.run, &d, 160);
    }
    if (!rc && o->svg[0]) rc = write_svg(o->svg, s, &sim, &d);
    if (!rc && o->trace[0]) rc = write_trace(o->trace, s, &sim, unit);
    sim_free(&sim);
    return rc;
}

static void model_line(const wp_layout *L, bool raised) {
    const wp_model_cfg *m = &L->cfg;
    printf("model: %d layers, h %d, s %d, b %d, %zu parameters, %s precision%s\n", m->n_layers, m->h, m->seq, m->micro_batch,
           L->total_numel, precision_name(m->precision),
           raised ? " (default model, layers raised to one per chunk for the byte counts)" : "");
}

static int run(const wp_opts *o, wp_schedule *s, const wp_layout *L, bool raised, wp_format fmt) {
    char err[1024];
    int rc = apply_break_hook(s);
    if (rc) return rc;
    wp_run rep;
    rc = sched_validate(s, L, &rep, err, sizeof err);
    if (rc) {
        wp_error("%s schedule breaks an invariant: %s", strategy_name(s->strategy), err);
        run_free(&rep);
        return 1;
    }
    if (fmt == WP_FMT_CSV) {
        print_schedule_csv(stdout, s);
    } else if (fmt == WP_FMT_JSON) {
        print_schedule_json(stdout, s, &rep);
    } else {
        print_schedule_text(stdout, s);
        model_line(L, raised);
        print_report_text(stdout, s, &rep, true);
        printf("valid: every rule of docs/schedules.md holds over two consecutive steps\n");
    }
    run_free(&rep);
    return timeline(o, s, L, fmt);
}

int cmd_schedule(const wp_opts *o) {
    char err[1024];
    const wp_format fmt = o->format; /* text, csv or json: schedule's choices (cli.c) */
    const wp_strategy st = o->strategy;
    if (st >= WP_STRAT_COUNT) {
        wp_error("--strategy: '%s' draws one strategy at a time (all and auto are for simulate)",
                 cli_enum_name(FLAG_strategy, st));
        return 2;
    }
    wp_pipe_shape ps;
    wp_layout L;
    bool raised;
    int chunks = strategy_default_chunks(st, (int)o->nranks, (int)o->ranks_per_node);
    int rc = pipe_shape_from_opts(o, &ps, err, sizeof err);
    if (rc == 0) rc = layout_from_opts(o, ps.nranks, chunks, &L, &raised, err, sizeof err);
    if (rc) {
        wp_error("%s", err);
        return rc;
    }
    wp_schedule s;
    rc = schedule_generate(st, ps.nranks, ps.nmb, L.cfg.n_chunks, &ps.gen, &s, err, sizeof err);
    if (!rc && (rc = schedule_tie(&s, &L, err, sizeof err))) sched_free(&s); /* tied: its pieces, as train runs them */
    if (rc) {
        wp_error("%s", err);
        layout_free(&L);
        return rc;
    }
    rc = run(o, &s, &L, raised, fmt);
    sched_free(&s);
    layout_free(&L);
    return rc;
}
