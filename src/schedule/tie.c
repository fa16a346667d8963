/* Tied word embeddings on every strategy (schedule.h: schedule_tie; docs/model.md).
 *
 * The embedding lives in chunk 0 and the head in the last chunk; their owners differ in
 * general. The tie is one more pass over any generated schedule, adding data, not runtime
 * branches: before REDUCE the head's accumulated gradient goes (T.g, fp32) to the embedding's
 * owner and is added into the embedding's accumulator, so the norm and the AdamW step see the sum
 * of both uses once; after UPDATE(0) the embedding's new fp32 master goes (T.w) to the head's
 * owner and is copied over the head's master before the last chunk's next LOAD, so the head is
 * the updated embedding wherever the schedule carries it next. The head's own AdamW step runs on
 * a zero gradient and is overwritten, so the one tensor is stepped once. In a sliced schedule the
 * head's slices and the embedding's slices cut the tensor at different places: every nonempty
 * piece (k, j) of the two cuts travels from the owner of one to the owner of the other. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

static wp_result fail(char *err, size_t errlen, const char *what, int rank) { return wp_fail(WP_FAILED, err, errlen, "schedule: tied embeddings: %s on rank %d", what, rank); }

static int owner_of(const wp_schedule *s, int chunk, int slice) { return s->nslices ? slice : s->owner[chunk]; }

/* Whether a names a LOAD of the last chunk's next version covering head slice k. */
static bool loads_next_head(const wp_schedule *s, const wp_action *a, int last, int k) {
    return a->op == WP_OP_LOAD && a->buf.kind == WP_BUF_W && a->buf.chunk == last && a->buf.idx >= 1 &&
           (!a->buf.nslices || !s->nslices || a->buf.slice == k);
}

typedef struct {
    wp_action *a;
    int n, cap;
} list;

static wp_result put(list *l, wp_action a) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        wp_action *p = realloc(l->a, (size_t)cap * sizeof *p);
        if (!p) return 1;
        l->a = p;
        l->cap = cap;
    }
    l->a[l->n++] = a;
    return 0;
}

/* The parts of one lane's pieces that rank r runs: TOUT and SEND (it owns the source side), RECV
 * (the destination side, from another rank), TIN and FREE (destination), FREE of what it sent.
 * Pieces in (k, j) order on every rank, so FIFO pairing per (src, dst, channel) holds. */
enum { E_OUT, E_RECV, E_IN, E_FREE_SENT };

static bool emit(list *l, const wp_schedule *s, const wp_layout *L, int r, int lane, int part) {
    const int n = s->nslices, P = n ? n : 1, last = s->nchunks - 1, turn = 0;
    bool bad = false;
    for (int k = 0; k < P; k++)
        for (int j = 0; j < P; j++) {
            size_t off, len;
            tie_piece(L, n, k, j, &off, &len);
            int hk = owner_of(s, last, k), ej = owner_of(s, 0, j);
            int src = lane == WP_TIE_GRAD ? hk : ej, dst = lane == WP_TIE_GRAD ? ej : hk;
            if (!len) continue;
            wp_buf b = buf_tie(lane, k, j);
            if (part == E_OUT && src == r) {
                bad |= put(l, act_buf(WP_OP_TOUT, b, turn)) != 0;
                if (dst != r) bad |= put(l, act_xfer(WP_OP_SEND, b, dst, WP_SCH_TIE, turn)) != 0;
            } else if (part == E_RECV && dst == r && src != r) {
                bad |= put(l, act_xfer(WP_OP_RECV, b, src, WP_SCH_TIE, turn)) != 0;
            } else if (part == E_IN && dst == r) {
                bad |= put(l, act_buf(WP_OP_TIN, b, turn)) != 0;
                bad |= put(l, act_buf(WP_OP_FREE, b, turn)) != 0;
            } else if (part == E_FREE_SENT && src == r && dst != r) {
                bad |= put(l, act_buf(WP_OP_FREE, b, turn)) != 0;
            }
        }
    return bad;
}

/* Whether rank r sends T.w pieces to itself (it owns both ends of one). */
static bool emits_self(const wp_schedule *s, const wp_layout *L, int r) {
    const int n = s->nslices, P = n ? n : 1, last = s->nchunks - 1;
    for (int k = 0; k < P; k++)
        for (int j = 0; j < P; j++) {
            size_t off, len;
            tie_piece(L, n, k, j, &off, &len);
            if (len && owner_of(s, last, k) == r && owner_of(s, 0, j) == r) return true;
        }
    return false;
}

wp_result schedule_tie(wp_schedule *s, const wp_layout *L, char *err, size_t errlen) {
    size_t eo, ho, numel;
    if (!tie_offsets(L, &eo, &ho, &numel) || s->tied) return 0;
    const int n = s->nslices, last = s->nchunks - 1;
    /* one chunk held whole by its owner: the optimizer folds the tie itself (optim.h) */
    if (!n && s->nchunks == 1) return 0;
    for (int r = 0; r < s->nranks; r++) {
        wp_rank_prog *p = &s->rank[r];
        int reduce = -1, upd0 = -1, updl = -1, loadl = -1;
        for (int i = 0; i < p->n; i++) {
            const wp_action *a = &p->a[i];
            if (a->op == WP_OP_REDUCE && reduce < 0) reduce = i;
            if (a->op == WP_OP_UPDATE && a->chunk == 0 && upd0 < 0) upd0 = i;
            if (a->op == WP_OP_UPDATE && a->chunk == last && updl < 0) updl = i;
        }
        if (reduce < 0) return fail(err, errlen, "no REDUCE", r);
        /* the head's owner (slice k = r when sliced) takes T.w in before its next LOAD */
        for (int i = updl + 1; updl >= 0 && i < p->n && loadl < 0; i++)
            if (loads_next_head(s, &p->a[i], last, n ? r : 0)) loadl = i;
        if (loadl < 0) loadl = p->n;
        list out = {0};
        bool bad = false;
        for (int i = 0; i <= p->n && !bad; i++) {
            if (i == reduce) { /* gradients: the head's pieces go, then the embedding's come in */
                bad |= emit(&out, s, L, r, WP_TIE_GRAD, E_OUT);
                bad |= emit(&out, s, L, r, WP_TIE_GRAD, E_RECV);
                bad |= emit(&out, s, L, r, WP_TIE_GRAD, E_IN);
                bad |= emit(&out, s, L, r, WP_TIE_GRAD, E_FREE_SENT);
            }
            if (i == loadl) { /* weights: the head's master becomes the updated embedding */
                if (upd0 >= loadl && emits_self(s, L, r))
                    return free(out.a), fail(err, errlen, "the last chunk is loaded before the embedding's update", r);
                bad |= emit(&out, s, L, r, WP_TIE_WEIGHT, E_IN);
            }
            if (i == p->n) break;
            bad |= put(&out, p->a[i]) != 0;
            if (i == reduce) bad |= emit(&out, s, L, r, WP_TIE_WEIGHT, E_RECV); /* posted early: never blocks a sender */
            if (i == upd0) bad |= emit(&out, s, L, r, WP_TIE_WEIGHT, E_OUT); /* the embedding's new master */
        }
        bad |= emit(&out, s, L, r, WP_TIE_WEIGHT, E_FREE_SENT); /* after the whole list: sends complete */
        if (bad) {
            free(out.a);
            return wp_fail(WP_FAILED, err, errlen, "schedule: out of memory");
        }
        free(p->a);
        p->a = out.a;
        p->n = out.n;
        p->cap = out.cap;
    }
    s->tied = true;
    return 0;
}
