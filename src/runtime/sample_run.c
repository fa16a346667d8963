/* --sample-every's gather and greedy decode (sample_run.h). */
#include "sample_run.h"

#include <stdio.h>
#include <stdlib.h>

#include "decode.h"

struct rt_sample {
    const wp_schedule *s;
    const wp_layout *L;
    int rank, tokens;
    int32_t bos, eos;
    wp_kern *k;
    wp_optim *o;
    wp_transport *t;
    wp_control *ctl;
    double timeout;
    void *wire;          /* weight wire dtype, largest chunk */
    float *stage;        /* rank 0: fp32 backend copy of one chunk */
    float *params;       /* rank 0: host fp32, layout order */
    wp_decoder *D;       /* rank 0 */
    wp_sampler *greedy;  /* rank 0 */
};

static wp_result fail(char *err, size_t errlen, const char *what) { return wp_fail(WP_FAILED, err, errlen, "--sample-every: %s", what); }

wp_result sample_create(rt_sample **out, const wp_schedule *s, int rank, const wp_layout *L, wp_kern *k, wp_optim *o,
                  wp_transport *t, wp_control *ctl, int tokens, int32_t bos, int32_t eos, double timeout, char *err,
                  size_t errlen) {
    rt_sample *S = calloc(1, sizeof *S);
    *out = S;
    if (!S) return fail(err, errlen, "out of memory");
    *S = (rt_sample){.s = s, .L = L, .rank = rank, .tokens = tokens, .bos = bos, .eos = eos, .k = k, .o = o, .t = t, .ctl = ctl,
                     .timeout = timeout};
    size_t most = 1;
    for (int c = 0; c < s->nchunks; c++)
        if (L->chunk_numel[c] > most) most = L->chunk_numel[c];
    S->wire = kern_alloc(k, most * wp_dtype_size(precision_weight_dtype(L->cfg.precision)));
    if (!S->wire) return fail(err, errlen, "out of memory");
    if (rank != 0) return 0;
    char why[512];
    S->stage = kern_alloc(k, most * sizeof(float));
    S->params = malloc(L->total_numel * sizeof *S->params);
    if (S->params) kern_mem_host(k, WP_MEM_SAMPLE, (int64_t)(L->total_numel * sizeof *S->params));
    S->D = decoder_create(L, k, tokens, why, sizeof why); /* token 0 and tokens - 1 chosen ones are run */
    S->greedy = sampler_create(L->cfg.vocab, &(wp_sampling){.temperature = 0, .top_k = 0, .top_p = 1}, 0);
    if (!S->D) return fail(err, errlen, why);
    if (!S->stage || !S->params || !S->greedy) return fail(err, errlen, "out of memory");
    return 0;
}

void sample_destroy(rt_sample *S) {
    if (!S) return;
    if (S->wire) kern_free(S->k, S->wire);
    if (S->stage) kern_free(S->k, S->stage);
    decoder_destroy(S->D);
    sampler_destroy(S->greedy);
    if (S->params) kern_mem_host(S->k, WP_MEM_SAMPLE, -(int64_t)(S->L->total_numel * sizeof *S->params));
    free(S->params);
    free(S);
}

static wp_result move(rt_sample *S, bool send, int peer, void *buf, size_t bytes, char *err, size_t errlen) {
    wp_request *req;
    char why[300];
    int rc = send ? tp_post_send(S->t, peer, WP_SAMPLE_CHANNEL, buf, bytes, "sample weights", &req, why, sizeof why)
                  : tp_post_recv(S->t, peer, WP_SAMPLE_CHANNEL, buf, bytes, "sample weights", &req, why, sizeof why);
    if (!rc) {
        ctl_set_status(S->ctl, "sample: %s weights %s rank %d", send ? "sending" : "receiving", send ? "to" : "from", peer);
        rc = tp_wait(&req, S->timeout, why, sizeof why);
    }
    return rc ? fail(err, errlen, why) : 0;
}

/* Chunk c's working copy, whole, in S->wire on rank 0: slices gathered on the owner (as
 * evaluate.c's gather_weights does), then the owner's whole chunk sent to rank 0. */
static wp_result gather_chunk(rt_sample *S, int c, char *err, size_t errlen) {
    const wp_dtype wt = precision_weight_dtype(S->L->cfg.precision);
    const size_t es = wp_dtype_size(wt), numel = S->L->chunk_numel[c];
    const int owner = S->s->owner[c], n = S->s->nslices;
    size_t off = 0, len = numel;
    if (n && !optim_range(S->o, c, &off, &len)) return fail(err, errlen, "a rank holds no slice of a chunk");
    char *mine = (char *)S->wire + (S->rank == owner ? off * es : 0);
    if ((n || S->rank == owner) && optim_working_copy(S->o, c, mine, wt)) return fail(err, errlen, optim_error(S->o));
    kern_sync(S->k);
    if (n && S->rank != owner) return move(S, true, owner, mine, len * es, err, errlen);
    for (int r = 0; n && r < n; r++) {
        if (r == owner) continue;
        slice_range(numel, r, n, &off, &len);
        if (move(S, false, r, (char *)S->wire + off * es, len * es, err, errlen)) return 1;
    }
    if (owner == 0) return 0;
    if (S->rank == owner) return move(S, true, 0, S->wire, numel * es, err, errlen);
    return S->rank == 0 ? move(S, false, owner, S->wire, numel * es, err, errlen) : 0;
}

wp_result sample_run(rt_sample *S, int32_t *ids, int *n, char *err, size_t errlen) {
    *n = 0;
    const wp_dtype wt = precision_weight_dtype(S->L->cfg.precision);
    for (int c = 0; c < S->s->nchunks; c++) {
        if (gather_chunk(S, c, err, errlen)) return 1;
        if (S->rank != 0) continue;
        kern_convert(S->k, S->stage, WP_F32, S->wire, wt, S->L->chunk_numel[c]);
        kern_to_host(S->k, S->params + S->L->chunk_offset[c], S->stage, S->L->chunk_numel[c] * sizeof(float));
        if (kern_error(S->k)) return fail(err, errlen, kern_error(S->k));
    }
    if (S->rank != 0) return 0;
    if (decoder_set_params(S->D, S->params) != 0) return fail(err, errlen, kern_error(S->k));
    decoder_reset(S->D);
    char why[512];
    if (decoder_generate(S->D, S->greedy, &S->bos, 1, S->tokens, &S->eos, S->eos >= 0 ? 1 : 0, ids, n, NULL, NULL, why, sizeof why) != 0)
        return fail(err, errlen, why);
    return 0;
}
