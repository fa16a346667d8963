/* --strategy auto: enumerate, simulate, rank (autotune.h). */
#include "autotune.h"

#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The search enumerates every configuration first (todo), then simulates them on as many
 * threads as the process may run on: each simulation is independent, and the rows keep the
 * enumeration order, so the ranking is the same as one thread's. */
typedef struct {
    const wp_opts *o;
    wp_opts *work; /* o with one configuration's knobs (simulate_one: each thread its own) */
    wp_machine m;
    wp_knobs *todo;
    int n_todo, cap_todo;
    bool hold; /* autotune_held: knobs whose flags the user set keep their values */
    char *err;
    size_t errlen;
} tuner;

/* The settings a strategy's row in strategies.def lists for the search (its knobs column). */
enum { KNOB_END, KNOB_SEQ_SEGMENTS, KNOB_WZB2_OWNER, KNOB_CHUNKS_PER_RANK, KNOB_I1F1B_ORDER, KNOB_COUNT };
#define NO_KNOBS {KNOB_END}
#define KNOBS(...) {__VA_ARGS__}
#define ROW_(id, name, gen, check, chunks, traits, knobs) knobs,
static const int row_knobs[][3] = {WP_STRATEGIES(ROW_)};
#undef ROW_
static_assert(sizeof row_knobs / sizeof row_knobs[0] == WP_STRAT_COUNT, "knobs for every wp_strategy");

static const struct {
    int flag;     /* held(): the knob keeps o's value (one try, not set) */
    unsigned bit; /* its wp_knobs.given bit */
    int n;        /* values tried */
    bool listed;  /* --chunk-layers listing the chunks holds it too (they fix C) */
} knobs[KNOB_COUNT] = {
    [KNOB_SEQ_SEGMENTS] = {FLAG_seq_segments, WP_KNOB_SEQ_SEGMENTS, 3, false},
    [KNOB_WZB2_OWNER] = {FLAG_wzb2_owner, WP_KNOB_WZB2_OWNER, 2, false},
    [KNOB_CHUNKS_PER_RANK] = {FLAG_num_chunks, WP_KNOB_NUM_CHUNKS, 2, true},
    [KNOB_I1F1B_ORDER] = {FLAG_i1f1b_order, WP_KNOB_I1F1B_ORDER, 2, true},
};

/* k's typed values into o (the strategy, b, M and the knobs k sets), marked set as if given. */
static void set_typed(wp_opts *o, const wp_knobs *k) {
    o->strategy = k->st;
    o->set[FLAG_strategy] = true;
    o->micro_batch_size = k->b;
    o->num_microbatches = k->nmb;
    o->set[FLAG_micro_batch_size] = o->set[FLAG_num_microbatches] = true;
    if (k->given & WP_KNOB_SEQ_SEGMENTS) o->seq_segments = k->seq_segments, o->set[FLAG_seq_segments] = true;
    if (k->given & WP_KNOB_WZB2_OWNER) o->wzb2_owner = k->wzb2_owner, o->set[FLAG_wzb2_owner] = true;
    if (k->given & WP_KNOB_NUM_CHUNKS) o->num_chunks = k->num_chunks, o->set[FLAG_num_chunks] = true;
    if (k->given & WP_KNOB_I1F1B_ORDER) o->i1f1b_order = k->i1f1b_order, o->set[FLAG_i1f1b_order] = true;
    if (k->given & WP_KNOB_OPTIM_MEMORY) o->optimizer_memory = k->optim_memory, o->set[FLAG_optimizer_memory] = true;
}

void autotune_apply(wp_opts *o, const wp_knobs *k) {
    set_typed(o, k);
    if (k->given & WP_KNOB_SPLIT)
        snprintf(o->chunk_layers, sizeof o->chunk_layers, "%s", k->chunk_auto ? "auto" : "even"), o->set[FLAG_chunk_layers] = true;
    if (k->given & WP_KNOB_WARMUP)
        snprintf(o->warmup_extra, sizeof o->warmup_extra, "%d", k->warmup), o->set[FLAG_warmup_extra] = true;
}

static wp_chunk_split knob_split(const wp_knobs *k) {
    if (!(k->given & WP_KNOB_SPLIT)) return WP_SPLIT_FLAGS;
    return k->chunk_auto ? WP_SPLIT_BALANCED : WP_SPLIT_EVEN;
}

static void knob_gen_opts(const wp_knobs *k, wp_gen_opts *g) {
    if (!(k->given & WP_KNOB_WARMUP)) return;
    g->warmup_extra = k->warmup;
    g->warmup_auto = false;
}

/* k as flags, in the order the search sets them: b and M, the split, the warm-up, then the
 * strategy's own knobs in its row's order. */
static void knobs_text(const wp_knobs *k, char *out, size_t len) {
    size_t n = (size_t)snprintf(out, len, "--micro-batch-size %d --num-microbatches %d", k->b, k->nmb);
#define ADD(...) (n += n < len ? (size_t)snprintf(out + n, len - n, __VA_ARGS__) : 0)
    if (k->given & WP_KNOB_SPLIT) ADD(" --chunk-layers %s", k->chunk_auto ? "auto" : "even");
    if (k->given & WP_KNOB_WARMUP) ADD(" --warmup-extra %d", k->warmup);
    /* the default (device) goes unsaid, as before the knob existed */
    if (k->given & WP_KNOB_OPTIM_MEMORY && k->optim_memory == WP_OPTIM_MEM_HOST) ADD(" --optimizer-memory host");
    for (int i = 0; i < 3 && row_knobs[k->st][i] != KNOB_END; i++) {
        const int kn = row_knobs[k->st][i];
        if (!(k->given & knobs[kn].bit)) continue;
        if (kn == KNOB_SEQ_SEGMENTS) ADD(" --seq-segments %d", k->seq_segments);
        if (kn == KNOB_WZB2_OWNER) ADD(" --wzb2-owner %s", cli_enum_name(FLAG_wzb2_owner, k->wzb2_owner));
        if (kn == KNOB_CHUNKS_PER_RANK) ADD(" --num-chunks %d", k->num_chunks);
        if (kn == KNOB_I1F1B_ORDER) ADD(" --i1f1b-order %s", cli_enum_name(FLAG_i1f1b_order, k->i1f1b_order));
    }
#undef ADD
}

/* The simulation of configuration k into row (false: the strategy cannot lay it out). */
static wp_result simulate_one(tuner *t, const wp_knobs *k, wp_tuned *row, bool *made) {
    char err[1024];
    *made = false;
    *t->work = *t->o;
    set_typed(t->work, k);
    wp_pipe_shape ps;
    wp_result rc = pipe_shape_from_opts(t->work, &ps, err, sizeof err);
    if (rc) return rc == WP_BAD_INPUT ? WP_OK : wp_fail(rc, t->err, t->errlen, "%s", err);
    knob_gen_opts(k, &ps.gen);
    wp_layout L;
    bool raised;
    const int chunks = strategy_default_chunks(k->st, ps.nranks, (int)t->work->ranks_per_node);
    rc = layout_split_from_opts(t->work, ps.nranks, chunks, knob_split(k), &L, &raised, err, sizeof err);
    if (rc == WP_BAD_INPUT) return WP_OK;
    if (rc) return wp_fail(rc, t->err, t->errlen, "%s", err);
    if (k->chunk_auto) { /* the same chunks as even ones: no configuration of its own */
        wp_model_cfg even = L.cfg;
        model_cfg_even_chunks(&even, L.cfg.n_chunks);
        if (!memcmp(even.chunk_layers, L.cfg.chunk_layers, sizeof even.chunk_layers)) {
            layout_free(&L);
            return 0;
        }
    }
    wp_schedule s;
    rc = schedule_generate(k->st, ps.nranks, ps.nmb, L.cfg.n_chunks, &ps.gen, &s, err, sizeof err);
    if (!rc && (rc = schedule_tie(&s, &L, err, sizeof err))) sched_free(&s);
    if (rc) {
        layout_free(&L);
        return rc == WP_BAD_INPUT ? WP_OK : wp_fail(rc, t->err, t->errlen, "%s", err);
    }
    wp_costs c;
    wp_machine m = t->m;
    m.host_optim = t->work->optimizer_memory == WP_OPTIM_MEM_HOST;
    costs_from_layout(&c, &L, ps.nranks, &m);
    wp_sim sim;
    wp_mem_cfg mc;
    mem_cfg_from_opts(t->work, &L, ps.nranks, &mc);
    rc = simulate_mem(&s, &L, &c, &mc, false, &sim, err, sizeof err);
    if (rc) {
        snprintf(t->err, t->errlen, "%s %s breaks an invariant: %s", strategy_name(k->st), row->knobs, err);
    } else {
        row->step_s = sim.step_s;
        row->tokens_s = sim.tokens_per_s;
        row->bubble = sim.bubble;
        row->sent = sim.max_sent;
        row->peak = sim.max_peak;
        row->host = sim.max_host;
        /* on the CPU backend the device is the host: host state saves nothing there (sim_over) */
        row->over = sim_over(&sim, s.nranks, (int)t->work->ranks_per_node, mc.cpu, (double)t->o->device_memory,
                             (double)t->o->host_memory);
        row->fits = row->over == 0;
        row->host_need = sim_host_need(&sim, s.nranks, (int)t->work->ranks_per_node, mc.cpu);
        *made = true;
    }
    sim_free(&sim);
    sched_free(&s);
    layout_free(&L);
    return rc;
}

/* Configuration k to simulate. */
static wp_result add(tuner *t, const wp_knobs *k) {
    if (t->n_todo == t->cap_todo) {
        int nc = t->cap_todo ? 2 * t->cap_todo : 64;
        wp_knobs *q = realloc(t->todo, (size_t)nc * sizeof *q);
        if (!q) return wp_fail(WP_FAILED, t->err, t->errlen, "out of memory");
        t->todo = q, t->cap_todo = nc;
    }
    t->todo[t->n_todo++] = *k;
    return WP_OK;
}

/* A knob the search leaves alone: its flag was set (command line or config file) and the
 * caller asked to keep such knobs. Its value is then o's own (the work copy starts as o). */
static bool held(const tuner *t, int flag) { return t->hold && t->o->set[flag]; }

/* Value i of knob kn into k; false past the last one that applies (segments: 2, 4, 8 up to the
 * sequence length; chunks: v = 2, 4 per rank). */
static bool knob_value(const wp_opts *o, int kn, int i, wp_knobs *k) {
    switch (kn) {
    case KNOB_SEQ_SEGMENTS:
        if ((2 << i) > o->seq_length) return false;
        k->seq_segments = 2 << i;
        return true;
    case KNOB_WZB2_OWNER: k->wzb2_owner = i ? WP_WZB2_LAST : WP_WZB2_SPREAD; return true;
    case KNOB_CHUNKS_PER_RANK: k->num_chunks = (2 << i) * (int)o->nranks; return true;
    case KNOB_I1F1B_ORDER: k->i1f1b_order = i ? WP_I1F1B_BREADTH_FIRST : WP_I1F1B_DEPTH_FIRST; return true;
    }
    return false;
}

/* Try every value of knob list ks[0] (and, nested, of the rest) on top of k; a held knob takes
 * one try and is not set. */
static wp_result sweep(tuner *t, const int *ks, int left, wp_knobs k) {
    if (!left || *ks == KNOB_END) return add(t, &k);
    const bool fixed = held(t, knobs[*ks].flag) || (knobs[*ks].listed && chunk_layers_listed(t->o));
    wp_result rc = WP_OK;
    for (int i = 0; i < (fixed ? 1 : knobs[*ks].n) && !rc; i++) {
        wp_knobs v = k;
        if (!knob_value(t->o, *ks, i, &v)) break;
        if (fixed) v = k; /* o's own value */
        else v.given |= knobs[*ks].bit;
        rc = sweep(t, ks + 1, left - 1, v);
    }
    return rc;
}

/* Every knob setting of strategy st at micro-batch size b (M = nmb); a held knob (held()) is
 * not set and keeps o's value. */
static wp_result strategy_knobs(tuner *t, wp_strategy st, int b, int nmb) {
    const wp_opts *o = t->o;
    const bool listed = chunk_layers_listed(o), slow = o->ranks_per_node > 0 && o->ranks_per_node < o->nranks;
    const bool cl_fixed = listed || held(t, FLAG_chunk_layers), warm_fixed = held(t, FLAG_warmup_extra);
    const bool warmup = strategy_has(st, WP_TRAIT_WARMUP);
    int held_warm = 0;
    if (warm_fixed) {
        char err[256];
        if (warmup_extra_from_opts(o, &held_warm, NULL, err, sizeof err)) held_warm = -1;
    }
    const bool om_fixed = held(t, FLAG_optimizer_memory);
    for (int om = 0; om < (om_fixed ? 1 : 2); om++)
        for (int cl = 0; cl < (cl_fixed ? 1 : 2); cl++) {
            wp_result rc = WP_OK;
            for (int e = 0; e <= (warmup && slow && !warm_fixed ? 2 : 0) && !rc; e++) {
                wp_knobs k = {.st = st, .b = b, .nmb = nmb, .warmup = warm_fixed ? held_warm : e, .chunk_auto = cl,
                              .optim_memory = om ? WP_OPTIM_MEM_HOST : WP_OPTIM_MEM_DEVICE};
                if (!cl_fixed) k.given |= WP_KNOB_SPLIT;
                if (warmup && !warm_fixed) k.given |= WP_KNOB_WARMUP;
                if (!om_fixed) k.given |= WP_KNOB_OPTIM_MEMORY;
                rc = sweep(t, row_knobs[st], 3, k);
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

/* One simulation per configuration, on `threads` threads taking the next index in turn. */
typedef struct {
    const tuner *t;
    wp_tuned *out; /* one per configuration */
    bool *made;
    wp_result *rc;
    char (*why)[1024]; /* each configuration's failure */
    atomic_int next;
} pool;

static void *worker(void *arg) {
    pool *p = arg;
    tuner t = *p->t;
    wp_opts *work = malloc(sizeof *work);
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < t.n_todo;) {
        wp_tuned *row = &p->out[i];
        *row = (wp_tuned){.k = t.todo[i]};
        knobs_text(&row->k, row->knobs, sizeof row->knobs);
        if (!work) {
            p->rc[i] = wp_fail(WP_FAILED, p->why[i], sizeof p->why[i], "out of memory");
            continue;
        }
        t.work = work, t.err = p->why[i], t.errlen = sizeof p->why[i];
        p->rc[i] = simulate_one(&t, &row->k, row, &p->made[i]);
    }
    free(work);
    return NULL;
}

/* The CPUs this process may run on (its affinity mask: taskset, a cgroup's cpuset, Slurm). */
static int usable_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    const int n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > 64 ? 64 : n;
}

/* Simulate t's configurations; *rows the ones a strategy could lay out, in enumeration order.
 * On failure the first failing configuration's message, as one thread would have stopped there. */
static wp_result run_all(const tuner *t, wp_tuned **rows, int *n) {
    const int m = t->n_todo;
    pool p = {.t = t, .out = calloc((size_t)m + 1, sizeof *p.out), .made = calloc((size_t)m + 1, sizeof *p.made),
              .rc = calloc((size_t)m + 1, sizeof *p.rc), .why = calloc((size_t)m + 1, sizeof *p.why)};
    wp_result rc = p.out && p.made && p.rc && p.why ? WP_OK : wp_fail(WP_FAILED, t->err, t->errlen, "out of memory");
    atomic_init(&p.next, 0);
    if (!rc) {
        const int cpus = usable_cpus(), threads = cpus < m ? cpus : m;
        int started = 0;
        pthread_t tid[64];
        for (int i = 1; i < threads; i++) /* and this thread: a thread that cannot start is one fewer */
            if (pthread_create(&tid[started], NULL, worker, &p) == 0) started++;
        worker(&p);
        for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
        int k = 0;
        for (int i = 0; i < m && !rc; i++) {
            if (p.rc[i]) {
                rc = p.rc[i];
                snprintf(t->err, t->errlen, "%s", p.why[i]);
            } else if (p.made[i]) {
                p.out[i].seq = k;
                p.out[k++] = p.out[i];
            }
        }
        *n = k;
    }
    free(p.made);
    free(p.rc);
    free(p.why);
    if (rc) {
        free(p.out);
        return rc;
    }
    *rows = p.out;
    return WP_OK;
}

static wp_result search(const wp_opts *o, bool hold, wp_tuned **rows, int *n, char *err, size_t errlen) {
    *rows = NULL;
    *n = 0;
    tuner t = {.o = o, .err = err, .errlen = errlen, .hold = hold};
    wp_result rc = machine_from_opts(o, &t.m, err, errlen);
    if (rc) return rc;
    if (t.m.flops <= 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--device-tflops: --strategy auto simulates, it needs the speed of one rank in "
                        "TFLOP/s (or a calibration fragment, --config)");
    wp_pipe_shape ps;
    if ((rc = pipe_shape_from_opts(o, &ps, err, errlen))) return rc;
    const int64_t total = o->micro_batch_size * ps.nmb; /* sequences per step, kept */
    int64_t bs[64];
    int nb = 0;
    for (int64_t b = 1; b <= total && nb < 62; b *= 2)
        if (total % b == 0) bs[nb++] = b;
    if (o->micro_batch_size & (o->micro_batch_size - 1)) bs[nb++] = o->micro_batch_size; /* not a power of two */
    if (held(&t, FLAG_micro_batch_size) || held(&t, FLAG_num_microbatches)) bs[0] = o->micro_batch_size, nb = 1;
    for (int i = 0; i < nb && !rc; i++)
        for (int s = 0; s < WP_STRAT_COUNT && !rc; s++) {
            rc = strategy_knobs(&t, (wp_strategy)s, (int)bs[i], (int)(total / bs[i]));
        }
    if (!rc) rc = run_all(&t, rows, n);
    free(t.todo);
    if (rc) return rc;
    qsort(*rows, (size_t)*n, sizeof **rows, cmp_rows);
    return 0;
}

wp_result autotune(const wp_opts *o, wp_tuned **rows, int *n, char *err, size_t errlen) {
    return search(o, false, rows, n, err, errlen);
}

wp_result autotune_held(const wp_opts *o, wp_tuned **rows, int *n, char *err, size_t errlen) {
    return search(o, true, rows, n, err, errlen);
}
