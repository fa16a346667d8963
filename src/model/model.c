/* The model's lifetime and its (chunk, micro-batch) state. Each entry point (F, B, W-pass,
 * fused backward) lives in forward.c / backward.c; this file owns memory: the chunk map of
 * weight offsets, the per-model scratch and the per-micro-batch wp_acts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"

static wp_result map_fail(char *err, size_t errlen, const wp_param *p, const char *want) {
    return wp_fail(WP_FAILED, err, errlen, "model: parameter '%s' found where '%s' was expected", p ? p->name : "(none)", want);
}

static bool name_ends(const wp_param *p, const char *suffix) {
    size_t n = strlen(p->name), m = strlen(suffix);
    return n >= m && strcmp(p->name + n - m, suffix) == 0;
}

/* Walk chunk c's parameters in layout order and record each tensor's offset by name, so
 * that a change of order in layout.c fails loudly here instead of mixing up weights. */
static wp_result map_chunk(const wp_layout *L, int c, wp_chunk_map *cm, char *err, size_t errlen) {
    static const char *block_names[9] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                         "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                         "post_attention_layernorm.weight", "mlp.gate_proj.weight",
                                         "mlp.up_proj.weight", "mlp.down_proj.weight"};
    int p, end;
    layout_chunk_params(L, c, &p, &end);
    cm->n_layers = L->cfg.chunk_layers[c];
    cm->first = c == 0;
    cm->last = c == L->cfg.n_chunks - 1;
    if (cm->n_layers == 0 && !(cm->first && cm->last))
        return wp_fail(WP_FAILED, err, errlen, "model: chunk %d holds no layers (only a lone chunk may)", c);
    cm->blocks = calloc((size_t)(cm->n_layers ? cm->n_layers : 1), sizeof *cm->blocks);
    if (!cm->blocks) return wp_fail(WP_FAILED, err, errlen, "model: out of host memory for chunk %d's map", c);
    if (cm->first) {
        if (p >= end || strcmp(L->params[p].name, "model.embed_tokens.weight") != 0)
            return map_fail(err, errlen, p < end ? &L->params[p] : NULL, "model.embed_tokens.weight");
        cm->embed = L->params[p++].offset;
    }
    for (int i = 0; i < cm->n_layers; i++) {
        wp_block_offsets *b = &cm->blocks[i];
        size_t *slot[9] = {&b->ln1, &b->wq, &b->wk, &b->wv, &b->wo, &b->ln2, &b->wg, &b->wu, &b->wd};
        for (int j = 0; j < 9; j++, p++) {
            if (p >= end || !name_ends(&L->params[p], block_names[j]))
                return map_fail(err, errlen, p < end ? &L->params[p] : NULL, block_names[j]);
            *slot[j] = L->params[p].offset;
        }
    }
    if (cm->last) {
        if (p + 2 > end || strcmp(L->params[p].name, "model.norm.weight") != 0 || strcmp(L->params[p + 1].name, "lm_head.weight") != 0)
            return map_fail(err, errlen, p < end ? &L->params[p] : NULL, "model.norm.weight, lm_head.weight");
        cm->norm = L->params[p].offset;
        cm->head = L->params[p + 1].offset;
    }
    return 0;
}

void model_destroy(wp_model *m) {
    if (!m) return;
    if (m->chunks)
        for (int c = 0; c < m->L.cfg.n_chunks; c++) free(m->chunks[c].blocks);
    free(m->chunks);
    if (m->scratch_mem) kern_free(m->k, m->scratch_mem);
    if (m->s_head_dw) kern_free(m->k, m->s_head_dw);
    if (m->head_dw) kern_free(m->k, m->head_dw);
    if (m->seg_mem) kern_free(m->k, m->seg_mem);
    free(m->host_losses);
    free(m->L.params);
    free(m);
}

static wp_model *create_fail(wp_model *m, char *err, size_t errlen, const char *what) {
    if (what) snprintf(err, errlen, "model: %s", what);
    model_destroy(m);
    return NULL;
}

wp_model *model_create(const wp_layout *L, wp_kern *k, char *err, size_t errlen) {
    wp_model *m = calloc(1, sizeof *m);
    if (!m) return create_fail(NULL, err, errlen, "out of host memory");
    m->k = k;
    m->L = *L;
    m->L.params = malloc((size_t)L->n_params * sizeof *L->params);
    m->chunks = calloc((size_t)L->cfg.n_chunks, sizeof *m->chunks);
    m->host_losses = malloc((size_t)L->cfg.micro_batch * (size_t)L->cfg.seq * sizeof(float));
    if (!m->L.params || !m->chunks || !m->host_losses) return create_fail(m, err, errlen, "out of host memory");
    memcpy(m->L.params, L->params, (size_t)L->n_params * sizeof *L->params);
    for (int c = 0; c < L->cfg.n_chunks; c++)
        if (map_chunk(L, c, &m->chunks[c], err, errlen) != 0) return create_fail(m, err, errlen, NULL);
    m->d = model_dims(&L->cfg, kern_compute_dtype(k));
    wp_arena ar = {0};
    model_plan_scratch(&m->d, &ar, m);
    m->scratch_mem = kern_alloc(k, arena_size(&ar));
    if (!m->scratch_mem) {
        snprintf(err, errlen, "model: scratch of %zu bytes: %s", arena_size(&ar), kern_error(k) ? kern_error(k) : "out of memory");
        return create_fail(m, err, errlen, NULL);
    }
    ar = (wp_arena){.base = m->scratch_mem};
    model_plan_scratch(&m->d, &ar, m);
    return m;
}

const wp_layout *model_layout(const wp_model *m) { return &m->L; }
wp_kern *model_kern(const wp_model *m) { return m->k; }

wp_acts *model_acts_create(wp_model *m, int chunk) {
    if (chunk < 0 || chunk >= m->L.cfg.n_chunks) {
        kern_set_error(m->k, "model_acts_create: chunk %d out of range [0, %d)", chunk, m->L.cfg.n_chunks);
        return NULL;
    }
    return acts_create(m, chunk, &m->d);
}

/* Activation states count as activations, unless a caller named another term for them (the
 * validation pipeline's own are evaluation memory). */
static wp_mem_term acts_term(wp_model *m) {
    wp_mem_term t = kern_mem_term(m->k, WP_MEM_ACTS);
    if (t != WP_MEM_SCRATCH) kern_mem_term(m->k, t);
    return t;
}

wp_acts *acts_create(wp_model *m, int chunk, const wp_dims *d) {
    int n = m->L.cfg.chunk_layers[chunk];
    wp_acts *a = calloc(1, sizeof *a);
    if (a) {
        a->blocks = calloc((size_t)n + 1, sizeof *a->blocks);
        a->kept = calloc((size_t)n + 1, sizeof *a->kept);
        a->gx = calloc((size_t)n + 1, sizeof *a->gx);
        if (dims_kv_later(d)) {
            a->dk_acc = calloc((size_t)n + 1, sizeof *a->dk_acc);
            a->dv_acc = calloc((size_t)n + 1, sizeof *a->dv_acc);
        }
    }
    if (!a || !a->blocks || !a->kept || !a->gx || (dims_kv_later(d) && (!a->dk_acc || !a->dv_acc))) {
        kern_set_error(m->k, "model_acts_create: out of host memory for chunk %d", chunk);
        model_acts_destroy(m, a);
        return NULL;
    }
    a->chunk = chunk;
    a->d = *d;
    wp_arena ar = {0};
    acts_plan_fwd(&m->L, chunk, d, &ar, NULL);
    a->fwd_bytes = arena_size(&ar);
    wp_mem_term was = acts_term(m);
    a->fwd_mem = kern_alloc(m->k, a->fwd_bytes);
    kern_mem_term(m->k, was);
    if (!a->fwd_mem) {
        model_acts_destroy(m, a);
        return NULL;
    }
    ar = (wp_arena){.base = a->fwd_mem};
    acts_plan_fwd(&m->L, chunk, d, &ar, a);
    return a;
}

void acts_release_kept(wp_model *m, wp_acts *a) {
    if (a->kept_mem) kern_free(m->k, a->kept_mem);
    a->kept_mem = NULL;
    a->kept_bytes = 0;
    a->kept_valid = false;
}

void model_acts_destroy(wp_model *m, wp_acts *a) {
    if (!a) return;
    acts_release_kept(m, a);
    if (a->fwd_mem) kern_free(m->k, a->fwd_mem);
    free(a->blocks);
    free(a->kept);
    free(a->gx);
    free(a->dk_acc);
    free(a->dv_acc);
    free(a);
}

wp_result acts_reserve_kept(wp_model *m, wp_acts *a) {
    wp_arena ar = {0};
    acts_plan_kept(&m->L, a->chunk, &a->d, &ar, NULL);
    a->kept_bytes = arena_size(&ar);
    wp_mem_term was = acts_term(m);
    a->kept_mem = kern_alloc(m->k, a->kept_bytes);
    kern_mem_term(m->k, was);
    if (!a->kept_mem) {
        a->kept_bytes = 0;
        return 1;
    }
    ar = (wp_arena){.base = a->kept_mem};
    acts_plan_kept(&m->L, a->chunk, &a->d, &ar, a);
    a->kept_valid = true;
    return 0;
}
