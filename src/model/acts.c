/* The memory plan of one (chunk, micro-batch): which buffers F keeps for B, and which B keeps
 * for the W-pass when the backward is split (zero-bubble style, as in WeiPipe-zero-bubble).
 * One function lays the buffers out for both measuring and allocating, so the size a schedule
 * predicts (model_acts_bytes) is exactly what model_acts_create and B allocate.
 * Needs no kernels: the schedule simulator links it without a backend. */
#include "model_impl.h"

wp_dims model_dims(const wp_model_cfg *cfg, wp_dtype compute) {
    wp_dims d;
    d.b = cfg->micro_batch;
    d.s = cfg->seq;
    d.T = cfg->micro_batch * cfg->seq;
    d.h = cfg->h;
    d.nh = cfg->n_heads;
    d.nkv = cfg->n_kv_heads;
    d.hd = cfg->head_dim;
    d.q = cfg->n_heads * cfg->head_dim;
    d.kv = cfg->n_kv_heads * cfg->head_dim;
    d.f = cfg->ffn;
    d.V = cfg->vocab;
    d.eps = (float)cfg->norm_eps;
    d.theta = (float)cfg->rope_theta;
    d.rope = cfg->rope_scaling;
    d.cdt = compute;
    d.ct = compute == WP_F32 ? 4 : 2;
    d.pos0 = 0;
    d.seq_full = cfg->seq;
    d.pos_restart = cfg->doc_mask && cfg->doc_positions == WP_DOC_POS_RESTART;
    return d;
}

wp_dims model_dims_segment(const wp_model_cfg *cfg, wp_dtype compute, int t0, int t1) {
    wp_dims d = model_dims(cfg, compute);
    d.s = t1 - t0;
    d.T = cfg->micro_batch * d.s;
    d.pos0 = t0;
    return d;
}

void *arena_take(wp_arena *ar, size_t bytes) {
    size_t at = (ar->used + WP_ARENA_ALIGN - 1) / WP_ARENA_ALIGN * WP_ARENA_ALIGN;
    ar->used = at + bytes;
    return ar->base ? ar->base + at : NULL;
}

size_t arena_size(const wp_arena *ar) {
    return (ar->used + WP_ARENA_ALIGN - 1) / WP_ARENA_ALIGN * WP_ARENA_ALIGN;
}

static void *take_ct(wp_arena *ar, const wp_dims *d, int rows, int cols) {
    return arena_take(ar, (size_t)rows * (size_t)cols * d->ct);
}

static float *take_f32(wp_arena *ar, size_t n) { return arena_take(ar, n * sizeof(float)); }

/* The forward results the W-pass reads (inputs of every linear and norm, besides x). */
static void plan_block_wpass_inputs(wp_arena *ar, const wp_dims *d, wp_block_acts *b) {
    b->rstd1 = take_f32(ar, (size_t)d->T);
    b->n1 = take_ct(ar, d, d->T, d->h);
    b->att = take_ct(ar, d, d->T, d->q);
    b->x1 = take_ct(ar, d, d->T, d->h);
    b->rstd2 = take_f32(ar, (size_t)d->T);
    b->n2 = take_ct(ar, d, d->T, d->h);
    b->sw = take_ct(ar, d, d->T, d->f);
}

/* The forward results only B reads. */
static void plan_block_b_only(wp_arena *ar, const wp_dims *d, wp_block_acts *b) {
    b->q = take_ct(ar, d, d->T, d->q);
    b->k = take_ct(ar, d, d->T, d->kv);
    b->v = take_ct(ar, d, d->T, d->kv);
    b->lse = take_f32(ar, (size_t)d->T * (size_t)d->nh);
    b->gate = take_ct(ar, d, d->T, d->f);
    b->up = take_ct(ar, d, d->T, d->f);
}

/* A segment that later segments attend to keeps its K/V even under recompute (they read them
 * in their F and B), and the accumulators of the dK/dV those later segments' B hand back. */
static void plan_block_kv_later(wp_arena *ar, const wp_dims *d, bool recompute, wp_block_acts *b, void **dk_acc,
                                void **dv_acc) {
    if (recompute) {
        b->k = take_ct(ar, d, d->T, d->kv);
        b->v = take_ct(ar, d, d->T, d->kv);
    }
    *dk_acc = take_ct(ar, d, d->T, d->kv);
    *dv_acc = take_ct(ar, d, d->T, d->kv);
}

void acts_plan_fwd(const wp_layout *L, int chunk, const wp_dims *d, wp_arena *ar, wp_acts *a) {
    const wp_model_cfg *cfg = &L->cfg;
    if (cfg->doc_mask) {
        int32_t *lo = arena_take(ar, (size_t)d->T * sizeof(int32_t));
        if (a) a->doc_lo = lo;
    }
    for (int i = 0; i < cfg->chunk_layers[chunk]; i++) {
        wp_block_acts scratch = {0}, *b = a ? &a->blocks[i] : &scratch;
        b->x = take_ct(ar, d, d->T, d->h);
        if (!cfg->recompute) {
            plan_block_wpass_inputs(ar, d, b);
            plan_block_b_only(ar, d, b);
        }
        if (dims_kv_later(d)) {
            void *dk = NULL, *dv = NULL;
            plan_block_kv_later(ar, d, cfg->recompute, b, &dk, &dv);
            if (a) {
                a->dk_acc[i] = dk;
                a->dv_acc[i] = dv;
            }
        }
    }
    if (chunk == cfg->n_chunks - 1) {
        void *x_final = take_ct(ar, d, d->T, d->h);
        float *rstd_final = take_f32(ar, (size_t)d->T);
        void *n_final = take_ct(ar, d, d->T, d->h);
        float *lse_head = take_f32(ar, (size_t)d->T);
        float *losses = take_f32(ar, (size_t)d->T);
        void *dn_head = take_ct(ar, d, d->T, d->h);
        if (a) {
            a->dn_head = dn_head;
            a->x_final = x_final;
            a->rstd_final = rstd_final;
            a->n_final = n_final;
            a->lse_head = lse_head;
            a->losses = losses;
        }
    }
}

static void plan_block_grads(wp_arena *ar, const wp_dims *d, wp_block_grads *g) {
    g->dq = take_ct(ar, d, d->T, d->q);
    g->dk = take_ct(ar, d, d->T, d->kv);
    g->dv = take_ct(ar, d, d->T, d->kv);
    g->dx1 = take_ct(ar, d, d->T, d->h);
    g->dgate = take_ct(ar, d, d->T, d->f);
    g->dup = take_ct(ar, d, d->T, d->f);
    g->dn1 = take_ct(ar, d, d->T, d->h);
    g->dn2 = take_ct(ar, d, d->T, d->h);
}

/* gx[i] (gradient of layer i's input) is the down_proj dy of layer i-1, so it is kept for
 * i >= 1; gx[0] only in chunk 0, where it is the embedding's dy (later chunks hand it to the
 * caller as g_in). gx[n] is the gradient of the chunk output. */
void acts_plan_kept(const wp_layout *L, int chunk, const wp_dims *d, wp_arena *ar, wp_acts *a) {
    const wp_model_cfg *cfg = &L->cfg;
    int n = cfg->chunk_layers[chunk];
    for (int i = 0; i < n; i++) {
        wp_block_grads gscratch = {0}, *g = a ? &a->kept[i] : &gscratch;
        plan_block_grads(ar, d, g);
        if (cfg->recompute) {
            /* B recomputes the block; what the W-pass reads must outlive that scratch */
            wp_block_acts bscratch = {0}, *b = a ? &a->blocks[i] : &bscratch;
            plan_block_wpass_inputs(ar, d, b);
        }
    }
    for (int i = 0; i <= n; i++) {
        void *gx = (i > 0 || chunk == 0) ? take_ct(ar, d, d->T, d->h) : NULL;
        if (a) a->gx[i] = gx;
    }
    if (chunk == cfg->n_chunks - 1) {
        void *dn_final = take_ct(ar, d, d->T, d->h);
        void *dlogits = take_ct(ar, d, d->T, d->V);
        if (a) {
            a->dn_final = dn_final;
            a->dlogits = dlogits;
        }
    }
}

void model_plan_scratch(const wp_dims *d, wp_arena *ar, wp_model *m) {
    wp_block_acts *sa = &m->sa;
    wp_block_grads *sg = &m->sg;
    *sa = (wp_block_acts){0};
    plan_block_wpass_inputs(ar, d, sa);
    plan_block_b_only(ar, d, sa);
    plan_block_grads(ar, d, sg);
    sg->dsw = take_ct(ar, d, d->T, d->f);
    sg->datt = take_ct(ar, d, d->T, d->q);
    m->sgx[0] = take_ct(ar, d, d->T, d->h);
    m->sgx[1] = take_ct(ar, d, d->T, d->h);
    m->s_dn_final = take_ct(ar, d, d->T, d->h);
    m->s_dlogits = take_ct(ar, d, d->T < WP_HEAD_ROWS ? d->T : WP_HEAD_ROWS, d->V);
}

size_t model_scratch_bytes(const wp_layout *L, wp_dtype compute) {
    wp_model probe = {0}; /* the plan writes its pointers into a model; only the size is kept */
    wp_dims d = model_dims(&L->cfg, compute);
    wp_arena ar = {0};
    model_plan_scratch(&d, &ar, &probe);
    return arena_size(&ar);
}

size_t model_acts_bytes(const wp_layout *L, int chunk, wp_dtype compute, bool split_backward) {
    return model_acts_bytes_segment(L, chunk, compute, split_backward, 0, L->cfg.seq);
}

size_t model_acts_bytes_segment(const wp_layout *L, int chunk, wp_dtype compute, bool split_backward, int t0, int t1) {
    if (chunk < 0 || chunk >= L->cfg.n_chunks || t0 < 0 || t1 <= t0 || t1 > L->cfg.seq) return 0;
    wp_dims d = model_dims_segment(&L->cfg, compute, t0, t1);
    wp_arena fwd = {0}, kept = {0};
    acts_plan_fwd(L, chunk, &d, &fwd, NULL);
    if (split_backward) acts_plan_kept(L, chunk, &d, &kept, NULL);
    return arena_size(&fwd) + arena_size(&kept);
}

size_t model_acts_held_bytes(const wp_acts *a) { return a->fwd_bytes + (a->kept_valid ? a->kept_bytes : 0); }
