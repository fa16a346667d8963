/* Final RMSNorm, LM head and mean cross-entropy (last chunk), and the embedding (chunk 0).
 *
 * The head's backward walks the tokens in blocks of WP_HEAD_ROWS rows, and the model (not the
 * kernel) adds each block's dWh += dlogits_blk^T n_blk. The split backward keeps dlogits [T,V]
 * for the W-pass; the fused one keeps only the current block, in scratch. Both issue the same
 * GEMM on the same block, which makes B + W-pass bit-identical to the fused backward without
 * depending on how a backend blocks its fused kernel internally. dWh is summed over blocks
 * in fp32 and rounded once into a bf16 gradient, as every other weight gradient is. */
#include "model_impl.h"

static int head_rows(const wp_dims *d) { return d->T < WP_HEAD_ROWS ? d->T : WP_HEAD_ROWS; }

wp_result head_forward(wp_model *m, const wp_chunk_map *cm, const void *w, wp_acts *a, double *loss_sum) {
    wp_kern *k = m->k;
    const wp_dims *d = &a->d;
    kern_rmsnorm_fwd(k, a->n_final, a->rstd_final, a->x_final, w_at(d, w, cm->norm), d->T, d->h, d->eps); /* [T,h] */
    kern_lmhead_ce_fwd(k, a->losses, a->lse_head, a->n_final, w_at(d, w, cm->head), a->targets, d->T, d->h,
                       d->V);                                                   /* losses, lse [T] */
    if (!loss_sum) return kern_status(k);
    kern_to_host(k, m->host_losses, a->losses, (size_t)d->T * sizeof(float));
    if (kern_error(k)) return 1;
    double sum = 0;
    for (int t = 0; t < d->T; t++) sum += m->host_losses[t];
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

/* dWh [V,h] (fp32) += dlogits_blk[rows,V]^T @ n_blk[rows,h] */
static void head_dw_block(wp_kern *k, const wp_dims *d, void *acc, const void *dlogits_blk, const void *n_blk, int rows) {
    kern_gemm(k, true, false, d->V, d->h, rows, 1.0f, dlogits_blk, d->V, n_blk, d->h, 1.0f, acc, WP_F32, d->h);
}

void head_backward(wp_model *m, const wp_chunk_map *cm, const void *w, wp_acts *a, float dloss, void *top, void *gw,
                   wp_dtype gt) {
    wp_kern *k = m->k;
    const wp_dims *d = &a->d;
    const bool fused = gw != NULL;
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
