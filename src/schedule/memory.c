/* The memory prediction (memory.h). Every figure mirrors one allocation site of the runtime;
 * the comment beside each names it, so a new allocation there has a place to be added here. */
#include "memory.h"

#include <stdio.h>
#include <string.h>

#include "decode.h"
#include "model.h"

/* The CPU backend's own scratch (kernels/cpu): GEMM packing per thread, attention tiles, the
 * embedding's index; bounded by what the largest call asks. */
static double cpu_scratch(const wp_layout *L, const wp_mem_cfg *mc) {
    const wp_model_cfg *c = &L->cfg;
    double T = (double)c->micro_batch * c->seq, th = mc->threads > 0 ? mc->threads : 1;
    double pack = th * 256.0 * 1024 * sizeof(float);            /* cpu_gemm.c: a panel per thread */
    double attn = (2.0 * c->seq + 4.0 * c->head_dim) * c->seq * sizeof(float); /* attention_tiles.c */
    return pack + attn + T * 8;
}

/* The LM head's blocks of logits: the backend's rows (kernels/cpu/lmhead.c: 128 x V fp32). */
static double logits(const wp_layout *L, const wp_mem_cfg *mc, bool has_head) {
    return has_head && mc->cpu ? 128.0 * L->cfg.vocab * sizeof(float) : 0;
}

/* --eval-every (runtime/evaluate.c): an activation state per owned chunk, two hidden-state
 * buffers, one chunk's weights in compute and wire dtype, the tokens. */
static double eval_bytes(const wp_schedule *s, const wp_layout *L, int r, const wp_mem_cfg *mc) {
    const wp_model_cfg *c = &L->cfg;
    double T = (double)c->micro_batch * c->seq, most = 0, acts = 0;
    for (int k = 0; k < s->nchunks; k++) {
        if (s->nslices && L->chunk_numel[k] > most) most = (double)L->chunk_numel[k];
        if (s->owner[k] != r) continue;
        if (L->chunk_numel[k] > most) most = (double)L->chunk_numel[k];
        acts += (double)model_acts_bytes(L, k, mc->compute, false);
    }
    return acts + 2 * T * c->h * wp_dtype_size(mc->compute) +
           most * (wp_dtype_size(mc->compute) + wp_dtype_size(precision_weight_dtype(c->precision))) + T * 8;
}

/* --sample-every (runtime/sample_run.c, model/decode.c): every rank a chunk's wire copy; rank 0
 * also the whole model in fp32 on the host, every chunk in compute dtype, the K/V cache of
 * every layer for the sample's positions, a block of rows and a row of logits. */
static double sample_bytes(const wp_layout *L, int r, const wp_mem_cfg *mc) {
    const wp_model_cfg *c = &L->cfg;
    double most = 0, cs = wp_dtype_size(mc->compute);
    for (int k = 0; k < c->n_chunks; k++)
        if (L->chunk_numel[k] > most) most = (double)L->chunk_numel[k];
    double b = most * wp_dtype_size(precision_weight_dtype(c->precision));
    if (r != 0) return b;
    double q = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim, R = WP_DECODE_ROWS;
    b += most * sizeof(float);                                  /* stage */
    if (mc->cpu) b += (double)L->total_numel * sizeof(float);   /* the gathered masters (host) */
    b += (double)L->total_numel * cs;                           /* the decoder's weights */
    b += 2.0 * c->n_layers * mc->sample_tokens * kv * cs;       /* K/V cache */
    b += R * (4.0 * c->h + 2 * q + 3.0 * c->ffn) * cs + R * (2 + c->n_heads) * 4 + 2.0 * c->vocab * 4;
    return b;
}

/* --optimizer-memory host: the fp32 windows on the device, one per chunk that rank r's W-passes
 * add into its owner's accumulator (to_master: only where the rank owns all of the chunk). */
static double window_bytes(const wp_schedule *s, const wp_layout *L, int r) {
    bool seen[WP_MAX_CHUNKS] = {0};
    double b = 0;
    for (int i = 0; i < s->rank[r].n; i++) {
        const wp_action *a = &s->rank[r].a[i];
        if ((a->op != WP_OP_W && a->op != WP_OP_BW) || !a->to_master || a->chunk < 0 || a->chunk >= s->nchunks ||
            seen[a->chunk])
            continue;
        seen[a->chunk] = true;
        b += (double)L->chunk_numel[a->chunk] * sizeof(float);
    }
    return b;
}

void mem_predict(const wp_schedule *s, const wp_layout *L, const wp_rank_report *rr, int r, const wp_mem_cfg *mc,
                 double terms[WP_MEM_TERMS]) {
    memset(terms, 0, WP_MEM_TERMS * sizeof *terms);
    const wp_model_cfg *c = &L->cfg;
    const double T = (double)c->micro_batch * c->seq;
    /* the pool (runtime/bufpool.c): its slots, and, where the wire dtype is not the compute
     * dtype, the compute-dtype view a slot keeps once compute reads what it holds (the engine
     * counts the slots of the sizes read: viewed_bytes, by the kind that first took the size; a
     * gradient-sized slot that compute reads holds weights then) */
    double wire_w = wp_dtype_size(precision_weight_dtype(c->precision)), wire_a = wp_dtype_size(precision_act_dtype(c->precision));
    double cs = wp_dtype_size(mc->compute);
    double vw = wire_w != cs ? cs / wire_w : 0, va = wire_a != cs ? cs / wire_a : 0;
    terms[WP_MEM_WEIGHTS] = (double)rr->pool_bytes[WP_BUF_W] +
                            vw * (double)(rr->viewed_bytes[WP_BUF_W] + rr->viewed_bytes[WP_BUF_GW] + rr->viewed_bytes[WP_BUF_T]);
    terms[WP_MEM_GRADS] = (double)rr->pool_bytes[WP_BUF_GW] + (double)rr->pool_bytes[WP_BUF_T];
    terms[WP_MEM_COMM] = 0;
    for (int k = 0; k < WP_BUF_KINDS; k++)
        if (k != WP_BUF_W && k != WP_BUF_GW && k != WP_BUF_T)
            terms[WP_MEM_COMM] += (double)rr->pool_bytes[k] + va * (double)rr->viewed_bytes[k];
    /* optim.c: master, m, v, accumulator; with --optimizer-memory host these are in host
     * memory (mem_predict_host) and the device keeps an fp32 gradient window per owned chunk
     * that this rank's W-passes add into directly (to_master: optim/placement.c) */
    terms[WP_MEM_OPTIM] = mc->host_optim ? window_bytes(s, L, r) : (double)rr->owner_bytes;
    /* model/acts.c, one per state held; the engine sizes them in the precision's activation
     * dtype, the backend keeps them in its compute dtype (the CPU's fp32) */
    terms[WP_MEM_ACTS] = (double)rr->peak_acts_bytes * cs / wire_a;
    /* the model's scratch (model_scratch_bytes), the executor's (runtime/executor.c: a hidden
     * state) and the backend's */
    terms[WP_MEM_SCRATCH] = (double)model_scratch_bytes(L, mc->compute) + T * c->h * cs;
    if (mc->cpu) terms[WP_MEM_SCRATCH] += cpu_scratch(L, mc);
    else terms[WP_MEM_SCRATCH] += (double)WP_CUDA_BLAS_WORKSPACE; /* kernels/cuda/cuda_context.c, counted there */
    bool head = false; /* does rank r run the LM head (the last chunk's F)? */
    for (int i = 0; i < s->rank[r].n; i++) {
        const wp_action *a = &s->rank[r].a[i];
        head |= a->op == WP_OP_F && a->chunk == s->nchunks - 1;
    }
    /* src/model/head.c: the training F runs the head's backward and sums its weight gradient
     * in a V x h fp32 buffer until the weight part adds it to the gradient */
    if (head) terms[WP_MEM_GRADS] += (double)c->vocab * c->h * sizeof(float);
    terms[WP_MEM_LOGITS] = logits(L, mc, head);
    terms[WP_MEM_IO] = T * 8;                                  /* executor.c: token ids on the device */
    if (mc->eval) terms[WP_MEM_EVAL] = eval_bytes(s, L, r, mc);
    if (mc->sample) terms[WP_MEM_SAMPLE] = sample_bytes(L, r, mc);
}

void mem_predict_host(const wp_schedule *s, const wp_layout *L, const wp_rank_report *rr, int r, const wp_mem_cfg *mc,
                      wp_mem_host *h) {
    memset(h, 0, sizeof *h);
    if (!mc->host_optim || rr->owner_bytes == 0) return;
    h->optim = (double)rr->owner_bytes;
    /* the largest piece rank r owns: a whole chunk, or in a sliced schedule its slice of one */
    double most = 0;
    for (int k = 0; k < s->nchunks; k++) {
        size_t off = 0, len = 0;
        if (s->nslices && r < s->nslices) slice_range(L->chunk_numel[k], r, s->nslices, &off, &len);
        else if (!s->nslices && s->owner[k] == r) len = L->chunk_numel[k];
        if ((double)len > most) most = (double)len;
    }
    /* optim/placement.c: two pinned buffers of the widest thing staged (an fp32 gradient or
     * piece) used in turn by both directions: one figure, kept in staging_up */
    h->staging_up = 2 * most * sizeof(float);
    h->staging_down = 0;
}

void mem_predict_device(const wp_layout *L, const wp_mem_cfg *mc, int nranks, wp_mem_device *d) {
    memset(d, 0, sizeof *d);
    if (mc->cpu) return;
    const wp_model_cfg *c = &L->cfg;
    d->context = WP_MEM_CUDA_CONTEXT_MIB * 1048576.0;
    d->cudnn = (double)c->micro_batch * c->seq * c->n_heads * c->head_dim * sizeof(float);
    d->sibling = nranks > 1 ? (double)WP_CUDA_BLAS_WORKSPACE : 0;
}

double mem_host_total(const wp_mem_host *h) { return h->optim + h->staging_up + h->staging_down; }

double mem_total(const double terms[WP_MEM_TERMS]) {
    double t = 0;
    for (int i = 0; i < WP_MEM_TERMS; i++) t += terms[i];
    return t;
}

void mem_largest(const double terms[WP_MEM_TERMS], int n, char *out, size_t len) {
    bool used[WP_MEM_TERMS] = {0};
    size_t at = 0;
    out[0] = 0;
    for (int k = 0; k < n; k++) {
        int best = -1;
        for (int i = 0; i < WP_MEM_TERMS; i++)
            if (!used[i] && terms[i] > 0 && (best < 0 || terms[i] > terms[best])) best = i;
        if (best < 0) break;
        used[best] = true;
        int w = snprintf(out + at, at < len ? len - at : 0, "%s%s %.1f MiB", k ? ", " : "", wp_mem_term_name[best],
                         terms[best] / 1048576.0);
        if (w > 0) at += (size_t)w;
    }
}
