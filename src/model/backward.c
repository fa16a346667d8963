/* B, W-pass and the fused backward of one chunk. One walk serves B and the fused backward:
 * only where the gradients live differs (kept in a for a later W-pass, or the model's
 * scratch), and whether the weight-gradient calls run at once. The W-pass replays exactly
 * the weight-gradient calls the fused walk makes, with the same operands, so B followed by
 * the W-pass gives the same bits as the fused backward. */
#include "model_impl.h"

static wp_result check_gw(wp_model *m, const void *gw, wp_dtype gt, const char *fn) {
    if (!gw) kern_set_error(m->k, "%s: gw is NULL", fn);
    else if (gt != WP_F32 && gt != WP_BF16) kern_set_error(m->k, "%s: gw dtype %s (want f32 or bf16)", fn, wp_dtype_name(gt));
    return kern_error(m->k) ? WP_FAILED : WP_OK;
}

/* Layer i's forward results for B. With recompute they are rebuilt here from the kept input
 * (one block at a time, in scratch); for a split backward the W-pass inputs go to the kept
 * arena so that they outlive the scratch. */
static wp_block_acts bwd_block_acts(wp_model *m, const wp_chunk_map *cm, const void *w, const wp_acts *a, int i,
                                    bool fused) {
    wp_block_acts A = m->L.cfg.recompute ? m->sa : a->blocks[i];
    A.lo = a->doc_lo;
    if (!m->L.cfg.recompute) return A;
    const wp_block_acts *kept = &a->blocks[i];
    A.x = kept->x;
    if (!fused) {
        A.rstd1 = kept->rstd1;
        A.n1 = kept->n1;
        A.att = kept->att;
        A.x1 = kept->x1;
        A.rstd2 = kept->rstd2;
        A.n2 = kept->n2;
        A.sw = kept->sw;
    }
    wp_seg_kv sbuf;
    block_forward(m->k, &a->d, w, &cm->blocks[i], &A, seg_kv_of(m, a, i, &sbuf), NULL);
    return A;
}

/* B (gw == NULL) or the fused backward (gw != NULL). */
static wp_result backward_walk(wp_model *m, int chunk, const void *w, wp_acts *a, const void *g_out, float dloss,
                         void *g_in, void *gw, wp_dtype gt) {
    wp_kern *k = m->k;
    const wp_dims *d = &a->d;
    const wp_chunk_map *cm = &m->chunks[chunk];
    const int n = cm->n_layers;
    const bool fused = gw != NULL;
    const size_t act_bytes = (size_t)d->T * d->h * d->ct;
    /* gradient of the chunk output; the fused walk reads g_out in place */
    void *top = fused ? (cm->last ? m->sgx[n % 2] : (void *)g_out) : a->gx[n];
    if (cm->last)
        head_backward(m, cm, w, a, dloss, top, gw, gt);
    else if (!fused)
        kern_copy(k, top, g_out, act_bytes);                                    /* gx[n] [T,h] = g_out */
    for (int i = n - 1; i >= 0; i--) {
        const void *dx2 = i == n - 1 ? top : fused ? m->sgx[(i + 1) % 2] : a->gx[i + 1];
        void *dx = (i == 0 && !cm->first) ? g_in : fused ? m->sgx[i % 2] : a->gx[i];
        wp_block_acts A = bwd_block_acts(m, cm, w, a, i, fused);
        wp_block_grads G = fused ? m->sg : a->kept[i];
        G.dsw = m->sg.dsw;
        G.datt = m->sg.datt;
        wp_seg_kv sbuf;
        block_backward(k, d, w, &cm->blocks[i], &A, seg_kv_of(m, a, i, &sbuf), &G, dx2, dx, gw, gt); /* dx [T,h] */
    }
    if (cm->first && fused)
        kern_embedding_bwd(k, g_at(gw, gt, cm->embed), gt, a->tokens, m->sgx[0], d->T, d->h); /* dwte [V,h] */
    if (kern_error(k)) return 1;
    seg_backward_end(a);
    return 0;
}

static wp_result check_b_io(wp_model *m, const wp_chunk_map *cm, const void *g_out, const void *g_in, const char *fn) {
    const char *missing = !cm->last && !g_out ? "g_out" : !cm->first && !g_in ? "g_in" : NULL;
    if (missing) kern_set_error(m->k, "%s: %s is NULL", fn, missing);
    return missing ? WP_FAILED : WP_OK;
}

wp_result model_backward_input(wp_model *m, int chunk, const void *w, wp_acts *a, const void *g_out, float dloss,
                         void *g_in) {
    WP_TRY(model_entry_check(m, chunk, a, "model_backward_input"));
    WP_TRY(check_b_io(m, &m->chunks[chunk], g_out, g_in, "model_backward_input"));
    WP_TRY(seg_backward_check(m, a, "model_backward_input"));
    if (a->kept_valid) {
        kern_set_error(m->k, "model_backward_input: chunk %d's previous B still awaits its W-pass", chunk);
        return 1;
    }
    WP_TRY(acts_reserve_kept(m, a));
    return backward_walk(m, chunk, w, a, g_out, dloss, g_in, NULL, WP_F32);
}

wp_result model_backward_weight(wp_model *m, int chunk, wp_acts *a, void *gw, wp_dtype gt) {
    WP_TRY(model_entry_check(m, chunk, a, "model_backward_weight"));
    WP_TRY(check_gw(m, gw, gt, "model_backward_weight"));
    if (!a->kept_valid) {
        kern_set_error(m->k, "model_backward_weight: chunk %d has no B to finish", chunk);
        return 1;
    }
    wp_kern *k = m->k;
    const wp_dims *d = &a->d;
    const wp_chunk_map *cm = &m->chunks[chunk];
    const int n = cm->n_layers;
    if (cm->last) head_backward_weight(m, cm, a, gw, gt);
    for (int i = n - 1; i >= 0; i--)
        block_backward_weight(k, d, &cm->blocks[i], &a->blocks[i], &a->kept[i], a->gx[i + 1], gw, gt);
    if (cm->first) kern_embedding_bwd(k, g_at(gw, gt, cm->embed), gt, a->tokens, a->gx[0], d->T, d->h);
    acts_release_kept(m, a);
    return kern_status(k);
}

wp_result model_backward(wp_model *m, int chunk, const void *w, wp_acts *a, const void *g_out, float dloss, void *g_in,
                   void *gw, wp_dtype gt) {
    WP_TRY(model_entry_check(m, chunk, a, "model_backward"));
    WP_TRY(check_b_io(m, &m->chunks[chunk], g_out, g_in, "model_backward"));
    WP_TRY(check_gw(m, gw, gt, "model_backward"));
    WP_TRY(seg_backward_check(m, a, "model_backward"));
    return backward_walk(m, chunk, w, a, g_out, dloss, g_in, gw, gt);
}
