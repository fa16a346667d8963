/* The KV-cache decoder (src/model/decode.c) against recomputing the whole prefix with the
 * training forward (model_forward over the whole sequence), and the token chooser against the
 * distributions it promises.
 *
 * Logits of the reference: model_forward keeps per token lse[t] and loss[t] = lse[t] -
 * logit[t, target[t]]; running it once per target value v (every position targeting v) gives
 * logit[t, v] = lse[t] - loss[t] for every position t of the sequence, without any code of the
 * decoder. The decoder runs the prompt (prefill, in blocks of WP_DECODE_ROWS), then the greedy
 * continuation one token at a time; its logits at every position must equal the reference's
 * within fp32 rounding (tolerance 2e-4 on logits of magnitude ~1-5; a position off by one, a
 * RoPE at the wrong position or a lost cache row gives errors above 1e-2, which the
 * shifted-position control below shows). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "decode.h"
#include "harness.h"
#include "model_impl.h"
#include "rng.h"

#define LOGIT_TOL 2e-4
#define G_MAX(x) ((x) < 64 ? (x) : 64)

/* Reference logits [S, V] of the token sequence toks (one chunk, whole sequence). */
static void reference_logits(const wp_model_cfg *shape, const float *params, const int32_t *toks, int S, float *out) {
    char err[512];
    wp_model_cfg cfg = *shape;
    cfg.seq = S;
    cfg.micro_batch = 1;
    model_cfg_even_chunks(&cfg, 1);
    wp_layout L;
    CHECK(layout_build(&cfg, &L, err, sizeof err) == 0, "layout_build: %s", err);
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    wp_kern *k = kern_create(&ko, err, sizeof err);
    CHECK(k, "kern_create: %s", err);
    wp_model *m = model_create(&L, k, err, sizeof err);
    CHECK(m, "model_create: %s", err);
    wp_acts *a = model_acts_create(m, 0);
    float *w = kern_alloc(k, L.total_numel * sizeof(float));
    int32_t *tok = kern_alloc(k, (size_t)S * sizeof(int32_t)), *tgt = kern_alloc(k, (size_t)S * sizeof(int32_t));
    CHECK(a && w && tok && tgt, "reference buffers: %s", kern_error(k));
    kern_to_device(k, w, params, L.total_numel * sizeof(float));
    kern_to_device(k, tok, toks, (size_t)S * sizeof(int32_t));
    int32_t *host_tgt = malloc((size_t)S * sizeof(int32_t));
    CHECK(host_tgt, "malloc");
    for (int v = 0; v < cfg.vocab; v++) {
        for (int t = 0; t < S; t++) host_tgt[t] = v;
        kern_to_device(k, tgt, host_tgt, (size_t)S * sizeof(int32_t));
        double sum = 0;
        CHECK(model_forward(m, 0, w, a, NULL, tok, tgt, NULL, &sum) == 0, "model_forward: %s", kern_error(k));
        for (int t = 0; t < S; t++) out[(size_t)t * cfg.vocab + v] = a->lse_head[t] - a->losses[t]; /* CPU: host memory */
    }
    free(host_tgt);
    kern_free(k, w);
    kern_free(k, tok);
    kern_free(k, tgt);
    model_acts_destroy(m, a);
    model_destroy(m);
    kern_destroy(k);
    layout_free(&L);
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN wins */
    }
    return m;
}

static int32_t argmax_row(const float *x, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* One case: prompt of P random tokens, G greedy tokens, decoder chunked as chunks[]. */
static void kv_case(int P, int G, const int *chunks, int nchunks, uint64_t seed, const wp_rope_scaling *sc) {
    char err[512];
    const int S = P + G, V = 37;
    wp_model_cfg cfg = shape_cfg(3, 48, 4, 2, 96, S, 1, V);
    cfg.init_std = 0.25; /* attention far from uniform: a wrong mask or position shows */
    if (sc) cfg.rope_scaling = *sc;
    set_chunks(&cfg, chunks, nchunks);
    wp_layout L;
    CHECK(layout_build(&cfg, &L, err, sizeof err) == 0, "layout_build: %s", err);
    float *params = xmalloc_floats(L.total_numel);
    for (int c = 0; c < cfg.n_chunks; c++) layout_init_chunk(&L, c, seed, params + L.chunk_offset[c]);
    wp_rng g = rng_seeded(seed ^ 0x6465636full);
    for (int i = 0; i < L.n_params; i++) /* norms away from 1 */
        if (L.params[i].kind == WP_PARAM_NORM)
            for (int j = 0; j < L.params[i].rows; j++)
                params[L.chunk_offset[L.params[i].chunk] + L.params[i].offset + j] = (float)(1 + 0.2 * rng_normal(&g));

    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    wp_kern *k = kern_create(&ko, err, sizeof err);
    CHECK(k, "kern_create: %s", err);
    wp_decoder *D = decoder_create(&L, k, S, err, sizeof err);
    CHECK(D, "decoder_create: %s", err);
    CHECK(decoder_set_params(D, params) == 0, "decoder_set_params: %s", kern_error(k));

    int32_t *toks = malloc((size_t)S * sizeof(int32_t));
    float *got = xmalloc_floats((size_t)S * V), *want = xmalloc_floats((size_t)S * V), *again = xmalloc_floats(V);
    CHECK(toks, "malloc");
    for (int t = 0; t < P; t++) toks[t] = (int32_t)rng_below(&g, V);
    CHECK(decoder_run(D, toks, P, got, true, err, sizeof err) == 0, "prefill: %s", err);
    for (int t = P; t < S; t++) {
        toks[t] = argmax_row(got + (size_t)(t - 1) * V, V);
        CHECK(decoder_run(D, toks + t, 1, got + (size_t)t * V, false, err, sizeof err) == 0, "step %d: %s", t, err);
    }
    CHECK(decoder_pos(D) == S, "decoder at position %d, want %d", decoder_pos(D), S);
    reference_logits(&cfg, params, toks, S, want);
    double diff = max_abs_diff(got, want, (size_t)S * V), spread = 0;
    for (int t = 1; t < S; t++) { /* logits must vary along the sequence, or the comparison says little */
        double d = max_abs_diff(want, want + (size_t)t * V, V);
        if (d > spread) spread = d;
    }
    check_say(diff <= LOGIT_TOL, "chunks %s, prompt %d + %d greedy: KV cache vs recomputed prefix, max |logit diff| "
              "%.2e <= %.0e (logits vary by %.2f along the sequence)", chunks_str(&cfg), P, G, diff, LOGIT_TOL, spread);
    EXPECT(spread > 100 * LOGIT_TOL, "logits hardly vary (%.3g): the comparison cannot tell positions apart", spread);

    /* control: the reference of the sequence shifted by one position differs far beyond the
     * tolerance, so a decoder off by one position would fail above */
    double shifted = max_abs_diff(got + V, want, (size_t)(S - 1) * V);
    EXPECT(shifted > 50 * LOGIT_TOL, "a one-position shift moves logits by only %.3g", shifted);

    /* the same sequence again after a reset, fed one token at a time: same logits (to rounding:
     * a prefill block and single rows sum in another order) */
    decoder_reset(D);
    double step_diff = 0;
    for (int t = 0; t < S; t++) {
        CHECK(decoder_run(D, toks + t, 1, again, false, err, sizeof err) == 0, "token-by-token %d: %s", t, err);
        double d = max_abs_diff(again, want + (size_t)t * V, V);
        if (d > step_diff) step_diff = d;
    }
    check_say(step_diff <= LOGIT_TOL, "chunks %s: token by token from position 0, max |logit diff| %.2e",
              chunks_str(&cfg), step_diff);

    /* bad input: full cache, token outside the vocabulary; the position stays */
    int32_t bad = V;
    EXPECT(decoder_run(D, &bad, 1, again, false, err, sizeof err) == 2, "a token past the full cache: want 2");
    decoder_reset(D);
    EXPECT(decoder_run(D, &bad, 1, again, false, err, sizeof err) == 2 && strstr(err, "vocabulary"),
           "token %d of vocabulary %d: want 2 naming the vocabulary, got '%s'", bad, V, err);
    EXPECT(decoder_pos(D) == 0, "a refused token moved the position to %d", decoder_pos(D));

    /* decoder_generate: the greedy ids above; with one of them as EOS it stops right after
     * its first appearance */
    wp_sampler *Gs = sampler_create(V, &(wp_sampling){.temperature = 0, .top_k = 0, .top_p = 1}, 0);
    CHECK(Gs, "sampler_create");
    int32_t gen[64];
    int n = 0;
    decoder_reset(D);
    CHECK(decoder_generate(D, Gs, toks, P, G_MAX(S - P), NULL, 0, gen, &n, NULL, NULL, err, sizeof err) == 0, "generate: %s", err);
    EXPECT(n == S - P && memcmp(gen, toks + P, (size_t)n * sizeof *gen) == 0, "generate: %d ids, not the greedy run's", n);
    int32_t eos = gen[n > 3 ? 3 : n - 1];
    int first = 0;
    while (gen[first] != eos) first++; /* its first appearance */
    decoder_reset(D);
    CHECK(decoder_generate(D, Gs, toks, P, S - P, &eos, 1, gen, &n, NULL, NULL, err, sizeof err) == 0, "generate: %s", err);
    EXPECT(n == first + 1 && gen[n - 1] == eos, "EOS %d first chosen at %d: generation gave %d ids", (int)eos, first, n);
    /* an eos list (a generation config's): the first of its ids chosen ends it, whichever it is */
    int32_t eos_list[2] = {V + 5 /* never chosen */, eos};
    decoder_reset(D);
    CHECK(decoder_generate(D, Gs, toks, P, S - P, eos_list, 2, gen, &n, NULL, NULL, err, sizeof err) == 0, "generate: %s", err);
    EXPECT(n == first + 1 && gen[n - 1] == eos, "eos list {%d, %d}: generation gave %d ids, want %d", V + 5, (int)eos, n, first + 1);
    sampler_destroy(Gs);

    /* decoder_set_param in pieces of 7 elements (a loader's path) gives the weights
     * decoder_set_params gives: the same prefill logits, bit for bit (the second decoder's
     * weights start as NaN so a piece missed shows) */
    wp_decoder *D2 = decoder_create(&L, k, S, err, sizeof err);
    CHECK(D2, "decoder_create: %s", err);
    float *nan_params = xmalloc_floats(L.total_numel);
    for (size_t i = 0; i < L.total_numel; i++) nan_params[i] = NAN;
    CHECK(decoder_set_params(D2, nan_params) == 0, "decoder_set_params: %s", kern_error(k));
    for (int i = 0; i < L.n_params; i++) {
        const wp_param *p = &L.params[i];
        const float *src = params + L.chunk_offset[p->chunk] + p->offset;
        for (size_t first = 0; first < layout_param_numel(p); first += 7) {
            size_t m = layout_param_numel(p) - first < 7 ? layout_param_numel(p) - first : 7;
            CHECK(decoder_set_param(D2, p, first, m, src + first) == 0, "decoder_set_param %s: %s", p->name, kern_error(k));
        }
    }
    decoder_reset(D);
    CHECK(decoder_run(D, toks, P, got, true, err, sizeof err) == 0, "prefill: %s", err);
    CHECK(decoder_run(D2, toks, P, want, true, err, sizeof err) == 0, "prefill: %s", err);
    EXPECT(memcmp(got, want, (size_t)P * V * sizeof *got) == 0, "weights set piece by piece: other logits than set whole");
    free(nan_params);
    decoder_destroy(D2);

    free(toks);
    free(got);
    free(want);
    free(again);
    free(params);
    decoder_destroy(D);
    kern_destroy(k);
    layout_free(&L);
}

/* ---- the token chooser ---- */

static void softmax(const float *l, int V, double T, double *p) {
    double m = l[0], s = 0;
    for (int i = 1; i < V; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < V; i++) s += p[i] = exp((l[i] - m) / T);
    for (int i = 0; i < V; i++) p[i] /= s;
}

/* Frequencies of n draws against probabilities want (0 where an id must never appear):
 * within 5 standard deviations of a binomial, and exactly 0 where want is 0. */
static void check_freq(const char *what, wp_sampling s, const float *l, int V, const double *want) {
    wp_sampler *S = sampler_create(V, &s, 99);
    CHECK(S, "sampler_create");
    enum { N = 20000 };
    int count[16] = {0};
    for (int i = 0; i < N; i++) {
        int32_t id = sampler_pick(S, l);
        CHECK(id >= 0 && id < V, "%s: id %d outside [0, %d)", what, id, V);
        count[id]++;
    }
    double worst = 0;
    for (int i = 0; i < V; i++) {
        if (want[i] == 0) {
            EXPECT(count[i] == 0, "%s: id %d drawn %d times, want never", what, i, count[i]);
            continue;
        }
        double sd = sqrt(N * want[i] * (1 - want[i])) + 1e-9, z = fabs(count[i] - N * want[i]) / sd;
        worst = z > worst ? z : worst;
    }
    check_say(worst <= 5, "%s: %d draws, worst frequency %.2f sd from its probability", what, N, worst);
    sampler_destroy(S);
}

static void sampler_cases(void) {
    const int V = 6;
    const float l[6] = {0.5f, 2.0f, -1.0f, 1.5f, 2.0f, 0.0f}; /* ids 1 and 4 tie for the top */
    double p[6], want[6];

    wp_sampler *S = sampler_create(V, &(wp_sampling){.temperature = 0, .top_k = 0, .top_p = 1}, 1);
    CHECK(S, "sampler_create");
    EXPECT(sampler_pick(S, l) == 1, "greedy with a tie between 1 and 4: want the lowest id 1");
    sampler_destroy(S);

    /* top-k 1 and a tiny top-p are greedy, whatever the temperature and the seed */
    wp_rng g = rng_seeded(5);
    float r[64];
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < 64; i++) r[i] = (float)rng_normal(&g);
        if (trial % 4 == 0) r[trial % 64] = r[(trial + 7) % 64] = 10; /* ties at the top too */
        int32_t greedy = argmax_row(r, 64);
        wp_sampler *a = sampler_create(64, &(wp_sampling){.temperature = 1.7, .top_k = 1, .top_p = 1}, (uint64_t)trial);
        wp_sampler *b = sampler_create(64, &(wp_sampling){.temperature = 0.9, .top_k = 0, .top_p = 1e-9}, (uint64_t)trial);
        CHECK(a && b, "sampler_create");
        int32_t ia = sampler_pick(a, r), ib = sampler_pick(b, r);
        EXPECT(ia == greedy && ib == greedy, "trial %d: top-k 1 gave %d, top-p 1e-9 gave %d, greedy %d", trial, ia, ib,
               greedy);
        sampler_destroy(a);
        sampler_destroy(b);
    }

    /* the same seed repeats the same ids; another seed gives others */
    int32_t seq[3][200];
    uint64_t seeds[3] = {42, 42, 43};
    for (int s = 0; s < 3; s++) {
        wp_sampler *x = sampler_create(64, &(wp_sampling){.temperature = 1, .top_k = 0, .top_p = 1}, seeds[s]);
        CHECK(x, "sampler_create");
        wp_rng lg = rng_seeded(8);
        for (int i = 0; i < 200; i++) {
            for (int j = 0; j < 64; j++) r[j] = (float)rng_normal(&lg);
            seq[s][i] = sampler_pick(x, r);
        }
        sampler_destroy(x);
    }
    EXPECT(memcmp(seq[0], seq[1], sizeof seq[0]) == 0, "seed 42 twice: different ids");
    EXPECT(memcmp(seq[0], seq[2], sizeof seq[0]) != 0, "seeds 42 and 43: the same 200 ids");

    /* the distributions: plain softmax at T = 1 and T = 2 */
    softmax(l, V, 1, p);
    check_freq("temperature 1", (wp_sampling){.temperature = 1, .top_k = 0, .top_p = 1}, l, V, p);
    softmax(l, V, 2, p);
    check_freq("temperature 2", (wp_sampling){.temperature = 2, .top_k = 0, .top_p = 1}, l, V, p);
    /* top-k 3: ids 1, 4 (tied, both kept) and 3, renormalised */
    softmax(l, V, 1, p);
    double k3 = p[1] + p[4] + p[3];
    for (int i = 0; i < V; i++) want[i] = (i == 1 || i == 4 || i == 3) ? p[i] / k3 : 0;
    check_freq("top-k 3", (wp_sampling){.temperature = 1, .top_k = 3, .top_p = 1}, l, V, want);
    /* top-p: the two tied tops hold p[1] + p[4] ~ 0.66 of the mass; 0.6 keeps exactly them,
     * 0.7 adds id 3 */
    EXPECT(p[1] + p[4] > 0.6 && p[1] + p[4] < 0.7, "test logits: tops hold %.4f", p[1] + p[4]);
    for (int i = 0; i < V; i++) want[i] = (i == 1 || i == 4) ? p[i] / (p[1] + p[4]) : 0;
    check_freq("top-p 0.6", (wp_sampling){.temperature = 1, .top_k = 0, .top_p = 0.6}, l, V, want);
    for (int i = 0; i < V; i++) want[i] = (i == 1 || i == 4 || i == 3) ? p[i] / k3 : 0;
    check_freq("top-p 0.7", (wp_sampling){.temperature = 1, .top_k = 0, .top_p = 0.7}, l, V, want);
}

int main(void) {
    kv_case(9, 23, (int[]){3}, 1, 11, NULL);       /* short prompt, one chunk */
    kv_case(70, 12, (int[]){2, 1}, 2, 12, NULL);   /* prompt over two prefill blocks, two chunks */
    kv_case(1, 30, (int[]){1, 1, 1}, 3, 13, NULL); /* a single prompt token, a chunk per layer */
    /* Llama 3.x rope_scaling: an original range of 16 positions scales every frequency whose
     * wavelength exceeds 4 positions, so a decoder without the scaling is off from position 1 */
    kv_case(20, 20, (int[]){2, 1}, 2, 14,
            &(wp_rope_scaling){.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_pos = 16});
    sampler_cases();
    return check_result("model/decode");
}
