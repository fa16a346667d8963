/* One Llama block as an explicit list of kernel calls (llm.c style), shapes beside each call.
 *   n1 = rmsnorm(x) * ln1;  q, k = rope(n1 Wq^T), rope(n1 Wk^T);  v = n1 Wv^T
 *   x1 = x + attn(q, k, v) Wo^T;  n2 = rmsnorm(x1) * ln2
 *   out = x1 + (silu(n2 Wg^T) * (n2 Wu^T)) Wd^T
 * Weights are [out, in] (Hugging Face), so a projection is gemm(x, W, trans_b).
 * The backward is split the way zero-bubble schedules (and WeiPipe's WZB variants) want it:
 * B produces input gradients and each linear's output gradient dy; the W-pass turns dy and
 * the layer input into dW += dy^T x. The fused backward runs the very same W calls as soon
 * as each dy exists, so both orders give the same bits. */
#include "model_impl.h"

#define W_AT(w, off) w_at(d, w, off)
#define G_AT(gw, off) g_at(gw, gt, off)

/* y[T,out] = x[T,in] @ W^T, W [out,in]; beta 1 adds to y (the residual). */
static void linear_fwd(wp_kern *k, const wp_dims *d, void *y, const void *x, const void *W, int out, int in, float beta) {
    kern_gemm(k, false, true, d->T, out, in, 1.0f, x, in, W, in, beta, y, d->cdt, out);
}

/* dx[T,in] (= or +=) dy[T,out] @ W[out,in] */
static void linear_bwd_input(wp_kern *k, const wp_dims *d, void *dx, const void *dy, const void *W, int out, int in,
                             float beta) {
    kern_gemm(k, false, false, d->T, in, out, 1.0f, dy, out, W, in, beta, dx, d->cdt, in);
}

/* dW[out,in] += dy[T,out]^T @ x[T,in], accumulated in gW's dtype */
static void linear_bwd_weight(wp_kern *k, const wp_dims *d, void *dW, wp_dtype gt, const void *dy, const void *x,
                              int out, int in) {
    kern_gemm(k, true, false, out, in, d->T, 1.0f, dy, out, x, in, 1.0f, dW, gt, in);
}

/* Where RoPE counts positions from: the sequence's start (NULL), or with --doc-positions restart
 * each token's document start, so that a packed document is computed as if it were alone. */
static const int32_t *rope_origin(const wp_dims *d, const wp_block_acts *A) {
    return d->pos_restart ? A->lo : NULL;
}

void block_forward(wp_kern *k, const wp_dims *d, const void *w, const wp_block_offsets *o, const wp_block_acts *A,
                   const wp_seg_kv *S, void *out) {
    const int T = d->T, h = d->h, q = d->q, kv = d->kv, f = d->f;
    kern_rmsnorm_fwd(k, A->n1, A->rstd1, A->x, W_AT(w, o->ln1), T, h, d->eps); /* n1 [T,h], rstd1 [T] */
    linear_fwd(k, d, A->q, A->n1, W_AT(w, o->wq), q, h, 0.0f);                 /* q [T,q]   = n1 @ Wq^T */
    linear_fwd(k, d, A->k, A->n1, W_AT(w, o->wk), kv, h, 0.0f);                /* k [T,kv]  = n1 @ Wk^T */
    linear_fwd(k, d, A->v, A->n1, W_AT(w, o->wv), kv, h, 0.0f);                /* v [T,kv]  = n1 @ Wv^T */
    const int32_t *plo = rope_origin(d, A);
    kern_rope_fwd_scaled(k, A->q, d->b, d->s, d->nh, d->hd, d->pos0, d->theta, &d->rope, plo); /* q [b*s, nh*hd] */
    kern_rope_fwd_scaled(k, A->k, d->b, d->s, d->nkv, d->hd, d->pos0, d->theta, &d->rope, plo); /* k [b*s, nkv*hd] */
    seg_attention_fwd(k, d, A, S);                                               /* att [T,q] */
    kern_copy(k, A->x1, A->x, (size_t)T * h * d->ct);                           /* x1 [T,h] = x */
    linear_fwd(k, d, A->x1, A->att, W_AT(w, o->wo), h, q, 1.0f);               /* x1 += att @ Wo^T */
    kern_rmsnorm_fwd(k, A->n2, A->rstd2, A->x1, W_AT(w, o->ln2), T, h, d->eps); /* n2 [T,h] */
    linear_fwd(k, d, A->gate, A->n2, W_AT(w, o->wg), f, h, 0.0f);              /* gate [T,f] = n2 @ Wg^T */
    linear_fwd(k, d, A->up, A->n2, W_AT(w, o->wu), f, h, 0.0f);                /* up [T,f]   = n2 @ Wu^T */
    kern_swiglu_fwd(k, A->sw, A->gate, A->up, (size_t)T * f);                  /* sw [T,f] */
    if (!out) return;
    kern_copy(k, out, A->x1, (size_t)T * h * d->ct);                           /* out [T,h] = x1 */
    linear_fwd(k, d, out, A->sw, W_AT(w, o->wd), h, f, 1.0f);                  /* out += sw @ Wd^T */
}

/* The W-pass in three stages, each callable as soon as B has produced its dy. */
static void wgrad_mlp(wp_kern *k, const wp_dims *d, const wp_block_offsets *o, const wp_block_acts *A,
                      const wp_block_grads *G, const void *dx2, void *gw, wp_dtype gt) {
    linear_bwd_weight(k, d, G_AT(gw, o->wd), gt, dx2, A->sw, d->h, d->f);     /* dWd [h,f] += dx2^T @ sw */
    linear_bwd_weight(k, d, G_AT(gw, o->wg), gt, G->dgate, A->n2, d->f, d->h); /* dWg [f,h] += dgate^T @ n2 */
    linear_bwd_weight(k, d, G_AT(gw, o->wu), gt, G->dup, A->n2, d->f, d->h);   /* dWu [f,h] += dup^T @ n2 */
    kern_rmsnorm_bwd_weight(k, G_AT(gw, o->ln2), gt, G->dn2, A->x1, A->rstd2, d->T, d->h); /* dln2 [h] */
}

static void wgrad_attn_out(wp_kern *k, const wp_dims *d, const wp_block_offsets *o, const wp_block_acts *A,
                           const wp_block_grads *G, void *gw, wp_dtype gt) {
    linear_bwd_weight(k, d, G_AT(gw, o->wo), gt, G->dx1, A->att, d->h, d->q);  /* dWo [h,q] += dx1^T @ att */
}

static void wgrad_qkv(wp_kern *k, const wp_dims *d, const wp_block_offsets *o, const wp_block_acts *A,
                      const wp_block_grads *G, void *gw, wp_dtype gt) {
    linear_bwd_weight(k, d, G_AT(gw, o->wq), gt, G->dq, A->n1, d->q, d->h);    /* dWq [q,h] += dq^T @ n1 */
    linear_bwd_weight(k, d, G_AT(gw, o->wk), gt, G->dk, A->n1, d->kv, d->h);   /* dWk [kv,h] += dk^T @ n1 */
    linear_bwd_weight(k, d, G_AT(gw, o->wv), gt, G->dv, A->n1, d->kv, d->h);   /* dWv [kv,h] += dv^T @ n1 */
    kern_rmsnorm_bwd_weight(k, G_AT(gw, o->ln1), gt, G->dn1, A->x, A->rstd1, d->T, d->h); /* dln1 [h] */
}

void block_backward(wp_kern *k, const wp_dims *d, const void *w, const wp_block_offsets *o, const wp_block_acts *A,
                    const wp_seg_kv *S, const wp_block_grads *G, const void *dx2, void *dx, void *gw, wp_dtype gt) {
    const int T = d->T, h = d->h, q = d->q, kv = d->kv, f = d->f;
    /* MLP: out = x1 + sw @ Wd^T */
    linear_bwd_input(k, d, G->dsw, dx2, W_AT(w, o->wd), h, f, 0.0f);           /* dsw [T,f] = dx2 @ Wd */
    kern_swiglu_bwd(k, G->dgate, G->dup, G->dsw, A->gate, A->up, (size_t)T * f); /* dgate, dup [T,f] */
    linear_bwd_input(k, d, G->dn2, G->dgate, W_AT(w, o->wg), f, h, 0.0f);      /* dn2 [T,h] = dgate @ Wg */
    linear_bwd_input(k, d, G->dn2, G->dup, W_AT(w, o->wu), f, h, 1.0f);        /* dn2 += dup @ Wu */
    kern_copy(k, G->dx1, dx2, (size_t)T * h * d->ct);                           /* dx1 [T,h] = dx2 (residual) */
    kern_rmsnorm_bwd_input(k, G->dx1, true, G->dn2, A->x1, W_AT(w, o->ln2), A->rstd2, T, h); /* dx1 += norm2' */
    if (gw) wgrad_mlp(k, d, o, A, G, dx2, gw, gt);
    /* attention: x1 = x + att @ Wo^T */
    linear_bwd_input(k, d, G->datt, G->dx1, W_AT(w, o->wo), h, q, 0.0f);       /* datt [T,q] = dx1 @ Wo */
    if (gw) wgrad_attn_out(k, d, o, A, G, gw, gt);
    seg_attention_bwd(k, d, A, G, S);                                            /* dq [T,q], dk, dv [T,kv] */
    const int32_t *plo = rope_origin(d, A);
    kern_rope_bwd_scaled(k, G->dq, d->b, d->s, d->nh, d->hd, d->pos0, d->theta, &d->rope, plo); /* dq before RoPE */
    kern_rope_bwd_scaled(k, G->dk, d->b, d->s, d->nkv, d->hd, d->pos0, d->theta, &d->rope, plo); /* dk before RoPE */
    linear_bwd_input(k, d, G->dn1, G->dq, W_AT(w, o->wq), q, h, 0.0f);         /* dn1 [T,h] = dq @ Wq */
    linear_bwd_input(k, d, G->dn1, G->dk, W_AT(w, o->wk), kv, h, 1.0f);        /* dn1 += dk @ Wk */
    linear_bwd_input(k, d, G->dn1, G->dv, W_AT(w, o->wv), kv, h, 1.0f);        /* dn1 += dv @ Wv */
    kern_copy(k, dx, G->dx1, (size_t)T * h * d->ct);                            /* dx [T,h] = dx1 (residual) */
    kern_rmsnorm_bwd_input(k, dx, true, G->dn1, A->x, W_AT(w, o->ln1), A->rstd1, T, h); /* dx += norm1' */
    if (gw) wgrad_qkv(k, d, o, A, G, gw, gt);
}

void block_backward_weight(wp_kern *k, const wp_dims *d, const wp_block_offsets *o, const wp_block_acts *A,
                           const wp_block_grads *G, const void *dx2, void *gw, wp_dtype gt) {
    wgrad_mlp(k, d, o, A, G, dx2, gw, gt);
    wgrad_attn_out(k, d, o, A, G, gw, gt);
    wgrad_qkv(k, d, o, A, G, gw, gt);
}
