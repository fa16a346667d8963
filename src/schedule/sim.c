/* The simulator: costs for the schedule engine, and the step-level results (sim.h). */
#include "sim.h"
#include "seq_split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void costs_from_layout(wp_costs *c, const wp_layout *L, int nranks, const wp_machine *m) {
    memset(c, 0, sizeof *c);
    const wp_model_cfg *cfg = &L->cfg;
    double wsize = (double)wp_dtype_size(precision_weight_dtype(cfg->precision));
    double gsize = (double)wp_dtype_size(precision_grad_dtype(cfg->precision));
    for (int k = 0; k < cfg->n_chunks; k++) {
        wp_flops f = layout_chunk_flops(L, k);
        double b = f.bwd_input + (cfg->recompute ? f.fwd : 0);
        double n = (double)L->chunk_numel[k];
        c->op_s[WP_OP_F][k] = f.fwd / m->flops;
        c->op_s[WP_OP_B][k] = b / m->flops;
        c->op_s[WP_OP_W][k] = f.bwd_weight / m->flops;
        c->op_s[WP_OP_BW][k] = (b + f.bwd_weight) / m->flops;
        if (m->mem_bw > 0) {
            c->op_s[WP_OP_UPDATE][k] = n * WP_UPDATE_BYTES_PER_PARAM / m->mem_bw;
            c->op_s[WP_OP_LOAD][k] = n * (4 + wsize) / m->mem_bw;
            c->op_s[WP_OP_ACC][k] = n * (2 * gsize + 8) / m->mem_bw;
            c->op_s[WP_OP_ZERO][k] = n * gsize / m->mem_bw;
            c->op_s[WP_OP_FOLD][k] = n * 3 * gsize / m->mem_bw; /* read own + partial, write partial */
            c->op_s[WP_OP_DUP][k] = n * 2 * wsize / m->mem_bw;  /* read one lane, write the other */
        }
    }
    if (m->host_optim) {
        /* the ranks of a host share its memory and its link to the devices equally (0: one rank per node) */
        int here = m->ranks_per_node > 0 ? (m->ranks_per_node < nranks ? m->ranks_per_node : nranks) : 1;
        double hm = m->host_mem_bw / here, hl = m->host_link_bw / here;
        c->host = true;
        for (int k = 0; k < cfg->n_chunks; k++) {
            double n = (double)L->chunk_numel[k];
            if (hm > 0) {
                c->host_s[WP_OP_UPDATE][k] = n * WP_UPDATE_BYTES_PER_PARAM / hm;
                c->host_s[WP_OP_LOAD][k] = n * WP_HOST_LOAD_BYTES(wsize) / hm;
                c->host_s[WP_OP_ACC][k] = n * WP_HOST_ACC_BYTES(gsize) / hm;
            }
            if (hl > 0) {
                c->link_s[WP_OP_LOAD][k] = n * wsize / hl;
                c->link_s[WP_OP_ACC][k] = n * gsize / hl;
                c->link_s[WP_OP_W][k] = n * sizeof(float) / hl; /* a to_master window, copied down */
            }
        }
    }
    c->ranks_per_node = m->ranks_per_node;
    c->link_bw = m->link_bw;
    c->link_lat = m->link_lat;
    c->node_bw = m->node_bw;
    c->node_lat = m->node_lat;
    int per = m->ranks_per_node > 0 ? m->ranks_per_node : 1;
    double lat = per >= nranks ? m->node_lat : per == 1 ? m->link_lat : fmax(m->link_lat, m->node_lat);
    c->reduce_s = nranks > 1 ? 2 * ceil(log2(nranks)) * lat : 0;
}

void costs_unit(wp_costs *c, int nchunks, double xfer) {
    memset(c, 0, sizeof *c);
    for (int k = 0; k < nchunks; k++) costs_set_measured(c, k, 1, 1, 1);
    c->link_lat = c->node_lat = xfer;
}

void costs_set_measured(wp_costs *c, int chunk, double f, double b, double w) {
    c->op_s[WP_OP_F][chunk] = f;
    c->op_s[WP_OP_B][chunk] = b;
    c->op_s[WP_OP_W][chunk] = w;
    c->op_s[WP_OP_BW][chunk] = b + w;
}

wp_result simulate(const wp_schedule *s, const wp_layout *L, const wp_costs *c, bool record, wp_sim *out, char *err,
             size_t errlen) {
    return simulate_mem(s, L, c, NULL, record, out, err, errlen);
}

wp_result simulate_mem(const wp_schedule *s, const wp_layout *L, const wp_costs *c, const wp_mem_cfg *mc, bool record, wp_sim *out,
                 char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    wp_mem_cfg gpu = {.compute = L ? precision_act_dtype(L->cfg.precision) : WP_F32, .threads = 1};
    if (!mc) mc = &gpu;
    wp_sizes sz;
    if (L) sizes_from_layout(&sz, L, s->split);
    WP_TRY(engine_run(s, L ? &sz : NULL, c, 2, record, &out->run, err, errlen));
    const int N = s->nranks;
    out->rank_bubble = calloc((size_t)N, sizeof *out->rank_bubble);
    out->rank_peak = calloc((size_t)N, sizeof *out->rank_peak);
    out->rank_sent = calloc((size_t)N, sizeof *out->rank_sent);
    out->rank_host = calloc((size_t)N, sizeof *out->rank_host);
    if (!out->rank_bubble || !out->rank_peak || !out->rank_sent || !out->rank_host) { return wp_fail(WP_FAILED, err, errlen, "schedule: out of memory"); }
    out->step_s = out->run.step_end[1] - out->run.step_end[0];
    double tokens = L ? (double)sched_samples(s) * L->cfg.micro_batch * L->cfg.seq : (double)sched_samples(s);
    out->tokens_per_s = out->step_s > 0 ? tokens / out->step_s : 0;
    double busy = 0;
    for (int r = 0; r < N; r++) {
        const wp_rank_report *rr = &out->run.rank[r];
        size_t sent = 0, recv = 0;
        for (int k = 0; k < WP_BUF_KINDS; k++) sent += rr->sent[k], recv += rr->recv[k];
        out->rank_sent[r] = sent;
        double terms[WP_MEM_TERMS];
        wp_mem_host h = {0};
        if (L) mem_predict(s, L, rr, r, mc, terms), mem_predict_host(s, L, rr, r, mc, &h);
        out->rank_peak[r] = L ? (size_t)mem_total(terms) : rr->peak_bytes + rr->owner_bytes;
        out->rank_host[r] = (size_t)mem_host_total(&h);
        if (out->rank_host[r] > out->max_host) out->max_host = out->rank_host[r];
        out->rank_bubble[r] = out->step_s > 0 ? 1 - rr->busy / out->step_s : 0;
        busy += rr->busy;
        if (sent > out->max_sent) out->max_sent = sent;
        if (recv > out->max_recv) out->max_recv = recv;
        if (out->rank_peak[r] > out->max_peak) out->max_peak = out->rank_peak[r];
    }
    out->bubble = out->step_s > 0 ? 1 - busy / (N * out->step_s) : 0;
    return 0;
}

void sim_free(wp_sim *out) {
    free(out->rank_bubble);
    free(out->rank_peak);
    free(out->rank_sent);
    free(out->rank_host);
    run_free(&out->run);
    memset(out, 0, sizeof *out);
}

size_t sim_device_need(const wp_sim *sim, int nranks, bool cpu) {
    size_t need = 0;
    for (int r = 0; r < nranks; r++) {
        size_t here = sim->rank_peak[r] + (cpu ? sim->rank_host[r] : 0);
        if (here > need) need = here;
    }
    return need;
}

size_t sim_host_need(const wp_sim *sim, int nranks, int ranks_per_node, bool cpu) {
    const int per = ranks_per_node > 0 ? (ranks_per_node < nranks ? ranks_per_node : nranks) : 1;
    size_t need = 0;
    for (int first = 0; first < nranks; first += per) {
        size_t host = 0;
        for (int r = first; r < first + per && r < nranks; r++) host += sim->rank_host[r] + (cpu ? sim->rank_peak[r] : 0);
        if (host > need) need = host;
    }
    return need;
}

unsigned sim_over(const wp_sim *sim, int nranks, int ranks_per_node, bool cpu, double device_memory, double host_memory) {
    unsigned over = 0;
    if (device_memory > 0 && (double)sim_device_need(sim, nranks, cpu) > device_memory) over |= WP_OVER_DEVICE;
    if (host_memory > 0 && (double)sim_host_need(sim, nranks, ranks_per_node, cpu) > host_memory) over |= WP_OVER_HOST;
    return over;
}

const char *sim_over_name(unsigned over) {
    switch (over) {
    case 0: return "";
    case WP_OVER_DEVICE: return "device";
    case WP_OVER_HOST: return "host";
    default: return "device and host";
    }
}
