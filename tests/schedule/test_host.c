/* --optimizer-memory host in the memory model and the simulator (memory.h mem_predict_host,
 * engine_host.c), against closed forms:
 *   - one rank owning one chunk (1f1b, M = 1): the rank's CPU time in a step is exactly the
 *     AdamW update's 32 bytes/param plus LOAD's 4 + w at the host memory bandwidth, the link's
 *     copy up w bytes/param and down the 4-byte window, and the step is the device-resident
 *     step plus all four (the next step's first forward needs the new weights: nothing of them
 *     overlaps); a second rank on the host (ranks per node 2) halves each rank's share.
 *   - every strategy at N = 4: the terms that leave the device (owner state, 16 bytes/param)
 *     arrive in the host column unchanged, the device keeps only the fp32 windows of its
 *     to_master W-passes, every other term is the same, and the host column adds exactly the
 *     staging: 2 fp32 buffers of the largest owned piece, shared by both directions (optim/placement.c).
 *   - the device-resident simulation is untouched by host bandwidths (costs.host off).
 *   - the host's memory (sim.h: sim_host_need, sim_over; --host-memory): 1f1b on 4 ranks, each
 *     owning its chunk of n_r parameters, holds 16 n_r (master, m, v, accumulator) + 2 x 4 n_r
 *     (staging) = 24 n_r per rank on the host; a host of 2 ranks (ranks per node 2) holds the
 *     larger of 24 (n_0 + n_1) and 24 (n_2 + n_3), one rank per host the largest 24 n_r; the CPU
 *     backend adds each rank's device peak. A limit of exactly that fits, one byte less is
 *     "over host" and only host; the device-resident run holds nothing there. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "schedule.h"
#include "sim.h"

static wp_layout llama(int layers, int chunks, int h, int seq, int vocab) {
    wp_model_cfg c = {.n_layers = layers, .h = h, .ffn = 8 * h / 3, .n_heads = 4, .n_kv_heads = 4, .head_dim = h / 4,
                      .seq = seq, .micro_batch = 1, .vocab = vocab, .rope_theta = 1e4, .norm_eps = 1e-5, .init_std = 0.02,
                      .precision = WP_PREC_MIXED};
    model_cfg_even_chunks(&c, chunks);
    wp_layout L;
    char err[256];
    if (layout_build(&c, &L, err, sizeof err)) EXPECT(0, "layout: %s", err);
    return L;
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

static void one_owner(int per) {
    wp_layout L = llama(2, 1, 256, 64, 1000);
    wp_schedule s;
    char err[512];
    if (schedule_generate(WP_STRAT_1F1B, 1, 1, 1, NULL, &s, err, sizeof err)) {
        EXPECT(0, "1f1b N=1: %s", err);
        return;
    }
    const double n = (double)L.chunk_numel[0], w = 2, hm = 50e9, hl = 20e9; /* mixed: bf16 wire */
    wp_machine dev = {.flops = 1e12, .ranks_per_node = per}, host = dev;
    host.host_optim = true, host.host_mem_bw = hm, host.host_link_bw = hl;
    wp_costs cd, ch;
    costs_from_layout(&cd, &L, 1, &dev);
    costs_from_layout(&ch, &L, 1, &host);
    wp_mem_cfg md = {.compute = WP_BF16, .threads = 1}, mh = md;
    mh.host_optim = true;
    wp_sim a, b;
    a.step_s = b.step_s = -1; /* poisoned: simulate must write them */
    if (simulate_mem(&s, &L, &cd, &md, false, &a, err, sizeof err) || simulate_mem(&s, &L, &ch, &mh, false, &b, err, sizeof err)) {
        EXPECT(0, "simulate: %s", err);
        sched_free(&s);
        layout_free(&L);
        return;
    }
    /* one rank: its host is shared by nobody whatever ranks_per_node says (min(per, N)) */
    const double cpu = n * 32 / hm + n * (4 + w) / hm, up = n * w / hl, down = n * 4 / hl;
    const wp_rank_report *rr = &b.run.rank[0];
    EXPECT(close_to(rr->host, cpu), "host CPU %.9g s, want (32 + 4 + w) n / bw = %.9g", rr->host, cpu);
    EXPECT(close_to(rr->up, up), "copy up %.9g s, want w n / link = %.9g", rr->up, up);
    EXPECT(close_to(rr->down, down), "copy down %.9g s, want 4 n / link = %.9g (the fp32 window)", rr->down, down);
    EXPECT(close_to(b.step_s, a.step_s + cpu + up + down), "host step %.9g s, want device %.9g + %.9g", b.step_s, a.step_s,
           cpu + up + down);
    EXPECT(a.run.rank[0].host == 0 && a.max_host == 0, "device-resident run used the host: %g s, %zu bytes", a.run.rank[0].host,
           a.max_host);
    sim_free(&a);
    sim_free(&b);
    sched_free(&s);
    layout_free(&L);
}

/* Two ranks on one host (ranks_per_node 2): each rank's share is half, so each rank's CPU and
 * link time doubles against one rank per host. */
static void shared_host(void) {
    wp_layout L = llama(4, 2, 256, 64, 1000);
    wp_schedule s;
    char err[512];
    if (schedule_generate(WP_STRAT_1F1B, 2, 4, 2, NULL, &s, err, sizeof err)) {
        EXPECT(0, "1f1b N=2: %s", err);
        return;
    }
    double got[2][2];
    for (int per = 1; per <= 2; per++) {
        wp_machine m = {.flops = 1e12, .ranks_per_node = per, .host_optim = true, .host_mem_bw = 40e9, .host_link_bw = 16e9};
        wp_costs c;
        costs_from_layout(&c, &L, 2, &m);
        wp_mem_cfg mc = {.compute = WP_BF16, .threads = 1, .host_optim = true};
        wp_sim r;
        if (simulate_mem(&s, &L, &c, &mc, false, &r, err, sizeof err)) {
            EXPECT(0, "simulate: %s", err);
            continue;
        }
        got[per - 1][0] = r.run.rank[1].host;
        got[per - 1][1] = r.run.rank[1].up + r.run.rank[1].down;
        sim_free(&r);
    }
    EXPECT(close_to(got[1][0], 2 * got[0][0]) && got[0][0] > 0, "CPU time with 2 ranks per host %.9g, want 2 x %.9g",
           got[1][0], got[0][0]);
    EXPECT(close_to(got[1][1], 2 * got[0][1]) && got[0][1] > 0, "link time with 2 ranks per host %.9g, want 2 x %.9g",
           got[1][1], got[0][1]);
    sched_free(&s);
    layout_free(&L);
}

/* Unit costs for s, and the memory settings of a bf16 run with device- and host-resident state. */
static void unit_cfgs(const wp_schedule *s, wp_costs *c, wp_mem_cfg *dev, wp_mem_cfg *host) {
    costs_unit(c, s->nchunks, 1);
    *dev = (wp_mem_cfg){.compute = WP_BF16, .threads = 1};
    *host = *dev;
    host->host_optim = true;
}

static void moved_terms(wp_strategy st) {
    const int N = 4;
    wp_layout L = llama(8, strategy_default_chunks(st, N, 2), 128, 32, 500);
    wp_gen_opts g = {.ranks_per_node = 2, .warmup_auto = true};
    wp_schedule s;
    char err[512];
    int rc = schedule_generate(st, N, 8, L.cfg.n_chunks, &g, &s, err, sizeof err);
    if (!rc) rc = schedule_tie(&s, &L, err, sizeof err);
    if (rc) {
        EXPECT(0, "%s: %s", strategy_name(st), err);
        layout_free(&L);
        return;
    }
    wp_costs c;
    wp_mem_cfg dev, host;
    unit_cfgs(&s, &c, &dev, &host);
    wp_sim sim;
    if (simulate_mem(&s, &L, &c, &dev, false, &sim, err, sizeof err)) {
        EXPECT(0, "%s: %s", strategy_name(st), err);
    } else {
        for (int r = 0; r < N; r++) {
            double td[WP_MEM_TERMS], th[WP_MEM_TERMS];
            wp_mem_host hd, hh;
            memset(&hh, 0xff, sizeof hh); /* poisoned */
            mem_predict(&s, &L, &sim.run.rank[r], r, &dev, td);
            mem_predict(&s, &L, &sim.run.rank[r], r, &host, th);
            mem_predict_host(&s, &L, &sim.run.rank[r], r, &dev, &hd);
            mem_predict_host(&s, &L, &sim.run.rank[r], r, &host, &hh);
            EXPECT(mem_host_total(&hd) == 0, "%s rank %d: device-resident host column %g", strategy_name(st), r, mem_host_total(&hd));
            for (int t = 0; t < WP_MEM_TERMS; t++)
                if (t != WP_MEM_OPTIM)
                    EXPECT(td[t] == th[t], "%s rank %d: term %s moved with the optimizer (%g vs %g)", strategy_name(st), r,
                           wp_mem_term_name[t], td[t], th[t]);
            /* what left the device is in the host column; the device keeps the windows */
            double owned = 0, most = 0, window = 0;
            bool seen[WP_MAX_CHUNKS] = {0};
            for (int k = 0; k < s.nchunks; k++) {
                size_t off, len = 0;
                if (s.nslices) slice_range(L.chunk_numel[k], r, s.nslices, &off, &len);
                else if (s.owner[k] == r) len = L.chunk_numel[k];
                owned += (double)len;
                if ((double)len > most) most = (double)len;
            }
            for (int i = 0; i < s.rank[r].n; i++) {
                const wp_action *a = &s.rank[r].a[i];
                if ((a->op == WP_OP_W || a->op == WP_OP_BW) && a->to_master && !seen[a->chunk])
                    seen[a->chunk] = true, window += 4.0 * (double)L.chunk_numel[a->chunk];
            }
            EXPECT(td[WP_MEM_OPTIM] == 16 * owned, "%s rank %d: device optimizer term %g, want 16 x %g owned", strategy_name(st),
                   r, td[WP_MEM_OPTIM], owned);
            EXPECT(hh.optim == td[WP_MEM_OPTIM], "%s rank %d: host holds %g of the %g that left the device", strategy_name(st), r,
                   hh.optim, td[WP_MEM_OPTIM]);
            EXPECT(th[WP_MEM_OPTIM] == window, "%s rank %d: device keeps %g, want the windows' %g", strategy_name(st), r,
                   th[WP_MEM_OPTIM], window);
            double staging = owned > 0 ? 2 * most * 4 : 0;
            EXPECT(hh.staging_up + hh.staging_down == staging, "%s rank %d: staging %g, want %g", strategy_name(st), r,
                   hh.staging_up + hh.staging_down, staging);
            EXPECT(close_to(mem_total(th) + mem_host_total(&hh), mem_total(td) + window + staging),
                   "%s rank %d: device + host %g, want the device-resident total + windows + staging %g", strategy_name(st), r,
                   mem_total(th) + mem_host_total(&hh), mem_total(td) + window + staging);
        }
        sim_free(&sim);
    }
    sched_free(&s);
    layout_free(&L);
}

static void host_limit(void) {
    const int N = 4;
    wp_layout L = llama(8, N, 128, 32, 500); /* the embedding and the head make chunks 0 and 3 larger */
    wp_schedule s;
    char err[512];
    if (schedule_generate(WP_STRAT_1F1B, N, 8, N, NULL, &s, err, sizeof err)) {
        EXPECT(0, "1f1b N=4: %s", err);
        layout_free(&L);
        return;
    }
    wp_costs c;
    wp_mem_cfg dev, host;
    unit_cfgs(&s, &c, &dev, &host);
    wp_sim d, h;
    if (simulate_mem(&s, &L, &c, &dev, false, &d, err, sizeof err) || simulate_mem(&s, &L, &c, &host, false, &h, err, sizeof err)) {
        EXPECT(0, "simulate: %s", err);
        sched_free(&s);
        layout_free(&L);
        return;
    }
    double per_rank[4], pair = 0, one = 0, cpu_pair = 0;
    for (int r = 0; r < N; r++) {
        EXPECT(s.owner[r] == r, "1f1b: chunk %d owned by rank %d", r, s.owner[r]);
        per_rank[r] = 24.0 * (double)L.chunk_numel[r];
        one = fmax(one, per_rank[r]);
    }
    for (int first = 0; first < N; first += 2) {
        pair = fmax(pair, per_rank[first] + per_rank[first + 1]);
        cpu_pair = fmax(cpu_pair, per_rank[first] + per_rank[first + 1] + (double)h.rank_peak[first] + (double)h.rank_peak[first + 1]);
    }
    EXPECT(per_rank[0] != per_rank[1] && pair != 2 * one, "the layout is even: the sums test nothing (%g %g)", per_rank[0],
           per_rank[1]);
    EXPECT((double)sim_host_need(&h, N, 2, false) == pair, "2 ranks per host: %zu, want 24 x the larger pair's parameters %g",
           sim_host_need(&h, N, 2, false), pair);
    EXPECT((double)sim_host_need(&h, N, 0, false) == one, "one rank per host: %zu, want 24 x the largest chunk %g",
           sim_host_need(&h, N, 0, false), one);
    EXPECT((double)sim_host_need(&h, N, 8, false) == per_rank[0] + per_rank[1] + per_rank[2] + per_rank[3],
           "8 ranks per host, 4 ranks: %zu, want all four", sim_host_need(&h, N, 8, false));
    EXPECT((double)sim_host_need(&h, N, 2, true) == cpu_pair, "CPU backend: %zu, want the pair's host and device %g",
           sim_host_need(&h, N, 2, true), cpu_pair);
    EXPECT(sim_host_need(&d, N, 2, false) == 0, "device-resident: %zu bytes on the host", sim_host_need(&d, N, 2, false));
    EXPECT(sim_over(&h, N, 2, false, 0, pair) == 0, "a host limit of exactly the need does not fit");
    EXPECT(sim_over(&h, N, 2, false, 0, pair - 1) == WP_OVER_HOST, "a host limit 1 byte under the need: over %u, want host",
           sim_over(&h, N, 2, false, 0, pair - 1));
    EXPECT(sim_over(&h, N, 2, false, 0, 0) == 0, "--host-memory 0 is a limit");
    EXPECT(sim_over(&d, N, 2, false, 0, 1) == 0, "device-resident state over a 1-byte host limit");
    double dev_need = (double)sim_device_need(&h, N, false);
    EXPECT(sim_over(&h, N, 2, false, dev_need - 1, pair - 1) == (WP_OVER_DEVICE | WP_OVER_HOST) &&
               strcmp(sim_over_name(WP_OVER_DEVICE | WP_OVER_HOST), "device and host") == 0 &&
               strcmp(sim_over_name(WP_OVER_HOST), "host") == 0,
           "both limits: over %u '%s'", sim_over(&h, N, 2, false, dev_need - 1, pair - 1),
           sim_over_name(sim_over(&h, N, 2, false, dev_need - 1, pair - 1)));
    EXPECT(sim_over(&h, N, 2, false, dev_need - 1, pair) == WP_OVER_DEVICE, "the device limit alone: over %u",
           sim_over(&h, N, 2, false, dev_need - 1, pair));
    sim_free(&d);
    sim_free(&h);
    sched_free(&s);
    layout_free(&L);
}

int main(void) {
    one_owner(0);
    one_owner(2);
    shared_host();
    for (int st = 0; st < WP_STRAT_COUNT; st++) moved_terms((wp_strategy)st);
    host_limit();
    return check_result("schedule/host");
}
