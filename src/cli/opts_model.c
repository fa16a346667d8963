/* Flags of the model: its shape and chunking (adapters.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adapters.h"

#define NEED(cond, ...) \
    do {                \
        if (!(cond)) return wp_fail(WP_BAD_INPUT, err, errlen, __VA_ARGS__); \
    } while (0)

static wp_result parse_chunk_layers(const char *list, wp_model_cfg *cfg, char *err, size_t errlen) {
    int n = 0, sum = 0;
    const char *p = list;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1000000)
            return wp_fail(WP_BAD_INPUT, err, errlen, "--chunk-layers: '%s' is not a comma-separated list of positive layer counts", list);
        if (n == WP_MAX_CHUNKS) return wp_fail(WP_BAD_INPUT, err, errlen, "--chunk-layers: more than %d chunks", WP_MAX_CHUNKS);
        cfg->chunk_layers[n++] = (int)v;
        sum += (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return wp_fail(WP_BAD_INPUT, err, errlen, "--chunk-layers: unexpected '%c' in '%s'", *p, list);
    }
    if (sum != cfg->n_layers)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--chunk-layers: '%s' adds up to %d layers, but --num-layers is %d", list, sum, cfg->n_layers);
    cfg->n_chunks = n;
    return 0;
}

wp_result model_cfg_from_opts(const wp_opts *o, int nranks, wp_model_cfg *cfg, char *err, size_t errlen) {
    return model_cfg_split_from_opts(o, nranks, WP_SPLIT_FLAGS, cfg, err, errlen);
}

wp_result model_cfg_split_from_opts(const wp_opts *o, int nranks, wp_chunk_split split, wp_model_cfg *cfg, char *err,
                              size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    const int64_t big = 1 << 24;
    NEED(o->num_layers >= 1 && o->num_layers <= 100000, "--num-layers: %lld must be at least 1", (long long)o->num_layers);
    NEED(o->hidden_size >= 1 && o->hidden_size <= big, "--hidden-size: %lld must be between 1 and %lld", (long long)o->hidden_size, (long long)big);
    NEED(o->num_attention_heads >= 1, "--num-attention-heads: %lld must be at least 1", (long long)o->num_attention_heads);
    NEED(o->hidden_size % o->num_attention_heads == 0, "--hidden-size: %lld is not divisible by --num-attention-heads %lld",
         (long long)o->hidden_size, (long long)o->num_attention_heads);
    int64_t hd = o->hidden_size / o->num_attention_heads;
    NEED(hd % 2 == 0, "--num-attention-heads: head size %lld (hidden-size / heads) must be even for RoPE", (long long)hd);
    int64_t kv = o->num_query_groups ? o->num_query_groups : o->num_attention_heads;
    NEED(kv >= 1 && o->num_attention_heads % kv == 0, "--num-query-groups: %lld must be positive and divide --num-attention-heads %lld",
         (long long)o->num_query_groups, (long long)o->num_attention_heads);
    int64_t ffn = o->ffn_hidden_size;
    if (ffn == 0) ffn = ((8 * o->hidden_size / 3 + 31) / 32) * 32;
    NEED(ffn >= 1 && ffn <= 4 * big, "--ffn-hidden-size: %lld must be positive", (long long)o->ffn_hidden_size);
    NEED(o->seq_length >= 1 && o->seq_length <= big, "--seq-length: %lld must be between 1 and %lld", (long long)o->seq_length, (long long)big);
    NEED(o->micro_batch_size >= 1 && o->micro_batch_size <= big, "--micro-batch-size: %lld must be at least 1", (long long)o->micro_batch_size);
    /* token ids are int32 (the loader, the embedding, the head's targets) */
    NEED(o->vocab_size >= 2 && o->vocab_size <= INT32_MAX, "--vocab-size: %lld must be between 2 and %d", (long long)o->vocab_size,
         INT32_MAX);
    NEED(o->micro_batch_size * o->seq_length <= INT32_MAX,
         "--micro-batch-size x --seq-length: %lld tokens is too many", (long long)(o->micro_batch_size * o->seq_length));
    NEED(o->rope_theta > 0, "--rope-theta: %g must be positive", o->rope_theta);
    NEED(o->rope_scaling_factor >= 0, "--rope-scaling-factor: %g must not be negative (0: no scaling)", o->rope_scaling_factor);
    if (o->rope_scaling_factor > 0) {
        NEED(o->rope_low_freq_factor > 0, "--rope-low-freq-factor: %g must be positive", o->rope_low_freq_factor);
        NEED(o->rope_high_freq_factor > o->rope_low_freq_factor, "--rope-high-freq-factor: %g must exceed --rope-low-freq-factor %g",
             o->rope_high_freq_factor, o->rope_low_freq_factor);
        NEED(o->rope_original_max_positions >= 1 && o->rope_original_max_positions <= INT32_MAX,
             "--rope-original-max-positions: %lld must be between 1 and %d", (long long)o->rope_original_max_positions, INT32_MAX);
    }
    NEED(o->bos_token_id >= -1 && o->bos_token_id < o->vocab_size, "--bos-token-id: %lld is not -1 or a token below --vocab-size %lld",
         (long long)o->bos_token_id, (long long)o->vocab_size);
    NEED(o->eos_token_id >= -1 && o->eos_token_id < o->vocab_size, "--eos-token-id: %lld is not -1 or a token below --vocab-size %lld",
         (long long)o->eos_token_id, (long long)o->vocab_size);
    NEED(o->max_position_embeddings >= 0 && o->max_position_embeddings <= INT32_MAX,
         "--max-position-embeddings: %lld must be between 0 and %d", (long long)o->max_position_embeddings, INT32_MAX);
    NEED(o->norm_eps > 0, "--norm-eps: %g must be positive", o->norm_eps);
    NEED(o->init_std >= 0, "--init-std: %g must not be negative", o->init_std);

    cfg->n_layers = (int)o->num_layers;
    cfg->h = (int)o->hidden_size;
    cfg->ffn = (int)ffn;
    cfg->n_heads = (int)o->num_attention_heads;
    cfg->n_kv_heads = (int)kv;
    cfg->head_dim = (int)hd;
    cfg->seq = (int)o->seq_length;
    cfg->micro_batch = (int)o->micro_batch_size;
    cfg->vocab = (int)o->vocab_size;
    cfg->rope_theta = o->rope_theta;
    /* no scaling is all zeros, so configs compare and checkpoint the same whatever the unused flags say */
    if (o->rope_scaling_factor > 0)
        cfg->rope_scaling = (wp_rope_scaling){o->rope_scaling_factor, o->rope_low_freq_factor, o->rope_high_freq_factor,
                                              (double)o->rope_original_max_positions};
    else
        cfg->rope_scaling = (wp_rope_scaling){0, 0, 0, 0};
    cfg->max_pos = (int)o->max_position_embeddings;
    cfg->tied = o->tie_word_embeddings;
    cfg->has_bos = o->bos_token_id >= 0;
    cfg->bos_id = cfg->has_bos ? (int)o->bos_token_id : 0;
    cfg->has_eos = o->eos_token_id >= 0;
    cfg->eos_id = cfg->has_eos ? (int)o->eos_token_id : 0;
    /* the owner of the embedding must also own the head: one chunk on one rank (docs/model.md) */
    cfg->norm_eps = o->norm_eps;
    cfg->init_std = o->init_std;
    cfg->recompute = o->recompute;
    cfg->doc_mask = o->doc_mask;
    NEED(o->doc_mask || o->doc_positions == WP_DOC_POS_CONTINUE,
         "--doc-positions restart: needs --doc-mask (positions restart where the document masks find documents)");
    cfg->doc_positions = o->doc_positions;
    NEED(o->doc_mask || o->doc_length_mean == 0, "--doc-length-mean: needs --doc-mask (it is the documents' length)");
    /* the FLOP counts' attention: the stated length's, else what train measured, else all pairs */
    cfg->attn_share = !o->doc_mask                ? 1.0
                      : o->doc_length_mean > 0   ? attn_pairs_equal_docs((int)o->seq_length, (int)o->doc_length_mean) /
                                                       attn_pairs_causal((int)o->seq_length)
                      : o->attn_share_data > 0 ? o->attn_share_data
                                               : 1.0;
    NEED(o->doc_boundary_id >= -1 && o->doc_boundary_id < o->vocab_size,
         "--doc-boundary-id: %lld is not a token of the %lld-token vocabulary (-1: the tokenizer's BOS)",
         (long long)o->doc_boundary_id, (long long)o->vocab_size);
    /* -1: what prepare writes before each document: 0 without a tokenizer (bytes); train
     * replaces it with its tokenizer's BOS (its EOS where it has none), as prepare does */
    cfg->doc_boundary = o->doc_boundary_id >= 0 ? (int32_t)o->doc_boundary_id : 0;
    cfg->precision = o->precision;

    if (split == WP_SPLIT_FLAGS && chunk_layers_listed(o)) {
        WP_TRY(parse_chunk_layers(o->chunk_layers, cfg, err, errlen));
        NEED(!o->set[FLAG_num_chunks] || o->num_chunks == cfg->n_chunks,
             "--num-chunks: %lld disagrees with --chunk-layers '%s' (%d chunks)", (long long)o->num_chunks, o->chunk_layers, cfg->n_chunks);
        return 0;
    }
    int64_t chunks = o->num_chunks ? o->num_chunks : (nranks > 0 ? nranks : 1);
    NEED(chunks >= 1 && chunks <= WP_MAX_CHUNKS, "--num-chunks: %lld must be between 1 and %d", (long long)chunks, WP_MAX_CHUNKS);
    NEED(chunks <= cfg->n_layers, "--num-chunks: %lld chunks need at least as many layers, but --num-layers is %d%s",
         (long long)chunks, cfg->n_layers, o->num_chunks ? "" : " (the default is one chunk per rank, --nranks)");
    if (split == WP_SPLIT_BALANCED || (split == WP_SPLIT_FLAGS && strcmp(o->chunk_layers, "auto") == 0))
        model_cfg_balanced_chunks(cfg, (int)chunks);
    else model_cfg_even_chunks(cfg, (int)chunks);
    return 0;
}

bool chunk_layers_listed(const wp_opts *o) {
    return o->chunk_layers[0] && strcmp(o->chunk_layers, "auto") != 0 && strcmp(o->chunk_layers, "even") != 0;
}

wp_precision precision_from_opts(const wp_opts *o, wp_precision def) { return o->set[FLAG_precision] ? o->precision : def; }

bool tokenizer_is_bytes(const wp_opts *o) { return strcmp(o->tokenizer, "bytes") == 0; }

static int64_t *int_field(wp_opts *o, int flag) {
    switch (flag) {
    case FLAG_num_layers: return &o->num_layers;
    case FLAG_hidden_size: return &o->hidden_size;
    case FLAG_ffn_hidden_size: return &o->ffn_hidden_size;
    case FLAG_num_attention_heads: return &o->num_attention_heads;
    case FLAG_num_query_groups: return &o->num_query_groups;
    case FLAG_rope_original_max_positions: return &o->rope_original_max_positions;
    case FLAG_max_position_embeddings: return &o->max_position_embeddings;
    case FLAG_bos_token_id: return &o->bos_token_id;
    case FLAG_eos_token_id: return &o->eos_token_id;
    default: return &o->vocab_size;
    }
}

static double *num_field(wp_opts *o, int flag) {
    switch (flag) {
    case FLAG_norm_eps: return &o->norm_eps;
    case FLAG_rope_scaling_factor: return &o->rope_scaling_factor;
    case FLAG_rope_low_freq_factor: return &o->rope_low_freq_factor;
    case FLAG_rope_high_freq_factor: return &o->rope_high_freq_factor;
    default: return &o->rope_theta;
    }
}

wp_result hf_config_apply(const hf_config *c, wp_opts *o, char *err, size_t errlen) {
    static const int flag_of[HF_NKEYS] = {
        [HF_NUM_HIDDEN_LAYERS] = FLAG_num_layers,          [HF_HIDDEN_SIZE] = FLAG_hidden_size,
        [HF_INTERMEDIATE_SIZE] = FLAG_ffn_hidden_size,     [HF_NUM_ATTENTION_HEADS] = FLAG_num_attention_heads,
        [HF_NUM_KEY_VALUE_HEADS] = FLAG_num_query_groups,  [HF_VOCAB_SIZE] = FLAG_vocab_size,
        [HF_RMS_NORM_EPS] = FLAG_norm_eps,                 [HF_ROPE_THETA] = FLAG_rope_theta,
        [HF_ROPE_FACTOR] = FLAG_rope_scaling_factor,       [HF_ROPE_LOW_FREQ] = FLAG_rope_low_freq_factor,
        [HF_ROPE_HIGH_FREQ] = FLAG_rope_high_freq_factor,  [HF_ROPE_ORIGINAL_MAX] = FLAG_rope_original_max_positions,
        [HF_MAX_POSITIONS] = FLAG_max_position_embeddings, [HF_BOS_TOKEN_ID] = FLAG_bos_token_id,
        [HF_EOS_TOKEN_ID] = FLAG_eos_token_id,
    };
    for (int k = 0; k < HF_NKEYS; k++) {
        if (!c->present[k]) continue;
        int flag = flag_of[k];
        bool integer = hf_key_integer((hf_key)k);
        double *num = num_field(o, flag);
        double have = integer ? (double)*int_field(o, flag) : *num, value = c->value[k];
        if (integer && !(value >= 0 && value <= 2147483647.0)) /* before the cast: out of range is undefined */
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s %.17g is out of range (0 to 2^31-1)", c->path, hf_key_name((hf_key)k), value);
        if (o->set[flag] && fabs(have - value) > 1e-12 * fabs(value))
            return wp_fail(WP_BAD_INPUT, err, errlen, "--%s %g disagrees with %s in %s (%g)", cli_flag_name(flag), have,
                        hf_key_name((hf_key)k), c->path, value);
        if (integer)
            *int_field(o, flag) = (int64_t)value;
        else
            *num = value;
    }
    if (o->set[FLAG_tie_word_embeddings] && o->tie_word_embeddings != c->tied)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--tie-word-embeddings %s disagrees with tie_word_embeddings in %s (%s)",
                        o->tie_word_embeddings ? "true" : "false", c->path, c->tied ? "true" : "false");
    o->tie_word_embeddings = c->tied;
    if (!c->present[HF_ROPE_FACTOR] && o->set[FLAG_rope_scaling_factor] && o->rope_scaling_factor != 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--rope-scaling-factor %g disagrees with %s (no rope_scaling)", o->rope_scaling_factor, c->path);
    if (c->have_head_dim && o->num_attention_heads > 0 && c->head_dim * o->num_attention_heads != o->hidden_size)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: head_dim %lld is not hidden_size / num_attention_heads", c->path, (long long)c->head_dim);
    return 0;
}

wp_result kern_opts_from_opts(const wp_opts *o, wp_dtype compute, int threads, int local_rank, wp_kern_opts *ko, char *err,
                        size_t errlen) {
    /* --backend and --attention are kernels.h's enums already (cli_set parsed them) */
    memset(ko, 0, sizeof *ko);
    ko->kind = o->backend;
    ko->compute = compute;
    ko->threads = threads;
    ko->attention = o->attention;
    ko->nondeterministic = !o->deterministic;
    if (o->device < -1 || o->device > INT32_MAX)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--device: %lld is not a device ordinal (or -1: the local rank's)", (long long)o->device);
    if (ko->kind != WP_BACKEND_CUDA) return 0;
    int visible = kern_device_count(WP_BACKEND_CUDA);
    if (o->device >= 0 && visible > 0 && o->device >= visible)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--device %lld: this machine shows %d CUDA device%s (after CUDA_VISIBLE_DEVICES)",
                        (long long)o->device, visible, visible == 1 ? "" : "s");
    ko->device = kern_pick_device((int)o->device, local_rank, visible);
    return 0;
}

void mem_cfg_from_opts(const wp_opts *o, const wp_layout *L, int nranks, wp_mem_cfg *mc) {
    /* simulate models the GPUs of a preset unless --backend cpu is given (train sets it) */
    const bool cpu = o->set[FLAG_backend] && o->backend == WP_BACKEND_CPU;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int share = nranks > 0 && cores > nranks ? (int)(cores / nranks) : 1;
    *mc = (wp_mem_cfg){.compute = cpu ? WP_F32 : precision_act_dtype(L->cfg.precision), .cpu = cpu,
                       .threads = o->threads > 0 ? (int)o->threads : share, .eval = o->eval_every > 0,
                       .sample = o->sample_every > 0,
                       .sample_tokens = (int)(o->sample_tokens < L->cfg.seq ? o->sample_tokens : L->cfg.seq),
                       .host_optim = o->optimizer_memory == WP_OPTIM_MEM_HOST};
}
