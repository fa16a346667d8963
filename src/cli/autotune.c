/* --strategy auto: enumerate, simulate, rank (autotune.h). */
#include "autotune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const wp_opts *o;
    wp_opts *work; /* o with one configuration's knobs */
    wp_machine m;
    wp_tuned *rows;
    int n, cap;
    bool hold; /* autotune_held: knobs whose flags the user set keep their values */
    char *err;
    size_t errlen;
} tuner;

int autotune_apply(wp_opts *o, const wp_tuned *t, char *err, size_t errlen) {
    int rc = cli_set(o, "strategy", strategy_name(t->st), "--strategy auto", err, errlen);
    char buf[sizeof t->knobs];
    snprintf(buf, sizeof buf, "%s", t->knobs);
    char *save = NULL;
    for (char *k = strtok_r(buf, " ", &save); k && !rc; k = strtok_r(NULL, " ", &save)) {
        char *v = strtok_r(NULL, " ", &save);
        if (strncmp(k, "--", 2) != 0 || !v) return cli_fail(err, errlen, "--strategy auto: bad knobs '%s'", t->knobs);
        rc = cli_set(o, k + 2, v, "--strategy auto", err, errlen);
    }
    return rc;
}

/* Simulate the configuration in t->work; a row unless the strategy cannot lay it out. */
static int try_one(tuner *t, wp_strategy st, const char *knobs, int b, int nmb, int warmup, bool chunk_auto) {
    wp_tuned row = {.st = st, .b = b, .nmb = nmb, .warmup = warmup, .chunk_auto = chunk_auto};
    snprintf(row.knobs, sizeof row.knobs, "%s", knobs);
    if (autotune_apply(t->work, &row, t->err, t->errlen)) return 2;
    char err[1024];
    wp_pipe_shape ps;
    int rc = pipe_shape_from_opts(t->work, &ps, err, sizeof err);
    if (rc) return rc == 2 ? 0 : (snprintf(t->err, t->errlen, "%s", err), rc);
    wp_layout L;
    bool raised;
    const int chunks = strategy_default_chunks(st, ps.nranks, (int)t->work->ranks_per_node);
    rc = layout_from_opts(t->work, ps.nranks, chunks, &L, &raised, err, sizeof err);
    if (rc == 2) return 0;
    if (rc) return snprintf(t->err, t->errlen, "%s", err), rc;
    if (chunk_auto) { /* the same chunks as even ones: no configuration of its own */
        wp_model_cfg even = L.cfg;
        model_cfg_even_chunks(&even, L.cfg.n_chunks);
        if (!memcmp(even.chunk_layers, L.cfg.chunk_layers, sizeof even.chunk_layers)) {
            layout_free(&L);
            return 0;
        }
    }
    wp_schedule s;
    rc = schedule_generate(st, ps.nranks, ps.nmb, L.cfg.n_chunks, &ps.gen, &s, err, sizeof err);
    if (!rc && (rc = schedule_tie(&s, &L, err, sizeof err))) sched_free(&s);
    if (rc) {
        layout_free(&L);
        return rc == 2 ? 0 : (snprintf(t->err, t->errlen, "%s", err), rc);
    }
    wp_costs c;
    costs_from_layout(&c, &L, ps.nranks, &t->m);
    wp_sim sim;
    wp_mem_cfg mc;
    mem_cfg_from_opts(t->o, &L, ps.nranks, &mc);
    rc = simulate_mem(&s, &L, &c, &mc, false, &sim, err, sizeof err);
    if (rc) {
        snprintf(t->err, t->errlen, "%s %s breaks an invariant: %s", strategy_name(st), knobs, err);
    } else {
        row.step_s = sim.step_s;
        row.tokens_s = sim.tokens_per_s;
        row.bubble = sim.bubble;
        row.sent = sim.max_sent;
        row.peak = sim.max_peak;
        row.fits = t->o->device_memory <= 0 || sim.max_peak <= (size_t)t->o->device_memory;
        if (t->n == t->cap) {
            int nc = t->cap ? 2 * t->cap : 64;
            wp_tuned *q = realloc(t->rows, (size_t)nc * sizeof *q);
            if (!q) rc = 1, snprintf(t->err, t->errlen, "out of memory");
            else t->rows = q, t->cap = nc;
        }
        row.seq = t->n;
        if (!rc) t->rows[t->n++] = row;
    }
    sim_free(&sim);
    sched_free(&s);
    layout_free(&L);
    return rc;
}

/* A knob the search leaves alone: its flag was set (command line or config file) and the
 * caller asked to keep such knobs. Its value is then o's own (t->work starts as a copy of o). */
static bool held(const tuner *t, int flag) { return t->hold && t->o->set[flag]; }

static bool takes_warmup(wp_strategy s) {
    return s == WP_STRAT_1F1B || s == WP_STRAT_ZBH1 || s == WP_STRAT_ZBH2 || s == WP_STRAT_SEQ1F1B;
}

/* Every knob setting of strategy st at micro-batch size b (M = nmb); a held knob (held()) is
 * left out of the knobs string and keeps o's value. */
static int strategy_knobs(tuner *t, wp_strategy st, int b, int nmb) {
    const wp_opts *o = t->o;
    const bool listed = chunk_layers_listed(o), slow = o->ranks_per_node > 0 && o->ranks_per_node < o->nranks;
    const bool cl_fixed = listed || held(t, FLAG_chunk_layers), warm_fixed = held(t, FLAG_warmup_extra);
    const int n = (int)o->nranks;
    char base[96], k[240];
    snprintf(base, sizeof base, "--micro-batch-size %d --num-microbatches %d", b, nmb);
    int held_warm = 0;
    if (warm_fixed) {
        char err[256];
        if (warmup_extra_from_opts(o, &held_warm, NULL, err, sizeof err)) held_warm = -1;
    }
    for (int cl = 0; cl < (cl_fixed ? 1 : 2); cl++) {
        char chunks[64] = "";
        if (!cl_fixed) snprintf(chunks, sizeof chunks, " --chunk-layers %s", cl ? "auto" : "even");
        int rc = 0;
        for (int e = 0; e <= (takes_warmup(st) && slow && !warm_fixed ? 2 : 0) && !rc; e++) {
            char warm[32] = "";
            if (!warm_fixed) snprintf(warm, sizeof warm, " --warmup-extra %d", e);
            const int we = warm_fixed ? held_warm : e;
            if (st == WP_STRAT_SEQ1F1B) {
                const bool fixed = held(t, FLAG_seq_segments);
                for (int seg = 2; seg <= (fixed ? 2 : 8) && seg <= o->seq_length && !rc; seg *= 2) {
                    char segs[32] = "";
                    if (!fixed) snprintf(segs, sizeof segs, " --seq-segments %d", seg);
                    snprintf(k, sizeof k, "%s%s%s%s", base, chunks, warm, segs);
                    rc = try_one(t, st, k, b, nmb, we, cl);
                }
            } else if (st == WP_STRAT_WZB2) {
                const bool fixed = held(t, FLAG_wzb2_owner);
                for (int last = 0; last < (fixed ? 1 : 2) && !rc; last++) {
                    char own[32] = "";
                    if (!fixed) snprintf(own, sizeof own, " --wzb2-owner %s", last ? "last" : "spread");
                    snprintf(k, sizeof k, "%s%s%s", base, chunks, own);
                    rc = try_one(t, st, k, b, nmb, we, cl);
                }
            } else if (st == WP_STRAT_I1F1B && !listed) {
                const bool vfixed = held(t, FLAG_num_chunks), ofixed = held(t, FLAG_i1f1b_order);
                for (int v = 2; v <= (vfixed ? 2 : 4) && !rc; v *= 2)
                    for (int bf = 0; bf < (ofixed ? 1 : 2) && !rc; bf++) {
                        char nc[40] = "", ord[40] = "";
                        if (!vfixed) snprintf(nc, sizeof nc, " --num-chunks %d", v * n);
                        if (!ofixed) snprintf(ord, sizeof ord, " --i1f1b-order %s", bf ? "breadth-first" : "depth-first");
                        snprintf(k, sizeof k, "%s%s%s%s", base, chunks, nc, ord);
                        rc = try_one(t, st, k, b, nmb, we, cl);
                    }
            } else {
                snprintf(k, sizeof k, "%s%s%s", base, chunks, takes_warmup(st) ? warm : "");
                rc = try_one(t, st, k, b, nmb, we, cl);
            }
        }
        if (rc) return rc;
    }
    return 0;
}

static int cmp_rows(const void *x, const void *y) {
    const wp_tuned *a = x, *b = y;
    if (a->fits != b->fits) return a->fits ? -1 : 1;
    if (a->tokens_s != b->tokens_s) return a->tokens_s > b->tokens_s ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq); /* qsort is not stable: the enumeration order decides ties */
}

static int search(const wp_opts *o, bool hold, wp_tuned **rows, int *n, char *err, size_t errlen) {
    *rows = NULL;
    *n = 0;
    tuner t = {.o = o, .err = err, .errlen = errlen, .hold = hold};
    int rc = machine_from_opts(o, &t.m, err, errlen);
    if (rc) return rc;
    if (t.m.flops <= 0)
        return cli_fail(err, errlen, "--device-tflops: --strategy auto simulates, it needs the speed of one rank in "
                        "TFLOP/s (or a calibration fragment, --config)");
    wp_pipe_shape ps;
    if ((rc = pipe_shape_from_opts(o, &ps, err, errlen))) return rc;
    if (!(t.work = malloc(sizeof *t.work))) return snprintf(err, errlen, "out of memory"), 1;
    const int64_t total = o->micro_batch_size * ps.nmb; /* sequences per step, kept */
    int64_t bs[64];
    int nb = 0;
    for (int64_t b = 1; b <= total && nb < 62; b *= 2)
        if (total % b == 0) bs[nb++] = b;
    if (o->micro_batch_size & (o->micro_batch_size - 1)) bs[nb++] = o->micro_batch_size; /* not a power of two */
    if (held(&t, FLAG_micro_batch_size) || held(&t, FLAG_num_microbatches)) bs[0] = o->micro_batch_size, nb = 1;
    for (int i = 0; i < nb && !rc; i++)
        for (int s = 0; s < WP_STRAT_COUNT && !rc; s++) {
            *t.work = *o;
            rc = strategy_knobs(&t, (wp_strategy)s, (int)bs[i], (int)(total / bs[i]));
        }
    free(t.work);
    if (rc) {
        free(t.rows);
        return rc;
    }
    qsort(t.rows, (size_t)t.n, sizeof *t.rows, cmp_rows);
    *rows = t.rows;
    *n = t.n;
    return 0;
}

int autotune(const wp_opts *o, wp_tuned **rows, int *n, char *err, size_t errlen) {
    return search(o, false, rows, n, err, errlen);
}

int autotune_held(const wp_opts *o, wp_tuned **rows, int *n, char *err, size_t errlen) {
    return search(o, true, rows, n, err, errlen);
}
