/* F of one chunk: embedding (chunk 0), the blocks, then final norm, LM head and the loss
 * (last chunk). Each block's output is written straight into the next block's kept input. */
#include "model_impl.h"

wp_result model_entry_check(wp_model *m, int chunk, const wp_acts *a, const char *fn) {
    if (kern_error(m->k)) return 1;
    if (chunk < 0 || chunk >= m->L.cfg.n_chunks) {
        kern_set_error(m->k, "%s: chunk %d out of range [0, %d)", fn, chunk, m->L.cfg.n_chunks);
        return 1;
    }
    if (!a || a->chunk != chunk) {
        kern_set_error(m->k, "%s: activations of chunk %d passed for chunk %d", fn, a ? a->chunk : -1, chunk);
        return 1;
    }
    return 0;
}

/* Where layer i's forward writes: all in a, or (recompute) its input in a and the rest in
 * the model's scratch, to be recomputed by B. */
static wp_block_acts fwd_block_acts(const wp_model *m, const wp_acts *a, int i) {
    wp_block_acts A = m->L.cfg.recompute ? m->sa : a->blocks[i];
    A.lo = a->doc_lo;
    if (!m->L.cfg.recompute) return A;
    A.x = a->blocks[i].x;
    if (dims_kv_later(&a->d)) {
        /* later segments attend to these: they outlive the scratch */
        A.k = a->blocks[i].k;
        A.v = a->blocks[i].v;
    }
    return A;
}

static wp_result check_io(wp_model *m, const wp_chunk_map *cm, const void *x_in, const int32_t *tokens,
                    const int32_t *targets, const void *x_out) {
    const char *missing = (cm->first || m->L.cfg.doc_mask) && !tokens ? "tokens"
                          : !cm->first && !x_in  ? "x_in"
                          : cm->last && !targets ? "targets"
                          : !cm->last && !x_out  ? "x_out"
                                                 : NULL;
    if (missing) kern_set_error(m->k, "model_forward: %s is NULL", missing);
    return missing ? WP_FAILED : WP_OK;
}

static wp_result forward(wp_model *m, int chunk, const void *w, wp_acts *a, const void *x_in, const int32_t *tokens,
                         const int32_t *targets, void *x_out, double *loss_sum, const float *dloss) {
    WP_TRY(model_entry_check(m, chunk, a, "model_forward"));
    a->head_bwd_done = false;
    wp_kern *k = m->k;
    const wp_dims *d = &a->d;
    const wp_chunk_map *cm = &m->chunks[chunk];
    const int n = cm->n_layers;
    WP_TRY(check_io(m, cm, x_in, tokens, targets, x_out));
    WP_TRY(seg_forward_begin(m, a, "model_forward"));
    a->tokens = tokens;
    a->targets = targets;
    if (a->doc_lo) WP_TRY(doc_mask_starts(m, a, tokens)); /* where each token's document starts */
    void *x0 = n > 0 ? a->blocks[0].x : cm->last ? a->x_final : x_out;
    if (cm->first)
        kern_embedding_fwd(k, x0, tokens, w_at(d, w, cm->embed), d->T, d->h); /* x0 [T,h] = wte[tokens] */
    else
        kern_copy(k, x0, x_in, (size_t)d->T * d->h * d->ct);                  /* x0 [T,h] = x_in */
    for (int i = 0; i < n; i++) {
        void *out = i + 1 < n ? a->blocks[i + 1].x : cm->last ? a->x_final : x_out;
        wp_block_acts A = fwd_block_acts(m, a, i);
        wp_seg_kv sbuf;
        block_forward(k, d, w, &cm->blocks[i], &A, seg_kv_of(m, a, i, &sbuf), out); /* out [T,h] */
    }
    if (cm->last) return head_forward(m, cm, w, a, loss_sum, dloss);
    return kern_status(k);
}

wp_result model_forward(wp_model *m, int chunk, const void *w, wp_acts *a, const void *x_in, const int32_t *tokens,
                        const int32_t *targets, void *x_out, double *loss_sum) {
    return forward(m, chunk, w, a, x_in, tokens, targets, x_out, loss_sum, NULL);
}

wp_result model_forward_train(wp_model *m, int chunk, const void *w, wp_acts *a, const void *x_in,
                              const int32_t *tokens, const int32_t *targets, void *x_out, double *loss_sum,
                              float dloss) {
    return forward(m, chunk, w, a, x_in, tokens, targets, x_out, loss_sum, &dloss);
}
