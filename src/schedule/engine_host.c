/* The schedule engine's host side (engine.h, costs.host): with --optimizer-memory host an owner's
 * fp32 master, AdamW moments and accumulator live in host memory, so its LOAD, ACC and UPDATE
 * leave the device stream. Each rank has its share of its host's CPU (memory bandwidth) and of
 * the host link in each direction, used in list order (a FIFO per resource, like a CUDA stream
 * and a copy engine per direction): the device computes on while they work, and waits only
 * where the lists need their result (a compute or SEND of a LOADed buffer, a write to a GW
 * still going down, REDUCE for the accumulator, a LOAD for its master's UPDATE). */
#include <math.h>
#include <stdlib.h>

#include "engine_impl.h"

wp_result ehost_setup(eng *e) {
    e->hr = calloc((size_t)e->N, sizeof *e->hr);
    e->master_at = calloc((size_t)e->C * e->SL, sizeof *e->master_at);
    return e->hr && e->master_at ? 0 : WP_FAILED;
}

void ehost_teardown(eng *e) {
    free(e->hr);
    free(e->master_at);
    free(e->hev);
}

static wp_result push(eng *e, double t, inst *in, bool arrive) {
    if (engine_grow((void **)&e->hev, &e->cap_hev, e->n_hev + 1, sizeof *e->hev)) return WP_FAILED;
    e->hev[e->n_hev++] = (struct ehost_ev){t, in, arrive};
    return 0;
}

static void account(eng *e, int r, int step, double cpu, double up, double down) {
    if (step != e->steps - 1) return;
    e->run->rank[r].host += cpu;
    e->run->rank[r].up += up;
    e->run->rank[r].down += down;
}

wp_result ehost_load(eng *e, int r, int step, const wp_action *a, inst **in, int n, double scale) {
    struct ehost_rank *h = &e->hr[r];
    int c = a->buf.chunk;
    double ready = e->now;
    for (int k = 0; k < e->SL; k++)
        if (!a->buf.nslices || k == a->buf.slice) ready = fmax(ready, e->master_at[c * e->SL + k]);
    double cpu = e->costs.host_s[WP_OP_LOAD][c] * scale, link = e->costs.link_s[WP_OP_LOAD][c] * scale;
    h->cpu = fmax(ready, h->cpu) + cpu;  /* the wire copy written from the master into staging */
    h->up = fmax(h->cpu, h->up) + link;  /* and copied up */
    account(e, r, step, cpu, link, 0);
    for (int i = 0; i < n; i++) {
        in[i]->present = false;
        if (push(e, h->up, in[i], true)) return WP_FAILED;
    }
    return 0;
}

wp_result ehost_acc(eng *e, int r, int step, const wp_action *a, inst **in, int n, double scale) {
    struct ehost_rank *h = &e->hr[r];
    int c = a->chunk;
    double cpu = e->costs.host_s[WP_OP_ACC][c] * scale, link = e->costs.link_s[WP_OP_ACC][c] * scale;
    h->down = fmax(e->now, h->down) + link; /* the gradient copied down into staging */
    h->cpu = fmax(h->down, h->cpu) + cpu;   /* and added into the accumulator */
    h->acc = h->cpu;
    account(e, r, step, cpu, 0, link);
    for (int i = 0; i < n; i++) {
        in[i]->sends++; /* as a SEND: written or freed only once it has left */
        if (push(e, h->down, in[i], false)) return WP_FAILED;
    }
    return 0;
}

void ehost_update(eng *e, int r, int step, int c, int k, double scale) {
    struct ehost_rank *h = &e->hr[r];
    double cpu = e->costs.host_s[WP_OP_UPDATE][c] * scale;
    h->cpu = fmax(e->now, h->cpu) + cpu;
    e->master_at[c * e->SL + k] = h->cpu;
    account(e, r, step, cpu, 0, 0);
}

int ehost_wait(eng *e, int r, double t) {
    if (t <= e->now) return DONE;
    e->r[r].busy_until = t; /* idle, not busy: nothing is added to the rank's compute time */
    return BLOCKED;
}

int ehost_reduce(eng *e, int r, int step) {
    struct ehost_rank *h = &e->hr[r];
    if (!h->window[step]) {
        /* a chunk's window is on the device once a W-pass of this rank adds into its owner's
         * accumulator (to_master); it is copied, not added, back into the host accumulator */
        bool seen[WP_MAX_CHUNKS] = {0};
        const wp_rank_prog *p = &e->s->rank[r];
        double link = 0;
        for (int i = 0; i < p->n; i++) {
            const wp_action *a = &p->a[i];
            if ((a->op != WP_OP_W && a->op != WP_OP_BW) || !a->to_master || a->chunk < 0 || a->chunk >= e->C ||
                seen[a->chunk])
                continue;
            seen[a->chunk] = true;
            link += e->costs.link_s[WP_OP_W][a->chunk];
        }
        h->window[step] = true;
        if (link > 0) {
            h->down = fmax(e->now, h->down) + link;
            h->acc = fmax(h->acc, h->down);
            account(e, r, step, 0, 0, link);
        }
    }
    return ehost_wait(e, r, h->acc);
}

double ehost_next_time(const eng *e) {
    double t = INFINITY;
    for (int i = 0; i < e->n_hev; i++)
        if (e->hev[i].t < t) t = e->hev[i].t;
    return t;
}

void ehost_advance_time(eng *e, double t, double tol) {
    for (int i = 0; i < e->n_hev;) {
        struct ehost_ev *v = &e->hev[i];
        if (v->t > t + tol) {
            i++;
            continue;
        }
        if (v->arrive) v->in->present = true;
        else v->in->sends--;
        e->progress = true;
        *v = e->hev[--e->n_hev];
    }
}
