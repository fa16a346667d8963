/* --help from the flag table, grouped by what a flag is about and limited to the flags the
 * subcommand reads; and the refusal of an unknown flag with the one that was probably meant. */
#include <stdio.h>
#include <string.h>

#include "cli_impl.h"

enum { G_OTHER, G_MODEL, G_PARALLEL, G_DATA, G_OPTIM, G_CKPT, G_CLUSTER, G_SAMPLE, G_OUTPUT, G_COUNT };
static const char *const group_names[G_COUNT] = {"other", "model and compute", "parallelism", "data",
                                                 "optimizer and schedule", "checkpoints", "cluster and links",
                                                 "sampling", "output"};

/* Every flag's group; tests/cli checks that none is left in G_OTHER. */
static const unsigned char group_of[FLAG_COUNT] = {
    [FLAG_num_layers] = G_MODEL, [FLAG_hidden_size] = G_MODEL, [FLAG_ffn_hidden_size] = G_MODEL,
    [FLAG_num_attention_heads] = G_MODEL, [FLAG_num_query_groups] = G_MODEL, [FLAG_seq_length] = G_MODEL,
    [FLAG_micro_batch_size] = G_MODEL, [FLAG_vocab_size] = G_MODEL, [FLAG_rope_theta] = G_MODEL,
    [FLAG_rope_scaling_factor] = G_MODEL, [FLAG_rope_low_freq_factor] = G_MODEL, [FLAG_rope_high_freq_factor] = G_MODEL,
    [FLAG_rope_original_max_positions] = G_MODEL, [FLAG_tie_word_embeddings] = G_MODEL, [FLAG_bos_token_id] = G_MODEL,
    [FLAG_eos_token_id] = G_MODEL, [FLAG_max_position_embeddings] = G_MODEL, [FLAG_norm_eps] = G_MODEL,
    [FLAG_init_std] = G_MODEL, [FLAG_recompute] = G_MODEL, [FLAG_optimizer_memory] = G_MODEL, [FLAG_doc_mask] = G_MODEL, [FLAG_doc_boundary_id] = G_MODEL,
    [FLAG_doc_positions] = G_MODEL, [FLAG_doc_length_mean] = G_MODEL,
    [FLAG_precision] = G_MODEL, [FLAG_backend] = G_MODEL,
    [FLAG_device] = G_MODEL, [FLAG_attention] = G_MODEL, [FLAG_deterministic] = G_MODEL, [FLAG_graphs] = G_MODEL, [FLAG_threads] = G_MODEL,
    [FLAG_num_chunks] = G_PARALLEL, [FLAG_chunk_layers] = G_PARALLEL, [FLAG_strategy] = G_PARALLEL,
    [FLAG_nranks] = G_PARALLEL, [FLAG_num_microbatches] = G_PARALLEL, [FLAG_wzb2_owner] = G_PARALLEL,
    [FLAG_i1f1b_order] = G_PARALLEL, [FLAG_seq_segments] = G_PARALLEL, [FLAG_warmup_extra] = G_PARALLEL,
    [FLAG_data] = G_DATA, [FLAG_val_data] = G_DATA, [FLAG_tokenizer] = G_DATA, [FLAG_val_fraction] = G_DATA,
    [FLAG_text_field] = G_DATA, [FLAG_chat] = G_DATA, [FLAG_chat_template] = G_DATA, [FLAG_train_on] = G_DATA,
    [FLAG_skip_bad_records] = G_DATA,
    [FLAG_batches] = G_DATA, [FLAG_eval_every] = G_DATA, [FLAG_eval_batches] = G_DATA, [FLAG_out] = G_DATA,
    [FLAG_steps] = G_OPTIM, [FLAG_seed] = G_OPTIM, [FLAG_lr] = G_OPTIM, [FLAG_min_lr] = G_OPTIM,
    [FLAG_warmup_steps] = G_OPTIM, [FLAG_lr_decay_style] = G_OPTIM, [FLAG_adam_beta1] = G_OPTIM,
    [FLAG_adam_beta2] = G_OPTIM, [FLAG_adam_eps] = G_OPTIM, [FLAG_weight_decay] = G_OPTIM, [FLAG_clip_grad] = G_OPTIM,
    [FLAG_loss_scale] = G_OPTIM, [FLAG_loss_scale_window] = G_OPTIM, [FLAG_max_skipped_steps] = G_OPTIM,
    [FLAG_save] = G_CKPT, [FLAG_overwrite_save] = G_CKPT, [FLAG_save_every] = G_CKPT, [FLAG_keep_last] = G_CKPT, [FLAG_resume] = G_CKPT,
    [FLAG_init_from] = G_CKPT, [FLAG_max_shard_size] = G_CKPT,
    [FLAG_transport] = G_CLUSTER, [FLAG_tcp_streams] = G_CLUSTER, [FLAG_bind] = G_CLUSTER,
    [FLAG_connect_timeout] = G_CLUSTER, [FLAG_timeout] = G_CLUSTER, [FLAG_ib_device] = G_CLUSTER,
    [FLAG_ib_port] = G_CLUSTER, [FLAG_ib_gid_index] = G_CLUSTER, [FLAG_calibrate] = G_CLUSTER,
    [FLAG_link_bandwidth] = G_CLUSTER, [FLAG_link_latency] = G_CLUSTER, [FLAG_ranks_per_node] = G_CLUSTER,
    [FLAG_node_link_bandwidth] = G_CLUSTER, [FLAG_node_link_latency] = G_CLUSTER, [FLAG_device_tflops] = G_CLUSTER,
    [FLAG_device_memory] = G_CLUSTER, [FLAG_host_memory] = G_CLUSTER, [FLAG_device_mem_bandwidth] = G_CLUSTER,
    [FLAG_host_link_bandwidth] = G_CLUSTER, [FLAG_host_memory_bandwidth] = G_CLUSTER,
    [FLAG_prompt] = G_SAMPLE, [FLAG_system] = G_SAMPLE, [FLAG_prompt_tokens] = G_SAMPLE, [FLAG_max_new_tokens] = G_SAMPLE,
    [FLAG_temperature] = G_SAMPLE, [FLAG_top_k] = G_SAMPLE, [FLAG_top_p] = G_SAMPLE,
    [FLAG_config] = G_OUTPUT, [FLAG_peak_tflops] = G_OUTPUT, [FLAG_metrics] = G_OUTPUT, [FLAG_tensorboard] = G_OUTPUT, [FLAG_sample_every] = G_OUTPUT,
    [FLAG_sample_tokens] = G_OUTPUT, [FLAG_trace] = G_OUTPUT, [FLAG_format] = G_OUTPUT, [FLAG_svg] = G_OUTPUT,
    [FLAG_quiet] = G_OUTPUT, [FLAG_local_clocks] = G_OUTPUT,
};

static void print_flag(FILE *f, int i, unsigned cmd) {
    char lhs[64];
    snprintf(lhs, sizeof lhs, "--%s", flags[i].name);
    const cli_command_info *c = cli_command_of(cmd);
    if (i == FLAG_format && c && c->formats) fprintf(f, "    %-26s %s output format", lhs, c->formats);
    else fprintf(f, "    %-26s %s", lhs, flags[i].help);
    if (flags[i].def[0]) fprintf(f, " [%s]", flags[i].def);
    fputc('\n', f);
}

void cli_print_flags(FILE *f, unsigned cmd) {
    if (!cmd) {
        fprintf(f, "subcommands:\n");
        for (size_t i = 0; i < CLI_N_COMMANDS; i++) fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
        fprintf(f, "\nflags of every subcommand (weipipe SUBCOMMAND --help lists the ones each reads):\n");
    } else {
        fprintf(f, "flags of '%s':\n", cli_command_of(cmd) ? cli_command_of(cmd)->name : "?");
    }
    for (int g = 1; g <= G_COUNT; g++) {
        int group = g % G_COUNT; /* G_OTHER last */
        bool header = false;
        for (int i = 0; i < FLAG_COUNT; i++) {
            if (group_of[i] != group || (cmd && !(flags[i].cmds & cmd))) continue;
            if (!header) fprintf(f, "\n  %s:\n", group_names[group]);
            header = true;
            print_flag(f, i, cmd);
        }
    }
}

/* Optimal-string-alignment distance (Damerau: a swap of two neighbours costs 1), names < 64. */
static int distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1], best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* Other trainers' names (Megatron-LM, Hugging Face TrainingArguments / config.json, torchrun
 * scripts), hyphenated, for the flag that means the same here. */
static const struct { const char *other, *ours; } aliases[] = {
    {"max-steps", "steps"}, {"train-iters", "steps"}, {"num-train-steps", "steps"}, {"iterations", "steps"},
    {"learning-rate", "lr"}, {"lr-warmup-iters", "warmup-steps"}, {"lr-warmup-steps", "warmup-steps"},
    {"lr-scheduler-type", "lr-decay-style"}, {"num-hidden-layers", "num-layers"}, {"n-layer", "num-layers"},
    {"intermediate-size", "ffn-hidden-size"}, {"num-key-value-heads", "num-query-groups"},
    {"num-heads", "num-attention-heads"}, {"n-head", "num-attention-heads"}, {"rms-norm-eps", "norm-eps"},
    {"layernorm-epsilon", "norm-eps"}, {"batch-size", "micro-batch-size"},
    {"per-device-train-batch-size", "micro-batch-size"}, {"max-grad-norm", "clip-grad"}, {"adam-epsilon", "adam-eps"},
    {"output-dir", "save"}, {"load", "resume"}, {"save-interval", "save-every"}, {"eval-interval", "eval-every"},
    {"eval-iters", "eval-batches"}, {"data-path", "data"}, {"tokenizer-model", "tokenizer"}, {"seq-len", "seq-length"},
    {"max-seq-length", "seq-length"}, {"pipeline-model-parallel-size", "nranks"}, {"world-size", "nranks"},
};

/* The flag meant by name, and how it was found (0: none). */
static int closest(const char *name, const char **how) {
    char hyph[128];
    snprintf(hyph, sizeof hyph, "%s", name);
    for (char *p = hyph; *p; p++)
        if (*p == '_') *p = '-';
    for (size_t k = 0; k < sizeof aliases / sizeof aliases[0]; k++)
        if (strcmp(hyph, aliases[k].other) == 0) return *how = "another trainer's name for it", cli_find_flag(aliases[k].ours);
    int i = cli_find_flag(hyph);
    if (i >= 0) return *how = "weipipe spells flags with hyphens, not Hugging Face's underscores", i;
    int best = -1, best_d = 99, len = (int)strlen(hyph);
    for (int f = 0; f < FLAG_COUNT; f++) {
        int d = distance(hyph, flags[f].name);
        if (d < best_d) best = f, best_d = d;
    }
    /* a typo, not another word: at most 2 edits, and fewer than a third of the name */
    if (best >= 0 && best_d <= 2 && best_d * 3 < len) return *how = "", best;
    return -1;
}

wp_result cli_unknown_flag(const char *name, const char *what, unsigned cmd, char *err, size_t errlen) {
    const char *how = "";
    int i = closest(name, &how);
    const cli_command_info *c = cli_command_of(cmd);
    char tail[160] = "";
    if (c) snprintf(tail, sizeof tail, " (see weipipe %s --help)", c->name);
    if (i < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "unknown %s%s%s%s", what, c ? " for '" : "", c ? c->name : "", c ? "'" : "");
    return wp_fail(WP_BAD_INPUT, err, errlen, "unknown %s%s%s%s: did you mean --%s?%s%s%s%s", what, c ? " for '" : "", c ? c->name : "",
                    c ? "'" : "", flags[i].name, how[0] ? " (" : "", how, how[0] ? ")" : "", tail);
}
