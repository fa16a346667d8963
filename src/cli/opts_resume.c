/* --resume takes the run's shape and schedule from the checkpoint's manifest.json (adapters.h):
 * its "model" keys are spelled as the flags, its "flags" hold the run's train flags. A flag
 * the user did not give is set from there; one given must agree, and every disagreement is
 * listed in one refusal. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "checkpoint.h"
#include "cli_impl.h"
#include "fsutil.h"

/* Must agree when given: the shape a checkpoint's tensors have, and the schedule the run
 * follows (a changed --lr or decay would jump at the resumed step). */
static const int must_agree[] = {FLAG_num_layers, FLAG_hidden_size, FLAG_ffn_hidden_size, FLAG_num_attention_heads,
                                 FLAG_num_query_groups, FLAG_vocab_size, FLAG_rope_theta, FLAG_norm_eps,
                                 FLAG_tie_word_embeddings, FLAG_rope_scaling_factor, FLAG_rope_low_freq_factor,
                                 FLAG_rope_high_freq_factor, FLAG_rope_original_max_positions, FLAG_lr, FLAG_min_lr,
                                 FLAG_warmup_steps, FLAG_lr_decay_style};
/* Taken when not given, free to differ (as before: a warning or a new data order): the
 * sequence, micro-batch, precision, seed, --steps (a longer run continues the decay over
 * the new total), and how packed documents are seen (--doc-mask and its boundary and positions:
 * a resumed run left without them would silently train another function) */
static const int inherited[] = {FLAG_seq_length, FLAG_micro_batch_size, FLAG_precision, FLAG_seed, FLAG_steps,
                                FLAG_doc_mask, FLAG_doc_boundary_id, FLAG_doc_positions};

static bool listed(int flag, const int *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (list[i] == flag) return true;
    return false;
}

/* A JSON scalar as the text cli_set parses; false for anything else. */
static bool as_text(json_t *v, char *buf, size_t len) {
    if (json_is_integer(v)) snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) { /* the shortest text that reads back the same double */
        double x = json_real_value(v);
        snprintf(buf, len, "%.15g", x);
        if (strtod(buf, NULL) != x) snprintf(buf, len, "%.17g", x);
    }
    else if (json_is_boolean(v)) snprintf(buf, len, "%s", json_is_true(v) ? "true" : "false");
    else if (json_is_string(v)) snprintf(buf, len, "%s", json_string_value(v));
    else return false;
    return true;
}

typedef struct {
    wp_opts *o;
    const char *path;
    char *diff;      /* the disagreements so far, "; "-separated */
    size_t difflen;
} resume_ctx;

/* One key of the manifest: set it when not given, else compare (as parsed values). */
static wp_result take(resume_ctx *c, const char *key, json_t *v, char *err, size_t errlen) {
    int i = cli_find_flag(key);
    bool agree = i >= 0 && listed(i, must_agree, sizeof must_agree / sizeof must_agree[0]);
    if (i < 0 || (!agree && !listed(i, inherited, sizeof inherited / sizeof inherited[0]))) return 0;
    char text[300], why[300];
    if (!as_text(v, text, sizeof text)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: key %s is not a number, string or boolean", c->path, key);
    static wp_opts ck; /* the checkpoint's value, parsed as the flag's */
    ck.cmd = c->o->cmd;
    if (cli_set(&ck, key, text, "", why, sizeof why)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s", c->path, why);
    size_t off = flags[i].offset, size = cli_flag_size(i);
    if (!c->o->set[i]) {
        memcpy((char *)c->o + off, (char *)&ck + off, size);
        return 0;
    }
    if (!agree || memcmp((char *)c->o + off, (char *)&ck + off, size) == 0) return 0;
    char item[400];
    snprintf(item, sizeof item, "--%s (checkpoint: %s)", key, text);
    if (strstr(c->diff, item)) return 0; /* a key in both "model" and "flags" */
    size_t n = strlen(c->diff);
    snprintf(c->diff + n, c->difflen - n, "%s%s", n ? ", " : "", item);
    return 0;
}

static wp_result take_object(resume_ctx *c, json_t *obj, char *err, size_t errlen) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (json_is_object(v) && strcmp(key, "rope-scaling") == 0) { /* model.rope-scaling.factor -> --rope-scaling-factor */
            const char *sub;
            json_t *w;
            json_object_foreach(v, sub, w) {
                char name[96];
                snprintf(name, sizeof name, "rope-%s%s", strcmp(sub, "factor") ? "" : "scaling-", sub);
                WP_TRY(take(c, name, w, err, errlen));
            }
        } else {
            WP_TRY(take(c, key, v, err, errlen));
        }
    }
    return 0;
}

wp_result resume_opts_from_manifest(wp_opts *o, char *err, size_t errlen) {
    if (!o->resume[0]) return 0;
    char dir[WP_PATH_MAX], why[512];
    wp_result rc = ckpt_resolve(o->resume, o->save, dir, sizeof dir, why, sizeof why);
    if (rc) return wp_fail(WP_BAD_INPUT, err, errlen, "--resume: %s", why);
    if (!dir[0]) return 0; /* auto, nothing saved yet: a fresh run */
    char path[WP_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_t *root;
    if (fs_load_json(path, (size_t)64 << 20, 0, &root, why, sizeof why))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--resume: %s", why);
    if (!json_is_object(root)) {
        json_decref(root);
        return wp_fail(WP_BAD_INPUT, err, errlen, "--resume: %s: not a JSON object", path);
    }
    char diff[1024] = "";
    resume_ctx c = {o, path, diff, sizeof diff};
    json_t *model = json_object_get(root, "model"), *run = json_object_get(root, "flags");
    rc = json_is_object(model) ? take_object(&c, model, err, errlen) : wp_fail(WP_BAD_INPUT, err, errlen, "%s: no model object", path);
    if (!rc && json_is_object(run)) rc = take_object(&c, run, err, errlen); /* older manifests have none */
    json_t *prec = json_object_get(root, "precision"), *tok = json_object_get(root, "tokenizer");
    if (!rc && prec) rc = take(&c, "precision", prec, err, errlen);
    /* the run's tokenizer travels in the checkpoint: the default over the one beside --data */
    const char *tok_name = json_is_object(tok) ? json_string_value(json_object_get(tok, "name")) : NULL;
    if (!rc && tok_name && !o->set[FLAG_tokenizer] && strlen(dir) + strlen(tok_name) + 2 <= sizeof o->tokenizer) {
        int n = snprintf(o->tokenizer, sizeof o->tokenizer, "%.200s/%.50s", dir, tok_name);
        (void)n; /* fits: checked just above */
        o->set[FLAG_tokenizer] = true;
    }
    json_decref(root);
    if (!rc && diff[0])
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "--resume %s: flags disagree with the checkpoint: %s (leave them out: the checkpoint "
                      "gives them)", dir, diff);
    return rc;
}
