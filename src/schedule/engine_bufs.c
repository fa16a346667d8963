/* The schedule engine's buffers (engine_impl.h): per rank the instances it holds (each may still
 * be arriving), how a name maps to them (a whole W or GW in a sliced schedule is its slices),
 * their creation and release with the memory counters, and the errors that name the action. */
#include <assert.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "model.h"

/* ---------- small helpers ---------- */

wp_result engine_grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return WP_FAILED;
    *p = q;
    *cap = nc;
    return 0;
}

int eng_oom(eng *e) {
    if (!e->failed) {
        snprintf(e->err, e->errlen, "schedule: out of memory");
        e->failed = 1;
    }
    return ERROR;
}

const char *eng_step_note(const eng *e, int step) {
    static const char *const notes[MAX_STEPS] = {"", " in the second step", " in the third step", " in the fourth step"};
    return e->steps > 1 ? notes[step] : "";
}

/* "rank R, action I (TEXT): message" — every error names where it happened. */
int eng_fail_at(eng *e, int rank, int step, int idx, const char *fmt, ...) {
    if (e->failed) return ERROR;
    char at[96], msg[400];
    action_text(&e->s->rank[rank].a[idx], at, sizeof at);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(e->err, e->errlen, "rank %d, action %d (%s)%s: %s", rank, idx, at, eng_step_note(e, step), msg);
    e->failed = 1;
    return ERROR;
}

int eng_fail_plain(eng *e, const char *fmt, ...) {
    if (e->failed) return ERROR;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, e->errlen, fmt, ap);
    va_end(ap);
    e->failed = 1;
    return ERROR;
}


/* Name with the version relative to `step`, as the lists write it. */
char *eng_rel_name(wp_buf b, int step, char *out, size_t len) {
    if (b.kind == WP_BUF_W) b.idx -= step;
    return buf_name(b, out, len);
}

inst *eng_find(rstate *R, wp_buf b) {
    intptr_t in;
    return bufmap_get(&R->by_name, b, &in) ? (inst *)in : NULL;
}

/* ---------- slices (ir.h: a sliced schedule holds W and GW as slices) ---------- */


/* The instances a name stands for: a whole W or GW in a sliced schedule is its S slices, any
 * other name itself. Returns the count, or -1 when the name's slicing does not fit the schedule. */
int eng_expand(const eng *e, wp_buf b, wp_buf *out) {
    if (b.nslices && (!sliceable(b) || b.nslices != e->S || b.slice >= b.nslices)) return -1;
    if (!e->S || !sliceable(b) || b.nslices) {
        out[0] = b;
        return 1;
    }
    for (int k = 0; k < e->S; k++) out[k] = buf_slice(b, k, e->S);
    return e->S;
}

int eng_bad_slicing(eng *e, int r, int step, int idx, wp_buf b) {
    char nm[48];
    return eng_fail_at(e, r, step, idx, "%s does not fit the schedule's slicing (%d slices per W and GW buffer)",
                   eng_rel_name(b, step, nm, sizeof nm), e->S);
}

/* How many instances R holds of b's whole (its slices, or the whole itself). */
static intptr_t wholes_held(const rstate *R, wp_buf b) {
    intptr_t n = 0;
    bufmap_get(&R->wholes, whole_of(b), &n);
    return n;
}

/* Whether R holds a slice of b's whole other than `except`, itself held or NULL (slot pools
 * count whole buffers). */
static bool holds_sibling(const rstate *R, wp_buf b, const inst *except) {
    return b.nslices && wholes_held(R, b) - (except != NULL) > 0;
}

/* One more (d = 1) or one fewer (d = -1) instance of b's whole held. */
static wp_result count_whole(rstate *R, wp_buf b, int d) {
    const intptr_t n = wholes_held(R, b) + d;
    if (n > 0) return bufmap_put(&R->wholes, whole_of(b), n);
    bufmap_del(&R->wholes, whole_of(b));
    return WP_OK;
}

void eng_wait_for(rstate *R, int why, const inst *in, wp_buf b, int step) {
    R->why = why;
    R->why_in = in;
    R->why_buf = b;
    R->why_step = step;
}

/* " (it was freed at action 12)" when it was, for use-after-free messages. */
const char *eng_freed_note(const eng *e, const rstate *R, wp_buf b, int step, char *out, size_t len) {
    out[0] = '\0';
    intptr_t at;
    if (bufmap_get(&R->freed, b, &at)) {
        const int at_step = (int)(at >> 32), at_idx = (int)(at & 0xffffffff);
        snprintf(out, len, " (it was freed at action %d%s)", at_idx, at_step != step ? eng_step_note(e, at_step) : "");
    }
    return out;
}

static size_t bytes_of(const eng *e, wp_buf b) {
    return e->sz && e->sz->L ? sched_buf_bytes(e->s, e->seg_t, e->sz->L, b) : 0;
}

/* One activation state of (c, mb) as F leaves it (kept = false), or what a separate B adds to it
 * for the W-pass (kept = true; model_acts_bytes: the runtime reserves that at B and releases it at
 * W, so charging it from F would count memory no rank holds): a segment's own size when the
 * schedule has segments. */
size_t eng_acts_bytes_of(const eng *e, int c, int mb, bool kept) {
    if (!e->sz) return 0;
    if (kept && !e->s->split) return 0;
    if (e->K == 1 || !e->sz->L) return kept ? e->sz->kept_bytes[c] : e->sz->acts_bytes[c];
    int j = mb % e->K;
    wp_dtype dt = precision_act_dtype(e->sz->L->cfg.precision);
    size_t fwd = model_acts_bytes_segment(e->sz->L, c, dt, false, e->seg_t[j], e->seg_t[j + 1]);
    return kept ? model_acts_bytes_segment(e->sz->L, c, dt, true, e->seg_t[j], e->seg_t[j + 1]) - fwd : fwd;
}

void eng_note_peaks(eng *e, int r) {
    rstate *R = &e->r[r];
    wp_rank_report *rep = &e->run->rank[r];
    for (int k = 0; k < WP_BUF_KINDS; k++)
        if (R->n_kind[k] > rep->peak_n[k]) rep->peak_n[k] = R->n_kind[k];
    if (R->n_acts > rep->peak_acts) rep->peak_acts = R->n_acts;
    if (R->acts_bytes > rep->peak_acts_bytes) rep->peak_acts_bytes = R->acts_bytes;
    if (R->bytes > rep->peak_bytes) rep->peak_bytes = R->bytes;
}

/* One more (or one fewer, d = -1) buffer of this size held: the pool model of engine_impl.h. */
static int slot_count(eng *e, int r, const inst *in, int d) {
    rstate *R = &e->r[r];
    if (!in->bytes) return 0;
    int i = 0;
    while (i < R->n_slots && R->slots[i].bytes != in->bytes) i++;
    if (i == R->n_slots) {
        if (d < 0 || engine_grow((void **)&R->slots, &R->cap_slots, R->n_slots + 1, sizeof *R->slots)) return d < 0 ? 0 : -1;
        R->slots[R->n_slots++] = (struct eng_slot){.bytes = in->bytes, .kind = in->b.kind};
    }
    struct eng_slot *sl = &R->slots[i];
    wp_rank_report *rep = &e->run->rank[r];
    sl->held += d;
    if (sl->held > sl->peak) sl->peak = sl->held, rep->pool_bytes[sl->kind] += sl->bytes;
    if (in->b.kind == WP_BUF_GW || in->b.kind == WP_BUF_T) return 0;
    sl->held_v += d;
    if (sl->held_v > sl->peak_v) {
        sl->peak_v = sl->held_v;
        if (sl->viewed) rep->viewed_bytes[sl->kind] += sl->bytes;
    }
    return 0;
}

/* Compute reads in: the runtime's pool gives its slot a compute-dtype view (bufpool.c, pool_view)
 * that the slot keeps for whatever holds it next; gradients take the slots without one first, so
 * a size read by compute keeps a view per buffer of it held at once that is not a gradient. */
void eng_mark_read(eng *e, int r, const inst *in) {
    rstate *R = &e->r[r];
    for (int i = 0; in && in->bytes && i < R->n_slots; i++)
        if (R->slots[i].bytes == in->bytes && !R->slots[i].viewed) {
            R->slots[i].viewed = true;
            e->run->rank[r].viewed_bytes[R->slots[i].kind] += (size_t)R->slots[i].peak_v * R->slots[i].bytes;
        }
}

inst *eng_create(eng *e, int r, wp_buf b, bool present, int step, int idx) {
    rstate *R = &e->r[r];
    inst *in = calloc(1, sizeof *in);
    if (!in || engine_grow((void **)&R->held, &R->cap_held, R->n_held + 1, sizeof *R->held)) {
        free(in);
        return NULL;
    }
    if (b.kind == WP_BUF_GW && !(in->mbs = calloc((size_t)e->words, sizeof *in->mbs))) {
        free(in);
        return NULL;
    }
    in->b = b;
    in->present = present;
    in->gstep = -1;
    in->born = idx;
    in->born_step = step;
    in->bytes = bytes_of(e, b);
    if (bufmap_put(&R->by_name, b, (intptr_t)in) || count_whole(R, b, 1)) {
        bufmap_del(&R->by_name, b);
        free(in->mbs);
        free(in);
        return NULL;
    }
    if (!holds_sibling(R, b, in)) R->n_kind[b.kind]++; /* counted already, as eng_destroy counts it */
    in->pos = R->n_held;
    R->held[R->n_held++] = in;
    R->bytes += in->bytes;
    if (slot_count(e, r, in, 1)) return NULL; /* it is held: teardown frees it */
    eng_note_peaks(e, r);
    return in;
}

wp_result eng_destroy(eng *e, int r, inst *in, int step, int idx) {
    rstate *R = &e->r[r];
    if (!holds_sibling(R, in->b, in)) R->n_kind[in->b.kind]--;
    bufmap_del(&R->by_name, in->b);
    count_whole(R, in->b, -1); /* a decrement never grows the map: it cannot fail */
    R->held[in->pos] = R->held[--R->n_held];
    R->held[in->pos]->pos = in->pos;
    R->bytes -= in->bytes;
    slot_count(e, r, in, -1);
    /* the last free of a name is the one a use-after-free message names: a map, not a list of
     * every free (fsdp at M = 2048 frees a gathered slice 2M times per rank: a gigabyte) */
    static_assert(sizeof(intptr_t) >= 8, "step and action index packed in one intptr_t");
    if (bufmap_put(&R->freed, in->b, (intptr_t)step << 32 | (intptr_t)idx)) return WP_FAILED;
    free(in->mbs);
    free(in);
    return 0;
}

/* A word at a time: a reduce over M = 2048 micro-batches checks 2048 bits per slice. */
int eng_first_common(const uint64_t *a, const uint64_t *b, int n) {
    for (int w = 0; w < (n + 63) / 64; w++) {
        const uint64_t x = a[w] & b[w];
        if (x) {
            const int i = 64 * w + __builtin_ctzll(x);
            return i < n ? i : -1;
        }
    }
    return -1;
}

/* A buffer an action reads: ERROR if not held, BLOCKED while it arrives (or, for writes, while
 * earlier sends of it are on the wire), else DONE with *out set. */
int eng_need_one(eng *e, int r, int step, int idx, wp_buf b, bool write, inst **out) {
    rstate *R = &e->r[r];
    char nm[48], note[96];
    inst *in = eng_find(R, b);
    if (!in)
        return eng_fail_at(e, r, step, idx, "needs %s, which rank %d does not hold%s", eng_rel_name(b, step, nm, sizeof nm), r,
                       eng_freed_note(e, R, b, step, note, sizeof note));
    if (!in->present) {
        eng_wait_for(R, WHY_ARRIVE, in, b, step);
        return BLOCKED;
    }
    if (write && in->sends > 0) {
        eng_wait_for(R, WHY_SEND, in, b, step);
        return BLOCKED;
    }
    *out = in;
    return DONE;
}

/* Every instance b stands for (all slices of a whole in a sliced schedule): out[0..*n). */
int eng_need_all(eng *e, int r, int step, int idx, wp_buf b, bool write, inst **out, int *n) {
    wp_buf parts[WP_MAX_CHUNKS];
    int k = eng_expand(e, b, parts), rc;
    if (k < 0) return eng_bad_slicing(e, r, step, idx, b);
    for (int i = 0; i < k; i++)
        if ((rc = eng_need_one(e, r, step, idx, parts[i], write, &out[i])) != DONE) return rc;
    if (n) *n = k;
    return DONE;
}

int eng_need(eng *e, int r, int step, int idx, wp_buf b, bool write, inst **out) {
    inst *all[WP_MAX_CHUNKS];
    int rc = eng_need_all(e, r, step, idx, b, write, all, NULL);
    if (rc == DONE) *out = all[0];
    return rc;
}
