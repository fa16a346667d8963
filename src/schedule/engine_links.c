/* The schedule engine's link and time model (engine_impl.h): a transfer occupies its channel
 * from the moment its buffer is there; the transfers on one link (an ordered pair of ranks)
 * share its bandwidth equally, and each arrives latency after its last byte left. With
 * --ranks-per-node G and more than G ranks, the link between nodes is instead one NIC per
 * direction per node: every flow that leaves a node shares its egress NIC, every flow that
 * enters one its ingress NIC, max-min fair (elink_share), recomputed at every event. Time moves
 * from event to event: the next compute end, arrival, last byte, or step decision. The IR's
 * semantics (what may be posted, matched, created or freed, and the checks) are engine_actions.c's and engine.c's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"

void elink_params(const eng *e, int src, int dst, double *bw, double *lat) {
    int per = e->costs.ranks_per_node > 0 ? e->costs.ranks_per_node : 1; /* 0: one rank per node, as ring/transport.c */
    bool same = src / per == dst / per;
    *bw = same ? e->costs.node_bw : e->costs.link_bw;
    *lat = same ? e->costs.node_lat : e->costs.link_lat;
}

bool elink_nic(const eng *e, int src, int dst) {
    int per = e->costs.ranks_per_node;
    return per > 0 && e->N > per && src / per != dst / per;
}

/* Max-min fair rates (progressive filling) for the flows on NIC links: each node's egress and
 * ingress NIC carries at most costs.link_bw; the NIC with the smallest fair share among its
 * still-unfixed flows fixes them at that share, which is taken off their other NIC; repeat. */
static void elink_share(eng *e) {
    const int per = e->costs.ranks_per_node, nodes = per > 0 ? (e->N + per - 1) / per : 0;
    bool any = false;
    for (int i = 0; i < e->n_busy_links; i++) any = any || e->ln[e->busy_links[i]].nic;
    if (!any) return;
    for (int n = 0; n < 2 * nodes; n++) e->nic_cap[n] = e->costs.link_bw, e->nic_cnt[n] = 0;
    int left = 0;
    for (int i = 0; i < e->n_busy_links; i++) {
        const link *l = &e->ln[e->busy_links[i]];
        if (!l->nic) continue;
        for (int j = 0; j < l->n; j++) {
            l->x[j]->rate = -1; /* not fixed yet */
            e->nic_cnt[l->x[j]->src / per]++;
            e->nic_cnt[nodes + l->x[j]->dst / per]++;
            left++;
        }
    }
    while (left > 0) {
        int b = -1;
        for (int n = 0; n < 2 * nodes; n++)
            if (e->nic_cnt[n] > 0 && (b < 0 || e->nic_cap[n] / e->nic_cnt[n] < e->nic_cap[b] / e->nic_cnt[b])) b = n;
        double share = fmax(0.0, e->nic_cap[b] / e->nic_cnt[b]);
        for (int i = 0; i < e->n_busy_links; i++) {
            const link *l = &e->ln[e->busy_links[i]];
            if (!l->nic) continue;
            for (int j = 0; j < l->n; j++) {
                xfer *x = l->x[j];
                int out = x->src / per, in = nodes + x->dst / per;
                if (x->rate >= 0 || (out != b && in != b)) continue;
                x->rate = share;
                e->nic_cap[out] -= share, e->nic_cap[in] -= share;
                e->nic_cnt[out]--, e->nic_cnt[in]--;
                left--;
            }
        }
    }
}

wp_result elink_start(eng *e, chan *c) {
    if (c->busy || c->q_n == 0) return 0;
    xfer *x = c->q[c->q_head];
    if (!x->from->present) return 0;
    c->q_head++;
    c->q_n--;
    c->busy = x;
    x->state = X_SERIAL;
    x->t0 = e->now;
    x->remaining = (double)x->bytes;
    x->rate = 0;
    x->gstep = x->from->gstep;
    if (x->from->mbs) {
        if (!(x->mbs = malloc((size_t)e->words * sizeof *x->mbs))) return WP_FAILED;
        memcpy(x->mbs, x->from->mbs, (size_t)e->words * sizeof *x->mbs);
    }
    link *l = &e->ln[x->src * e->N + x->dst];
    if (engine_grow((void **)&l->x, &l->cap, l->n + 1, sizeof *l->x)) return WP_FAILED;
    if (!l->listed) {
        e->busy_links[e->n_busy_links++] = x->src * e->N + x->dst;
        l->listed = true;
    }
    l->x[l->n++] = x;
    e->progress = true;
    return 0;
}

wp_result elink_start_all(eng *e) {
    for (int i = 0; i < e->n_chans; i++)
        if (elink_start(e, e->chans[i])) return WP_FAILED;
    return 0;
}

static wp_result elink_record(eng *e, const xfer *x) {
    wp_run *run = e->run;
    if (x->step == e->steps - 1) {
        run->rank[x->src].sent[x->b.kind] += x->bytes;
        run->rank[x->src].n_sent++;
        run->rank[x->dst].recv[x->b.kind] += x->bytes;
        run->rank[x->dst].n_recv++;
    }
    if (!run->record) return 0;
    if (engine_grow((void **)&run->xfer, &run->cap_xfer, run->n_xfer + 1, sizeof *run->xfer)) return WP_FAILED;
    wp_buf b = x->b;
    if (b.kind == WP_BUF_W) b.idx -= x->step;
    run->xfer[run->n_xfer++] = (wp_xfer_event){x->src, x->dst, x->ch, x->step, b, x->bytes, x->t0, x->t_arrive};
    return 0;
}

/* The last byte left: the sender may free or write its buffer; the next one on the channel may go. */
static wp_result elink_left(eng *e, xfer *x, chan *c) {
    link *l = &e->ln[x->src * e->N + x->dst];
    for (int i = 0; i < l->n; i++)
        if (l->x[i] == x) {
            l->x[i] = l->x[--l->n];
            break;
        }
    x->from->sends--;
    c->busy = NULL;
    x->state = X_FLIGHT;
    x->t_arrive = e->now + l->lat;
    if (engine_grow((void **)&e->flight, &e->cap_flight, e->n_flight + 1, sizeof *e->flight)) return WP_FAILED;
    e->flight[e->n_flight++] = x;
    e->progress = true;
    return elink_start(e, c);
}

static wp_result elink_arrive(eng *e, xfer *x) {
    x->to->present = true;
    if (x->to->mbs && x->mbs) memcpy(x->to->mbs, x->mbs, (size_t)e->words * sizeof *x->mbs);
    x->to->gstep = x->gstep;
    e->progress = true;
    wp_result rc = elink_record(e, x);
    free(x->mbs);
    free(x);
    return rc;
}

double elink_next_time(eng *e) {
    elink_share(e);
    double t = INFINITY;
    for (int r = 0; r < e->N; r++)
        if (e->r[r].busy_until > e->now && e->r[r].busy_until < t) t = e->r[r].busy_until;
    for (int i = 0; i < e->n_flight; i++)
        if (e->flight[i]->t_arrive < t) t = e->flight[i]->t_arrive;
    for (int i = 0; i < e->n_busy_links; i++) {
        const link *l = &e->ln[e->busy_links[i]];
        for (int j = 0; j < l->n; j++) {
            double d = l->nic ? (l->bw > 0 ? l->x[j]->remaining / l->x[j]->rate : 0)
                              : l->bw > 0 ? l->x[j]->remaining * l->n / l->bw : 0;
            if (e->now + d < t) t = e->now + d;
        }
    }
    for (int s = 0; s < e->steps; s++)
        if (e->st[s].scheduled && !e->st[s].done && e->st[s].done_at < t) t = e->st[s].done_at;
    double h = ehost_next_time(e);
    return h < t ? h : t;
}

wp_result elink_advance_time(eng *e, double t) {
    double dt = t - e->now, tol = 1e-12 * fmax(1.0, fabs(t));
    e->now = t;
    /* only the links busy during the interval just ended: a transfer starting now has used nothing */
    const int busy = e->n_busy_links;
    for (int i = 0; i < busy; i++) {
        link *l = &e->ln[e->busy_links[i]];
        /* the rate of the interval just ended; a transfer is through when less than tol is left */
        double rate = l->bw / l->n;
        int n = l->n;
        xfer *through[WP_SCH_COUNT];
        int k = 0;
        for (int j = 0; j < n; j++) {
            xfer *x = l->x[j];
            if (l->nic) rate = x->rate; /* its fair share of the two NICs (elink_share) */
            if (l->bw > 0) x->remaining -= dt * rate;
            if (l->bw <= 0 || x->remaining <= rate * tol) through[k++] = x;
        }
        for (int j = 0; j < k; j++)
            if (elink_left(e, through[j], engine_get_chan(e, through[j]->src, through[j]->dst, through[j]->ch))) return WP_FAILED;
    }
    int kept = 0;
    for (int i = 0; i < e->n_busy_links; i++) {
        link *l = &e->ln[e->busy_links[i]];
        if (l->n > 0) e->busy_links[kept++] = e->busy_links[i];
        else l->listed = false;
    }
    e->n_busy_links = kept;
    for (int i = 0; i < e->n_flight;) {
        xfer *x = e->flight[i];
        if (x->t_arrive > t + tol) {
            i++;
            continue;
        }
        e->flight[i] = e->flight[--e->n_flight];
        if (elink_arrive(e, x)) return WP_FAILED;
    }
    for (int s = 0; s < e->steps; s++) {
        stepst *st = &e->st[s];
        if (st->scheduled && !st->done && st->done_at <= t + tol) {
            st->done = true;
            e->run->reduce_at[s] = st->done_at;
            e->progress = true;
        }
    }
    for (int r = 0; r < e->N; r++)
        if (fabs(e->r[r].busy_until - t) <= tol) e->r[r].busy_until = t;
    ehost_advance_time(e, t, tol);
    return elink_start_all(e);
}
