/* --strategy auto: enumerate, simulate, rank (autotune.h). */
#include "autotune.h"

#include <assert.h>
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

/* The settings a strategy's row in strategies.def lists for the search (its knobs column). */
enum { KNOB_END, KNOB_SEQ_SEGMENTS, KNOB_WZB2_OWNER, KNOB_CHUNKS_PER_RANK, KNOB_I1F1B_ORDER, KNOB_COUNT };
#define NO_KNOBS {KNOB_END}
#define KNOBS(...) {__VA_ARGS__}
#define ROW_(id, name, gen, check, chunks, traits, knobs) knobs,
static const int row_knobs[][3] = {WP_STRATEGIES(ROW_)};
#undef ROW_
static_assert(sizeof row_knobs / sizeof row_knobs[0] == WP_STRAT_COUNT, "knobs for every wp_strategy");

static const struct {
    int flag;     /* held(): the knob keeps o's value (one try, not written) */
    const char *opt;
    int n;        /* values tried */
    bool listed;  /* --chunk-layers listing the chunks holds it too (they fix C) */
} knobs[KNOB_COUNT] = {
    [KNOB_SEQ_SEGMENTS] = {FLAG_seq_segments, "--seq-segments", 3, false},
    [KNOB_WZB2_OWNER] = {FLAG_wzb2_owner, "--wzb2-owner", 2, false},
    [KNOB_CHUNKS_PER_RANK] = {FLAG_num_chunks, "--num-chunks", 2, true},
    [KNOB_I1F1B_ORDER] = {FLAG_i1f1b_order, "--i1f1b-order", 2, true},
};

/* Value i of knob k into v; false past the last one that applies (segments: 2, 4, 8 up to the
 * sequence length; chunks: v = 2, 4 per rank). */
static bool knob_value(const wp_opts *o, int k, int i, char *v, size_t len) {
    switch (k) {
    case KNOB_SEQ_SEGMENTS:
        if ((2 << i) > o->seq_length) return false;
        snprintf(v, len, "%d", 2 << i);
        return true;
    case KNOB_WZB2_OWNER: snprintf(v, len, "%s", i ? "last" : "spread"); return true;
    case KNOB_CHUNKS_PER_RANK: snprintf(v, len, "%d", (2 << i) * (int)o->nranks); return true;
    case KNOB_I1F1B_ORDER: snprintf(v, len, "%s", i ? "breadth-first" : "depth-first"); return true;
    }
    return false;
}

typedef struct {
    wp_strategy st;
    int b, nmb, warmup;
    bool chunk_auto;
} try_at;

/* Try every value of knob list ks[0] (and, nested, of the rest) after the settings already in
 * k; a held knob takes one try at its first value and is not written. */
static int sweep(tuner *t, const int *ks, int left, char *k, size_t klen, const try_at *a) {
    if (!left || *ks == KNOB_END) return try_one(t, a->st, k, a->b, a->nmb, a->warmup, a->chunk_auto);
    const bool fixed = held(t, knobs[*ks].flag) || (knobs[*ks].listed && chunk_layers_listed(t->o));
    const size_t at = strlen(k);
    int rc = 0;
    for (int i = 0; i < (fixed ? 1 : knobs[*ks].n) && !rc; i++) {
        char v[32];
        if (!knob_value(t->o, *ks, i, v, sizeof v)) break;
        if (!fixed) snprintf(k + at, klen - at, " %s %s", knobs[*ks].opt, v);
        rc = sweep(t, ks + 1, left - 1, k, klen, a);
        k[at] = 0;
    }
    return rc;
}

/* Every knob setting of strategy st at micro-batch size b (M = nmb); a held knob (held()) is
 * left out of the knobs string and keeps o's value. */
static int strategy_knobs(tuner *t, wp_strategy st, int b, int nmb) {
    const wp_opts *o = t->o;
    const bool listed = chunk_layers_listed(o), slow = o->ranks_per_node > 0 && o->ranks_per_node < o->nranks;
    const bool cl_fixed = listed || held(t, FLAG_chunk_layers), warm_fixed = held(t, FLAG_warmup_extra);
    const bool warmup = strategy_has(st, WP_TRAIT_WARMUP);
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
        for (int e = 0; e <= (warmup && slow && !warm_fixed ? 2 : 0) && !rc; e++) {
            char warm[32] = "";
            if (!warm_fixed) snprintf(warm, sizeof warm, " --warmup-extra %d", e);
            const try_at a = {.st = st, .b = b, .nmb = nmb, .warmup = warm_fixed ? held_warm : e, .chunk_auto = cl};
            snprintf(k, sizeof k, "%s%s%s", base, chunks, warmup ? warm : "");
            rc = sweep(t, row_knobs[st], 3, k, sizeof k, &a);
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
