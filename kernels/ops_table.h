/* The one table of compute ops: each op's signature is written here once, and the rest is
 * expanded from it (docs/architecture.md, "A new kernel op"):
 *   kernels.h            the public prototype kern_<name>
 *   backend.h            the wp_kern_ops slot <name>
 *   ops_slots.h          the slot's name and group (WP_SLOT_OP), checked at kern_create
 *   dispatch.c           kern_<name>: the sticky error, the row's check, then the backend's slot
 *   replay.c             rp_op_<name>: the call kept and hashed while a replay records (replay.h)
 *   cpu/cpu.h, cpu_ops.c the CPU prototype cpu_<name> and its slot entry
 *   cuda/cuda_impl.h, cuda_ops.c   the CUDA prototype cu_<name> and its slot entry
 *
 * Rows, in wp_kern_ops order:
 *   OP(ret, name, (parameters), (arguments), check)
 *      check: an expression of the parameters, evaluated by dispatch.c (its helpers: PTRS(...)
 *      non-NULL, DTYPE(t), GRAD_DTYPE(t), rows_ok, cond_ok, ...): false refuses the call (a
 *      helper has set the error) or skips empty work; true calls the backend. ret is void.
 *   CUSTOM(ret, name, (parameters), (arguments))
 *      the same slot and backend prototypes, but the public prototype (kernels.h) and the
 *      wrapper (dispatch.c) are written by hand: sumsq returns NaN when it cannot run, and
 *      RoPE's public calls are kern_rope_*_scaled and the plain kern_rope_* without scaling.
 * The arguments are the parameters' names, for the forwarding call. Every op receives the
 * context first. The meaning of each op (shapes, dtypes, what is accumulated) is documented
 * beside its row; kernels.h's conventions hold for all. */
#ifndef WP_KERNELS_OPS_TABLE_H
#define WP_KERNELS_OPS_TABLE_H

#define WP_KERN_OPS(OP, CUSTOM)                                                                                       \
    /* ---- elementwise ---- */                                                                                       \
    /* dst[i] = (dt) src[i] */                                                                                        \
    OP(void, convert, (wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n),                 \
       (k, dst, dt, src, st, n), DTYPE(dt) && DTYPE(st) && n > 0 && PTRS(dst, src))                                 \
    /* dst[i] += src[i] (computed in fp32, rounded once to dt) */                                                     \
    OP(void, accumulate, (wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n),              \
       (k, dst, dt, src, st, n), DTYPE(dt) && DTYPE(st) && n > 0 && PTRS(dst, src))                                 \
    /* x[i] *= a */                                                                                                   \
    OP(void, scale, (wp_kern *k, void *x, wp_dtype t, float a, size_t n), (k, x, t, a, n),                          \
       DTYPE(t) && n > 0 && PTRS(x))                                                                                 \
    /* sum of squares in fp64; inf/NaN anywhere makes the result non-finite */                                        \
    CUSTOM(double, sumsq, (wp_kern *k, const void *x, wp_dtype t, size_t n), (k, x, t, n))                          \
    /* y = a + b on ct buffers; y may alias a or b */                                                                 \
    OP(void, add, (wp_kern *k, void *y, const void *a, const void *b, size_t n), (k, y, a, b, n),                   \
       n > 0 && PTRS(y, a, b))                                                                                       \
                                                                                                                      \
    /* ---- matrix products ---- */                                                                                   \
    /* C[m,n] = alpha * op(A)[m,kk] @ op(B)[kk,n] + beta * C; A, B in ct, C in ctype (ct, F32 or                      \
     * BF16); accumulation in fp32. op(X) = X^T when the flag is set; lda/ldb/ldc are row strides. */                 \
    OP(void, gemm,                                                                                                    \
       (wp_kern *k, bool trans_a, bool trans_b, int m, int n, int kk, float alpha, const void *A, int lda,          \
        const void *B, int ldb, float beta, void *C, wp_dtype ctype, int ldc),                                       \
       (k, trans_a, trans_b, m, n, kk, alpha, A, lda, B, ldb, beta, C, ctype, ldc),                                  \
       gemm_ok(k, fn, trans_a, trans_b, m, n, kk, lda, ldb, ctype, ldc) && m > 0 && n > 0 && PTRS(A, B, C))         \
                                                                                                                      \
    /* ---- layers ---- */                                                                                            \
    /* y = x * rstd * w, rstd[t] = 1/sqrt(mean(x[t]^2) + eps); x, y: [T,h] ct; w: [h] ct */                           \
    OP(void, rmsnorm_fwd, (wp_kern *k, void *y, float *rstd, const void *x, const void *w, int T, int h, float eps), \
       (k, y, rstd, x, w, T, h, eps),                                                                                 \
       rows_ok(k, fn, T, h) && cond_ok(k, eps >= 0.0f, "%s: eps = %g is negative", fn, eps) && T > 0 &&             \
           PTRS(y, rstd, x, w))                                                                                      \
    /* dx (=, or += when accumulate) the input gradient of rmsnorm given dy */                                        \
    OP(void, rmsnorm_bwd_input,                                                                                       \
       (wp_kern *k, void *dx, bool accumulate, const void *dy, const void *x, const void *w, const float *rstd,     \
        int T, int h),                                                                                               \
       (k, dx, accumulate, dy, x, w, rstd, T, h), rows_ok(k, fn, T, h) && T > 0 && PTRS(dx, dy, x, w, rstd))       \
    /* dw[j] += sum_t dy[t,j] * x[t,j] * rstd[t] */                                                                   \
    OP(void, rmsnorm_bwd_weight,                                                                                      \
       (wp_kern *k, void *dw, wp_dtype dwtype, const void *dy, const void *x, const float *rstd, int T, int h),     \
       (k, dw, dwtype, dy, x, rstd, T, h),                                                                            \
       rows_ok(k, fn, T, h) && GRAD_DTYPE(dwtype) && T > 0 && PTRS(dw, dy, x, rstd))                                \
    /* RoPE in place (kernels.h: kern_rope_fwd_scaled, kern_rope_bwd_scaled); sc NULL: no scaling;                   \
     * plo NULL: positions pos0 + t, else pos0 + t - plo[row] (documents restarting their positions) */               \
    CUSTOM(void, rope_fwd,                                                                                            \
           (wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,                            \
            const wp_rope_scaling *sc, const int32_t *plo),                                                           \
           (k, x, b, s, nheads, hd, pos0, theta, sc, plo))                                                            \
    CUSTOM(void, rope_bwd,                                                                                            \
           (wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,                            \
            const wp_rope_scaling *sc, const int32_t *plo),                                                           \
           (k, x, b, s, nheads, hd, pos0, theta, sc, plo))                                                            \
    /* Causal attention, blockwise with an online softmax: O(s) memory, never an s x s matrix.                        \
     * q, o: [b*sq, nh*hd]; k, v: [b*skv, nkv*hd] (nh % nkv == 0: grouped-query heads share K/V);                     \
     * queries are the last sq of skv positions (sq == skv for a whole sequence), query i sits at                     \
     * position skv - sq + i and sees keys 0..that position. Scale 1/sqrt(hd).                                        \
     * lse: [b, nh, sq] fp32 log-sum-exp of the scaled scores, kept for the backward.                                 \
     * qlo (document masks), NULL or [b*sq] int32 in backend memory, nondecreasing along each sequence: query i of    \
     * sequence bi sees only keys qlo[bi*sq+i] .. its position (src/model/doc_mask.c makes it); key tiles no query of \
     * a tile sees are skipped. */                                                                                    \
    OP(void, attention_fwd,                                                                                           \
       (wp_kern *k, void *o, float *lse, const void *q, const void *kv_k, const void *kv_v, int b, int sq, int skv, \
        int nh, int nkv, int hd, const int32_t *qlo),                                                                \
       (k, o, lse, q, kv_k, kv_v, b, sq, skv, nh, nkv, hd, qlo),                                                      \
       attention_ok(k, fn, b, sq, skv, nh, nkv, hd) && b > 0 && sq > 0 && PTRS(o, lse, q, kv_k, kv_v))              \
    /* dq, dk, dv are overwritten. Probabilities are recomputed per block from lse; deterministic. */                 \
    OP(void, attention_bwd,                                                                                           \
       (wp_kern *k, void *dq, void *dk, void *dv, const void *dout, const void *q, const void *kv_k,                 \
        const void *kv_v, const void *o, const float *lse, int b, int sq, int skv, int nh, int nkv, int hd,          \
        const int32_t *qlo),                                                                                         \
       (k, dq, dk, dv, dout, q, kv_k, kv_v, o, lse, b, sq, skv, nh, nkv, hd, qlo),                                    \
       attention_ok(k, fn, b, sq, skv, nh, nkv, hd) && b > 0 && sq > 0 &&                                           \
           PTRS(dq, dk, dv, dout, q, kv_k, kv_v, o, lse))                                                            \
    /* y = silu(gate) * up over n elements */                                                                         \
    OP(void, swiglu_fwd, (wp_kern *k, void *y, const void *gate, const void *up, size_t n), (k, y, gate, up, n),    \
       n > 0 && PTRS(y, gate, up))                                                                                   \
    OP(void, swiglu_bwd,                                                                                              \
       (wp_kern *k, void *dgate, void *dup, const void *dy, const void *gate, const void *up, size_t n),            \
       (k, dgate, dup, dy, gate, up, n), n > 0 && PTRS(dgate, dup, dy, gate, up))                                   \
    /* y[t] = wte[tokens[t]]; tokens in backend memory, each in [0, V) */                                             \
    OP(void, embedding_fwd, (wp_kern *k, void *y, const int32_t *tokens, const void *wte, int T, int h),            \
       (k, y, tokens, wte, T, h), rows_ok(k, fn, T, h) && T > 0 && PTRS(y, tokens, wte))                            \
    /* dwte[tokens[t]] += dy[t], in token order (deterministic) */                                                    \
    OP(void, embedding_bwd,                                                                                           \
       (wp_kern *k, void *dwte, wp_dtype dwtype, const int32_t *tokens, const void *dy, int T, int h),              \
       (k, dwte, dwtype, tokens, dy, T, h),                                                                           \
       rows_ok(k, fn, T, h) && GRAD_DTYPE(dwtype) && T > 0 && PTRS(dwte, tokens, dy))                               \
    /* Fused LM head + softmax cross-entropy over blocks of rows: logits = x @ Wh^T ([T,V]) exist                     \
     * only one row block at a time. targets[t] < 0 marks a position without a loss.                                  \
     * fwd: losses[t] = lse[t] - logit[t, target] (0 where masked), lse[t] kept for the backward. */                  \
    OP(void, lmhead_ce_fwd,                                                                                           \
       (wp_kern *k, float *losses, float *lse, const void *x, const void *w_head, const int32_t *targets, int T,    \
        int h, int V),                                                                                               \
       (k, losses, lse, x, w_head, targets, T, h, V),                                                                 \
       lmhead_ok(k, fn, T, h, V) && T > 0 && PTRS(losses, lse, x, w_head, targets))                                 \
    /* dlogits = (softmax - onehot(target)) * dloss (0 on masked rows), recomputed per block;                         \
     * dx = dlogits @ Wh (overwritten). Optional outputs: dlogits_out [T,V] ct, kept for a later                      \
     * W-pass (gemm dWh += dlogits^T x); dw_head (+=) for a fused backward. Either may be NULL. */                    \
    OP(void, lmhead_ce_bwd,                                                                                           \
       (wp_kern *k, void *dx, void *dlogits_out, void *dw_head, wp_dtype dwtype, const void *x, const void *w_head, \
        const int32_t *targets, const float *lse, float dloss, int T, int h, int V),                                 \
       (k, dx, dlogits_out, dw_head, dwtype, x, w_head, targets, lse, dloss, T, h, V),                                \
       lmhead_ok(k, fn, T, h, V) && (!dw_head || GRAD_DTYPE(dwtype)) && T > 0 &&                                    \
           PTRS(dx, x, w_head, targets, lse))                                                                        \
    /* Forward and backward in one pass, for training, where dloss is known at the forward:                           \
     * per row block the logits once, then losses (as fwd), dlogits in place, dx = dlogits @ Wh                       \
     * (overwritten) and dw_head (fp32, +=) += dlogits^T x. Three GEMMs over the head instead of the                  \
     * four of fwd + bwd (which recomputes the logits); the same arithmetic as fwd then bwd. */                       \
    OP(void, lmhead_ce_fwd_bwd,                                                                                       \
       (wp_kern *k, float *losses, void *dx, float *dw_head, const void *x, const void *w_head,                      \
        const int32_t *targets, float dloss, int T, int h, int V),                                                   \
       (k, losses, dx, dw_head, x, w_head, targets, dloss, T, h, V),                                                  \
       lmhead_ok(k, fn, T, h, V) && T > 0 && PTRS(losses, dx, dw_head, x, w_head, targets))                         \
                                                                                                                      \
    /* ---- optimizer ---- */                                                                                         \
    /* AdamW on fp32 masters with fp32 moments; grad (fp32) is multiplied by grad_scale first                         \
     * (unscaling and clipping folded in). bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. Writes the new                       \
     * working copy to w_out in wtype (the dtype that travels the ring); w_out NULL writes none. */                   \
    OP(void, adamw,                                                                                                   \
       (wp_kern *k, float *master, float *m, float *v, const float *grad, float grad_scale, void *w_out,            \
        wp_dtype wtype, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, float bc1,      \
        float bc2),                                                                                                  \
       (k, master, m, v, grad, grad_scale, w_out, wtype, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2),           \
       DTYPE(wtype) &&                                                                                               \
           cond_ok(k, bc1 > 0.0f && bc2 > 0.0f, "%s: bias corrections bc1 = %g, bc2 = %g must be positive", fn,     \
                   bc1, bc2) &&                                                                                      \
           n > 0 && PTRS(master, m, v, grad))                                                                         \
    /* kern_adamw on n_pieces pieces at once (wp_adamw_piece: each one's pointers, size and weight                    \
     * decay) with the same scalars, numel the sum of their n. pieces lives in backend memory (the                    \
     * CUDA backend reads it on the device: one launch over all pieces, uploaded once by the caller                   \
     * and reused) and cannot be checked here: the caller keeps first and n consistent. Each element                  \
     * gets kern_adamw's arithmetic, so the bits equal the per-piece calls' (the CPU backend makes                    \
     * exactly those calls, in order). */                                                                              \
    OP(void, adamw_multi,                                                                                             \
       (wp_kern *k, const wp_adamw_piece *pieces, int n_pieces, size_t numel, float grad_scale, wp_dtype wtype,      \
        float lr, float beta1, float beta2, float eps, float bc1, float bc2),                                        \
       (k, pieces, n_pieces, numel, grad_scale, wtype, lr, beta1, beta2, eps, bc1, bc2),                             \
       DTYPE(wtype) &&                                                                                               \
           cond_ok(k, bc1 > 0.0f && bc2 > 0.0f, "%s: bias corrections bc1 = %g, bc2 = %g must be positive", fn,     \
                   bc1, bc2) &&                                                                                      \
           cond_ok(k, n_pieces >= 0, "%s: n_pieces = %d is negative", fn, n_pieces) && n_pieces > 0 && numel > 0 &&  \
           PTRS(pieces))

#endif
