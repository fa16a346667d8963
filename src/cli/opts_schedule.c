/* Flags of the schedule layer: pipeline shape, layout, machine (adapters.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "seq_split.h"

wp_result pipe_shape_from_opts(const wp_opts *o, wp_pipe_shape *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    if (o->nranks < 1 || o->nranks > WP_MAX_CHUNKS)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--nranks: %lld is not between 1 and %d", (long long)o->nranks, WP_MAX_CHUNKS);
    int64_t m = o->num_microbatches ? o->num_microbatches : o->nranks;
    if (m < 1 || m > 65536)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--num-microbatches: %lld is not between 1 and 65536 (0 means one per rank)",
                   (long long)o->num_microbatches);
    p->nranks = (int)o->nranks;
    p->nmb = (int)m;
    return gen_opts_from_opts(o, o->strategy, &p->gen, err, errlen);
}

wp_result gen_opts_from_opts(const wp_opts *o, wp_strategy st, wp_gen_opts *g, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    if (o->seq_segments < 1 || o->seq_segments > WP_MAX_SEGMENTS)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--seq-segments: %lld is not between 1 and %d", (long long)o->seq_segments,
                   WP_MAX_SEGMENTS);
    const bool segments = st == (wp_strategy)WP_STRAT_ALL || (st < WP_STRAT_COUNT && strategy_has(st, WP_TRAIT_SEGMENTS));
    if (segments && o->seq_segments > o->seq_length)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--seq-segments: %lld segments need at least as many tokens per sequence (--seq-length "
                   "%lld)", (long long)o->seq_segments, (long long)o->seq_length);
    g->wzb2_owner_last = o->wzb2_owner == WP_WZB2_LAST;
    g->i1f1b_breadth_first = o->i1f1b_order == WP_I1F1B_BREADTH_FIRST;
    g->seq_segments = (int)o->seq_segments;
    g->ranks_per_node = o->ranks_per_node > 0 && o->ranks_per_node <= WP_MAX_CHUNKS ? (int)o->ranks_per_node : 0;
    return warmup_extra_from_opts(o, &g->warmup_extra, &g->warmup_auto, err, errlen);
}

/* auto: one extra forward when a hop between nodes is slower than a hop inside one (more
 * bandwidth-time per byte, or more latency); that is the hop whose round trip 1F1B would
 * otherwise wait for once per micro-batch (issue 18). simulate --strategy auto tries others. */
wp_result warmup_extra_from_opts(const wp_opts *o, int *extra, bool *is_auto, char *err, size_t errlen) {
    if (is_auto) *is_auto = strcmp(o->warmup_extra, "auto") == 0;
    if (strcmp(o->warmup_extra, "auto") == 0) {
        bool nodes = o->ranks_per_node > 0 && o->ranks_per_node < o->nranks;
        bool slower_bw = o->link_bandwidth > 0 && (o->node_link_bandwidth <= 0 || o->node_link_bandwidth > o->link_bandwidth);
        *extra = nodes && (slower_bw || o->link_latency > o->node_link_latency) ? 1 : 0;
        return 0;
    }
    char *end;
    long v = strtol(o->warmup_extra, &end, 10);
    if (end == o->warmup_extra || *end || v < 0 || v > 65536)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--warmup-extra: '%s' is not auto or a count of forwards from 0 to 65536", o->warmup_extra);
    *extra = (int)v;
    return 0;
}

wp_result layout_from_opts(const wp_opts *o, int nranks, int default_chunks, wp_layout *L, bool *raised, char *err,
                     size_t errlen) {
    return layout_split_from_opts(o, nranks, default_chunks, WP_SPLIT_FLAGS, L, raised, err, errlen);
}

wp_result layout_split_from_opts(const wp_opts *o, int nranks, int default_chunks, wp_chunk_split split, wp_layout *L,
                           bool *raised, char *err, size_t errlen) {
    wp_model_cfg cfg;
    *raised = false;
    wp_opts *copy = malloc(sizeof *copy);
    if (!copy) return wp_fail(WP_FAILED, err, errlen, "out of memory");
    *copy = *o;
    const bool listed = split == WP_SPLIT_FLAGS && chunk_layers_listed(o);
    if (!o->num_chunks && !listed) copy->num_chunks = default_chunks;
    wp_result rc = model_cfg_split_from_opts(copy, nranks, split, &cfg, err, errlen);
    int64_t chunks = copy->num_chunks;
    bool model_default = !o->set[FLAG_num_layers] && !listed;
    if (rc == WP_BAD_INPUT && model_default && chunks > o->num_layers && chunks <= WP_MAX_CHUNKS) {
        copy->num_layers = chunks;
        rc = model_cfg_split_from_opts(copy, nranks, split, &cfg, err, errlen);
        *raised = rc == 0;
    }
    free(copy);
    if (rc) return rc;
    return layout_build(&cfg, L, err, errlen);
}

wp_result machine_from_opts(const wp_opts *o, wp_machine *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (o->device_tflops < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "--device-tflops: %g must not be negative", o->device_tflops);
    if (o->ranks_per_node < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "--ranks-per-node: %lld must not be negative", (long long)o->ranks_per_node);
    m->flops = o->device_tflops * 1e12;
    m->mem_bw = o->device_mem_bandwidth;
    m->ranks_per_node = (int)(o->ranks_per_node > WP_MAX_CHUNKS ? WP_MAX_CHUNKS : o->ranks_per_node);
    m->link_bw = o->link_bandwidth;
    m->link_lat = o->link_latency;
    m->node_bw = o->node_link_bandwidth;
    m->node_lat = o->node_link_latency;
    m->host_optim = o->optimizer_memory == WP_OPTIM_MEM_HOST;
    m->host_link_bw = o->host_link_bandwidth;
    m->host_mem_bw = o->host_memory_bandwidth;
    return 0;
}
