/* Final RMSNorm, LM head and mean cross-entropy (last chunk), and the embedding (chunk 0).
 *
 * The head's backward walks the tokens in blocks of WP_HEAD_ROWS rows, and the model (not the
 * kernel) adds each block's dWh += dlogits_blk^T n_blk. The split backward keeps dlogits [T,V]
 * for the W-pass; the fused one keeps only the current block, in scratch. Both issue the same
 * GEMM on the same block, which makes B + W-pass bit-identical to the fused backward without
 * depending on how a backend blocks its fused kernel internally. dWh is summed over blocks
 * in fp32 and rounded once into a bf16 gradient, as every other weight gradient is.
 *
 * In training (model_forward_train) F runs the head's backward too, in one pass over the row
 * blocks (kern_lmhead_ce_fwd_bwd): 3 GEMMs over the head instead of F's 1 and B's 3. dWh then
 * sums in the model's fp32 head_dw across micro-batches until a weight part adds it to its gw
 * (the same single rounding into a bf16 gradient); B reads the input gradient F kept. */
#include "model_impl.h"

static int head_rows(const wp_dims *d) { return d->T < WP_HEAD_ROWS ? d->T : WP_HEAD_ROWS; }

/* The training forwards' head gradient sum, zeroed; counted as a weight-gradient buffer. */
static float *head_dw(wp_model *m) {
    if (m->head_dw) return m->head_dw;
    wp_mem_term was = kern_mem_term(m->k, WP_MEM_GRADS);
    m->head_dw = kern_alloc(m->k, (size_t)m->d.V * m->d.h * sizeof(float)); /* kern_alloc zeroes */
    kern_mem_term(m->k, was);
    return m->head_dw;
}

wp_result head_forward(wp_model *m, const wp_chunk_map *cm, const void *w, wp_acts *a, double *loss_sum,
                       const float *dloss) {
    wp_kern *k = m->k;
    const wp_dims *d = &a->d;
    kern_rmsnorm_fwd(k, a->n_final, a->rstd_final, a->x_final, w_at(d, w, cm->norm), d->T, d->h, d->eps); /* [T,h] */
    if (dloss) {
        /* losses [T], dn_head [T,h], head_dw [V,h] += (head_dw NULL: an allocation error, checked below) */
        kern_lmhead_ce_fwd_bwd(k, a->losses, a->dn_head, head_dw(m), a->n_final, w_at(d, w, cm->head), a->targets,
                               *dloss, d->T, d->h, d->V);
        a->head_bwd_done = !kern_error(k);
    } else {
        kern_lmhead_ce_fwd(k, a->losses, a->lse_head, a->n_final, w_at(d, w, cm->head), a->targets, d->T, d->h,
                           d->V);                                               /* losses, lse [T] */
    }
    if (!loss_sum) return kern_status(k);
    return model_loss_sum(m, a, loss_sum);
}

wp_result model_loss_sum(wp_model *m, const wp_acts *a, double *loss_sum) {
    wp_kern *k = m->k;
    kern_to_host(k, m->host_losses, a->losses, (size_t)a->d.T * sizeof(float));
    if (kern_error(k)) return 1;
    double sum = 0;
    for (int t = 0; t < a->d.T; t++) sum += m->host_losses[t];
    *loss_sum += sum;
    return 0;
}

/* Where dWh sums: straight into an fp32 gradient, else into zeroed fp32 scratch. */
static void *head_dw_begin(wp_model *m, void *gw, wp_dtype gt, size_t head_off) {
    if (gt == WP_F32) return g_at(gw, gt, head_off);
    size_t bytes = (size_t)m->d.V * m->d.h * sizeof(float);
    if (!m->s_head_dw) m->s_head_dw = kern_alloc(m->k, bytes); /* only bf16 gradients need it */
    if (m->s_head_dw) kern_zero(m->k, m->s_head_dw, bytes);
    return m->s_head_dw;
}

static void head_dw_end(wp_model *m, void *gw, wp_dtype gt, size_t head_off, void *acc) {
    if (gt != WP_F32 && acc) kern_accumulate(m->k, g_at(gw, gt, head_off), gt, acc, WP_F32, (size_t)m->d.V * m->d.h);
}

/* The weight part after a training F: the forwards' head gradient sum into gw, then zeroed. */
static void head_dw_flush(wp_model *m, void *gw, wp_dtype gt, size_t head_off) {
    size_t n = (size_t)m->d.V * m->d.h;
    kern_accumulate(m->k, g_at(gw, gt, head_off), gt, m->head_dw, WP_F32, n);
    kern_zero(m->k, m->head_dw, n * sizeof(float));
}

/* dWh [V,h] (fp32) += dlogits_blk[rows,V]^T @ n_blk[rows,h] */
static void head_dw_block(wp_kern *k, const wp_dims *d, void *acc, const void *dlogits_blk, const void *n_blk, int rows) {
    kern_gemm(k, true, false, d->V, d->h, rows, 1.0f, dlogits_blk, d->V, n_blk, d->h, 1.0f, acc, WP_F32, d->h);
}

void head_backward(wp_model *m, const wp_chunk_map *cm, const void *w, wp_acts *a, float dloss, void *top, void *gw,
                   wp_dtype gt) {
    wp_kern *k = m->k;
    const wp_dims *d = &a->d;
    const bool fused = gw != NULL;
    if (a->head_bwd_done) {
        /* F ran the head's backward: dn_head is dL/dn_final, head_dw holds dWh */
        if (fused) head_dw_flush(m, gw, gt, cm->head);
        kern_rmsnorm_bwd_input(k, top, false, a->dn_head, a->x_final, w_at(d, w, cm->norm), a->rstd_final, d->T, d->h);
        if (fused) {
            kern_rmsnorm_bwd_weight(k, g_at(gw, gt, cm->norm), gt, a->dn_head, a->x_final, a->rstd_final, d->T, d->h);
            a->head_bwd_done = false;
        }
        return;
    }
    void *dn = fused ? m->s_dn_final : a->dn_final;
    void *acc = fused ? head_dw_begin(m, gw, gt, cm->head) : NULL;
    const int R = head_rows(d);
    for (int t0 = 0; t0 < d->T && !kern_error(k); t0 += R) {
        int rows = d->T - t0 < R ? d->T - t0 : R;
        const void *n_blk = (const char *)a->n_final + (size_t)t0 * d->h * d->ct;
        void *dlogits = fused ? m->s_dlogits : (char *)a->dlogits + (size_t)t0 * d->V * d->ct;
        /* dn_blk [rows,h] = dlogits_blk @ Wh, dlogits_blk [rows,V] = (softmax - onehot) * dloss */
        kern_lmhead_ce_bwd(k, (char *)dn + (size_t)t0 * d->h * d->ct, dlogits, NULL, WP_F32, n_blk,
                           w_at(d, w, cm->head), a->targets + t0, a->lse_head + t0, dloss, rows, d->h, d->V);
        if (fused) head_dw_block(k, d, acc, dlogits, n_blk, rows);
    }
    if (fused) head_dw_end(m, gw, gt, cm->head, acc);
    kern_rmsnorm_bwd_input(k, top, false, dn, a->x_final, w_at(d, w, cm->norm), a->rstd_final, d->T, d->h); /* [T,h] */
    if (fused) kern_rmsnorm_bwd_weight(k, g_at(gw, gt, cm->norm), gt, dn, a->x_final, a->rstd_final, d->T, d->h);
}

void head_backward_weight(wp_model *m, const wp_chunk_map *cm, wp_acts *a, void *gw, wp_dtype gt) {
    wp_kern *k = m->k;
    const wp_dims *d = &a->d;
    if (a->head_bwd_done) {
        head_dw_flush(m, gw, gt, cm->head);
        kern_rmsnorm_bwd_weight(k, g_at(gw, gt, cm->norm), gt, a->dn_head, a->x_final, a->rstd_final, d->T, d->h);
        a->head_bwd_done = false;
        return;
    }
    void *acc = head_dw_begin(m, gw, gt, cm->head);
    const int R = head_rows(d);
    for (int t0 = 0; t0 < d->T && !kern_error(k); t0 += R) {
        int rows = d->T - t0 < R ? d->T - t0 : R;
        head_dw_block(k, d, acc, (const char *)a->dlogits + (size_t)t0 * d->V * d->ct,
                      (const char *)a->n_final + (size_t)t0 * d->h * d->ct, rows);
    }
    head_dw_end(m, gw, gt, cm->head, acc);
    kern_rmsnorm_bwd_weight(k, g_at(gw, gt, cm->norm), gt, a->dn_final, a->x_final, a->rstd_final, d->T, d->h);
}
