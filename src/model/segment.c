/* Sequence segments, for Seq1F1B (Sun et al.): a micro-batch split along the sequence into
 * segments [t0, t1) that the pipeline runs one after the other. Everything in a Llama block
 * but attention works token by token, so a segment differs from a whole sequence only there:
 *   F of a segment attends to the keys and values of its sequence's earlier segments, which
 *     those kept (same chunk, same rank); queries sit at positions t0..t1-1 of t1 keys.
 *   B of a segment produces dK/dV for all t1 keys; its own share goes on to RoPE and the
 *     projections, the earlier segments' shares are added into their accumulators, so that an
 *     earlier segment's B (which must therefore come later: last in, first out) includes them.
 * The attention kernels take sq < skv keys and RoPE takes the position offset, so the only
 * work here is gathering a prefix's K/V into one [b, t1, kv] buffer and scattering dK/dV back. */
#include "model_impl.h"

static size_t kv_row_bytes(const wp_dims *d) { return (size_t)d->kv * d->ct; }

/* The gathered prefix and its gradients: one buffer for the model, cut in four. */
static wp_result seg_scratch_reserve(wp_model *m) {
    if (m->seg_mem) return 0;
    size_t one = (size_t)m->d.b * (size_t)m->d.seq_full * kv_row_bytes(&m->d);
    wp_arena ar = {0};
    for (int i = 0; i < 4; i++) arena_take(&ar, one);
    m->seg_mem = kern_alloc(m->k, arena_size(&ar));
    if (!m->seg_mem) return WP_FAILED;
    ar = (wp_arena){.base = m->seg_mem};
    m->s_kv_k = arena_take(&ar, one);
    m->s_kv_v = arena_take(&ar, one);
    m->s_kv_dk = arena_take(&ar, one);
    m->s_kv_dv = arena_take(&ar, one);
    return 0;
}

/* prev, when given, must be the same chunk's state of the segment ending at t0 (none at t0 = 0). */
static wp_result check_prev(wp_model *m, int chunk, int t0, int t1, const wp_acts *prev, const char *fn) {
    if (!prev || (t0 > 0 && prev->chunk == chunk && prev->d.pos0 + prev->d.s == t0)) return 0;
    kern_set_error(m->k, "%s: segment [%d, %d) of chunk %d linked to [%d, %d) of chunk %d (want the segment ending at %d "
                   "of the same chunk)", fn, t0, t1, chunk, prev->d.pos0, prev->d.pos0 + prev->d.s, prev->chunk, t0);
    return WP_FAILED;
}

wp_acts *model_acts_create_segment(wp_model *m, int chunk, int t0, int t1, wp_acts *prev) {
    const int seq = m->L.cfg.seq;
    const char *fn = "model_acts_create_segment";
    if (chunk < 0 || chunk >= m->L.cfg.n_chunks) {
        kern_set_error(m->k, "%s: chunk %d out of range [0, %d)", fn, chunk, m->L.cfg.n_chunks);
        return NULL;
    }
    if (t0 < 0 || t1 <= t0 || t1 > seq) {
        kern_set_error(m->k, "%s: segment [%d, %d) is not inside [0, %d)", fn, t0, t1, seq);
        return NULL;
    }
    if (check_prev(m, chunk, t0, t1, prev, fn) != 0) return NULL;
    if (t0 > 0 && seg_scratch_reserve(m) != 0) return NULL;
    wp_dims d = model_dims_segment(&m->L.cfg, m->d.cdt, t0, t1);
    wp_acts *a = acts_create(m, chunk, &d);
    if (a) a->prev = prev;
    return a;
}

wp_result model_acts_relink(wp_model *m, wp_acts *a, wp_acts *prev) {
    if (kern_error(m->k)) return 1;
    WP_TRY(check_prev(m, a->chunk, a->d.pos0, a->d.pos0 + a->d.s, prev, "model_acts_relink"));
    a->prev = prev;
    a->later_awaits_b = false;
    return 0;
}

const wp_seg_kv *seg_kv_of(const wp_model *m, const wp_acts *a, int i, wp_seg_kv *buf) {
    if (!a->prev && !a->dk_acc) return NULL;
    *buf = (wp_seg_kv){.prev = a->prev, .layer = i};
    if (a->dk_acc) {
        buf->dk_acc = a->dk_acc[i];
        buf->dv_acc = a->dv_acc[i];
    }
    if (a->prev) {
        buf->k = m->s_kv_k;
        buf->v = m->s_kv_v;
        buf->dk = m->s_kv_dk;
        buf->dv = m->s_kv_dv;
    }
    return buf;
}

/* Copy rows [pos0, pos0+s) of every sequence between a segment's own [b*s, kv] tensor and
 * the prefix buffer [b, skv, kv]; to_prefix picks the direction, accumulate adds instead. */
static void move_rows(wp_kern *k, const wp_dims *d, int pos0, int s, int skv, void *seg, void *prefix,
                      bool to_prefix, bool accumulate) {
    const size_t row = kv_row_bytes(d);
    for (int bi = 0; bi < d->b; bi++) {
        char *own = (char *)seg + (size_t)bi * s * row;
        char *pre = (char *)prefix + ((size_t)bi * skv + pos0) * row;
        if (accumulate)
            kern_accumulate(k, own, d->cdt, pre, d->cdt, (size_t)s * d->kv);
        else if (to_prefix)
            kern_copy(k, pre, own, (size_t)s * row);
        else
            kern_copy(k, own, pre, (size_t)s * row);
    }
}

/* prefix_k/v [b, t1, kv] = the K/V of every earlier segment, then this one's. */
static void gather_prefix(wp_kern *k, const wp_dims *d, const wp_block_acts *A, const wp_seg_kv *S) {
    const int skv = d->pos0 + d->s;
    move_rows(k, d, d->pos0, d->s, skv, A->k, S->k, true, false);
    move_rows(k, d, d->pos0, d->s, skv, A->v, S->v, true, false);
    for (const wp_acts *p = S->prev; p; p = p->prev) {
        const wp_block_acts *P = &p->blocks[S->layer];
        move_rows(k, d, p->d.pos0, p->d.s, skv, P->k, S->k, true, false);
        move_rows(k, d, p->d.pos0, p->d.s, skv, P->v, S->v, true, false);
    }
}

void seg_attention_fwd(wp_kern *k, const wp_dims *d, const wp_block_acts *A, const wp_seg_kv *S) {
    if (!S || !S->prev) {
        kern_attention_fwd(k, A->att, A->lse, A->q, A->k, A->v, d->b, d->s, d->s, d->nh, d->nkv, d->hd, A->lo);
        return;
    }
    const int skv = d->pos0 + d->s;
    gather_prefix(k, d, A, S);
    kern_attention_fwd(k, A->att, A->lse, A->q, S->k, S->v, d->b, d->s, skv, d->nh, d->nkv, d->hd,
                       A->lo); /* att [T,q]; lo holds key positions of the whole prefix */
}

/* G->dk/dv of this segment, and the earlier segments' share added into their accumulators. */
static void scatter_prefix_grads(wp_kern *k, const wp_dims *d, const wp_block_grads *G, const wp_seg_kv *S) {
    const int skv = d->pos0 + d->s;
    move_rows(k, d, d->pos0, d->s, skv, G->dk, S->dk, false, false);
    move_rows(k, d, d->pos0, d->s, skv, G->dv, S->dv, false, false);
    for (const wp_acts *p = S->prev; p; p = p->prev) {
        move_rows(k, d, p->d.pos0, p->d.s, skv, p->dk_acc[S->layer], S->dk, false, true);
        move_rows(k, d, p->d.pos0, p->d.s, skv, p->dv_acc[S->layer], S->dv, false, true);
    }
}

void seg_attention_bwd(wp_kern *k, const wp_dims *d, const wp_block_acts *A, const wp_block_grads *G,
                       const wp_seg_kv *S) {
    if (!S || !S->prev) {
        kern_attention_bwd(k, G->dq, G->dk, G->dv, G->datt, A->q, A->k, A->v, A->att, A->lse, d->b, d->s, d->s, d->nh,
                           d->nkv, d->hd, A->lo);
    } else {
        const int skv = d->pos0 + d->s;
        gather_prefix(k, d, A, S);
        kern_attention_bwd(k, G->dq, S->dk, S->dv, G->datt, A->q, S->k, S->v, A->att, A->lse, d->b, d->s, skv, d->nh,
                           d->nkv, d->hd, A->lo); /* dq [T,q]; dK, dV of the whole prefix [b*t1, kv] */
        scatter_prefix_grads(k, d, G, S);
    }
    if (S && S->dk_acc) {
        /* what the later segments' queries contributed to this segment's keys and values */
        kern_accumulate(k, G->dk, d->cdt, S->dk_acc, d->cdt, (size_t)d->T * d->kv);
        kern_accumulate(k, G->dv, d->cdt, S->dv_acc, d->cdt, (size_t)d->T * d->kv);
    }
}

wp_result seg_forward_begin(wp_model *m, wp_acts *a, const char *fn) {
    if (a->d.pos0 > 0 && !a->prev) {
        kern_set_error(m->k, "%s: segment [%d, %d) of chunk %d is not linked to the segment before it", fn, a->d.pos0,
                       a->d.pos0 + a->d.s, a->chunk);
        return 1;
    }
    if (a->prev && a->prev->later_awaits_b) {
        kern_set_error(m->k, "%s: segment at %d of chunk %d: a later segment's F already ran without its B", fn,
                       a->prev->d.pos0, a->chunk);
        return 1;
    }
    if (a->dk_acc)
        for (int i = 0; i < m->L.cfg.chunk_layers[a->chunk]; i++) {
            kern_zero(m->k, a->dk_acc[i], (size_t)a->d.T * kv_row_bytes(&a->d));
            kern_zero(m->k, a->dv_acc[i], (size_t)a->d.T * kv_row_bytes(&a->d));
        }
    a->later_awaits_b = false;
    if (a->prev) a->prev->later_awaits_b = true;
    return kern_status(m->k);
}

wp_result seg_backward_check(wp_model *m, const wp_acts *a, const char *fn) {
    if (!a->later_awaits_b) return 0;
    kern_set_error(m->k, "%s: segment [%d, %d) of chunk %d before the B of the segment after it (Seq1F1B's backward is last in, first out)",
                   fn, a->d.pos0, a->d.pos0 + a->d.s, a->chunk);
    return 1;
}

void seg_backward_end(wp_acts *a) {
    if (a->prev) a->prev->later_awaits_b = false;
}
