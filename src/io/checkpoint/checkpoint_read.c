/* Reading checkpoints: resolve --resume, verify the manifest and every checksum, re-split the
 * tensors by name into whatever chunks this rank owns. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "manifest.h"
#include "safetensors.h"

struct wp_ckpt {
    char dir[WP_PATH_MAX];
    char tokenizer[WP_PATH_MAX]; /* dir/tokenizer.model or .json, "" when none */
    wp_manifest manifest;
    st_file **files;
};

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static void strip_slashes(char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') path[--n] = '\0';
}

/* SAVE/latest -> SAVE/step-K; *found = false when there is no latest file. */
static wp_result follow_latest(const char *save_dir, char *out, size_t len, bool *found, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    wp_result rc = fs_join(path, sizeof path, save_dir, "latest", err, errlen);
    *found = rc == 0 && fs_exists(path);
    if (rc || !*found) return rc;
    char *text;
    size_t size;
    WP_TRY(fs_read_small(path, 4096, &text, &size, err, errlen));
    text[strcspn(text, "\r\n")] = '\0';
    if (strncmp(text, "step-", 5) != 0 || strchr(text, '/') || ends_with(text, ".tmp"))
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: '%s' does not name a step-K directory", path, text);
    if (rc == 0) rc = fs_join(out, len, save_dir, text, err, errlen);
    free(text);
    return rc;
}

/* "step-K" (not .tmp): K, else -1. */
static int64_t finished_step(const char *name) {
    char *end;
    if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9') return -1;
    errno = 0;
    long long k = strtoll(name + 5, &end, 10);
    return errno || *end ? -1 : k;
}

/* The newest step-K of save_dir whose manifest reads and verifies (its own checksum, every
 * key); *any_step says whether there was a finished step-K at all. */
static wp_result newest_verified(const char *save_dir, char *out, size_t len, bool *any_step, char *err, size_t errlen) {
    *any_step = false;
    out[0] = '\0';
    DIR *d = opendir(save_dir);
    if (!d) return errno == ENOENT ? 0 : wp_fail_errno(WP_BAD_INPUT, err, errlen, "%s: cannot open directory", save_dir);
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t k = finished_step(e->d_name);
        char manifest[WP_PATH_MAX], why[WP_PATH_MAX + 128];
        if (k < 0) continue;
        *any_step = true;
        if (k <= best || snprintf(manifest, sizeof manifest, "%s/%s/manifest.json", save_dir, e->d_name) >= (int)sizeof manifest)
            continue;
        wp_manifest m;
        if (manifest_read(manifest, &m, why, sizeof why) != 0) continue; /* unfinished or damaged: not a candidate */
        bool same_step = m.info.step == k;
        manifest_free(&m);
        if (same_step && fs_join(out, len, save_dir, e->d_name, err, errlen) == 0) best = k;
    }
    closedir(d);
    if (best < 0) out[0] = '\0';
    return 0;
}

/* --resume auto: latest when it names a finished checkpoint; without a readable latest (missing,
 * unreadable, a looping link, naming nothing finished) the newest step-K whose manifest verifies
 * (was: a fresh start, whose saves then pruned the finished checkpoints); with neither, but
 * something there, 2 naming the directory. An empty or missing directory is a fresh start. */
static wp_result resolve_auto(const char *save_dir, char *step_dir, size_t len, char *err, size_t errlen) {
    char latest[WP_PATH_MAX], manifest[WP_PATH_MAX], why[WP_PATH_MAX + 128] = "";
    bool found = false, any_step;
    struct stat st;
    WP_TRY(fs_join(latest, sizeof latest, save_dir, "latest", err, errlen));
    bool has_latest = lstat(latest, &st) == 0;
    if (has_latest && follow_latest(save_dir, step_dir, len, &found, why, sizeof why) == 0 && found &&
        fs_join(manifest, sizeof manifest, step_dir, "manifest.json", why, sizeof why) == 0 && fs_exists(manifest))
        return 0;
    if (has_latest && !why[0]) snprintf(why, sizeof why, "%s: does not name a finished checkpoint", latest);
    wp_result rc = newest_verified(save_dir, step_dir, len, &any_step, err, errlen);
    if (rc || step_dir[0]) {
        if (rc == 0) /* a note for the caller to show: returned 0, with err set */
            wp_fail(WP_OK, err, errlen, "auto: %s; resuming from %s, the newest checkpoint whose manifest verifies",
                    has_latest ? why : "no latest file", step_dir);
        return rc;
    }
    if (!has_latest && !any_step) return 0; /* nothing saved yet: start fresh */
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s: no readable latest and no finished checkpoint whose manifest verifies (%s); "
                   "refusing to start over beside them", save_dir, has_latest ? why : "latest missing");
}

wp_result ckpt_resolve(const char *resume, const char *save_dir, char *step_dir, size_t len, char *err, size_t errlen) {
    char path[WP_PATH_MAX], manifest[WP_PATH_MAX];
    bool found;
    /* copied first: step_dir may be the very buffer resume points into */
    if (snprintf(path, sizeof path, "%s", resume) >= (int)sizeof path) return wp_fail(WP_BAD_INPUT, err, errlen, "%.64s...: path too long", resume);
    step_dir[0] = '\0';
    if (errlen) err[0] = '\0';
    if (strcmp(path, "auto") == 0) {
        if (!save_dir || !save_dir[0]) return wp_fail(WP_BAD_INPUT, err, errlen, "--resume auto: needs --save (the directory to resume from)");
        return resolve_auto(save_dir, step_dir, len, err, errlen);
    }
    strip_slashes(path);
    if (!fs_is_dir(path)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a checkpoint directory", path);
    if (ends_with(path, ".tmp")) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: an unfinished checkpoint (.tmp): never loaded", path);
    WP_TRY(fs_join(manifest, sizeof manifest, path, "manifest.json", err, errlen));
    if (fs_exists(manifest)) {
        if (snprintf(step_dir, len, "%s", path) >= (int)len) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", path);
        return 0;
    }
    wp_result rc = follow_latest(path, step_dir, len, &found, err, errlen);
    if (rc == 0 && !found)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: no manifest.json (not a finished checkpoint) and no latest file", path);
    return rc;
}

/* The file's size and CRC-32 against the manifest entry. */
static wp_result verify_file(const char *path, const wp_manifest_file *mf, char *err, size_t errlen) {
    fs_map m;
    WP_TRY(fs_map_file(path, &m, err, errlen));
    wp_result rc = WP_OK;
    if (m.size != mf->size)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: size %zu bytes, but the manifest says %llu (truncated or replaced)", path, m.size,
                     (unsigned long long)mf->size);
    uint32_t crc = rc ? 0 : fs_crc32(0, m.data, m.size);
    if (rc == 0 && crc != mf->crc)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: CRC-32 %08x, but the manifest says %08x (corrupted)", path, crc, mf->crc);
    fs_unmap(&m);
    return rc;
}

static wp_result open_files(wp_ckpt *c, char *err, size_t errlen) {
    c->files = calloc((size_t)c->manifest.n_files, sizeof *c->files);
    if (!c->files) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", c->dir);
    for (int i = 0; i < c->manifest.n_files; i++) {
        char path[WP_PATH_MAX];
        wp_result rc = fs_join(path, sizeof path, c->dir, c->manifest.files[i].name, err, errlen);
        if (rc == 0 && !fs_exists(path)) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: missing (listed in the manifest)", path);
        if (rc == 0) rc = verify_file(path, &c->manifest.files[i], err, errlen);
        if (rc == 0) rc = st_open(&c->files[i], path, err, errlen);
        if (rc) return rc;
    }
    /* the tokenizer is checked as the shards are: a replaced one would decode to other text */
    const wp_manifest_file *tf = &c->manifest.tokenizer;
    if (tf->name[0]) {
        wp_result rc = fs_join(c->tokenizer, sizeof c->tokenizer, c->dir, tf->name, err, errlen);
        if (rc == 0 && !fs_exists(c->tokenizer)) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: missing (listed in the manifest)", c->tokenizer);
        if (rc == 0) rc = verify_file(c->tokenizer, tf, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

const char *ckpt_tokenizer(const wp_ckpt *c) { return c->tokenizer[0] ? c->tokenizer : NULL; }

wp_result ckpt_open(wp_ckpt **out, const char *step_dir, char *err, size_t errlen) {
    *out = NULL;
    wp_ckpt *c = calloc(1, sizeof *c);
    if (!c) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", step_dir);
    wp_result rc = WP_OK;
    char manifest[WP_PATH_MAX];
    if (snprintf(c->dir, sizeof c->dir, "%s", step_dir) >= (int)sizeof c->dir) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", step_dir);
    strip_slashes(c->dir);
    if (rc == 0 && ends_with(c->dir, ".tmp"))
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: an unfinished checkpoint (.tmp): never loaded", c->dir);
    if (rc == 0 && !fs_is_dir(c->dir)) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a checkpoint directory", c->dir);
    if (rc == 0) rc = fs_join(manifest, sizeof manifest, c->dir, "manifest.json", err, errlen);
    if (rc == 0) rc = manifest_read(manifest, &c->manifest, err, errlen);
    if (rc == 0) rc = open_files(c, err, errlen);
    if (rc) {
        ckpt_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

void ckpt_close(wp_ckpt *c) {
    if (!c) return;
    for (int i = 0; c->files && i < c->manifest.n_files; i++) st_close(c->files[i]);
    free(c->files);
    manifest_free(&c->manifest);
    free(c);
}

const wp_ckpt_info *ckpt_info(const wp_ckpt *c) { return &c->manifest.info; }
const char *ckpt_dir(const wp_ckpt *c) { return c->dir; }

static bool same(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)); }

wp_result ckpt_check_model(const wp_ckpt *c, const wp_model_cfg *cfg, char *err, size_t errlen) {
    const wp_model_cfg *k = &c->manifest.info.cfg;
    const struct {
        const char *flag;
        double ckpt, run;
    } keys[] = {{"num-layers", k->n_layers, cfg->n_layers},       {"hidden-size", k->h, cfg->h},
                {"ffn-hidden-size", k->ffn, cfg->ffn},            {"num-attention-heads", k->n_heads, cfg->n_heads},
                {"num-query-groups", k->n_kv_heads, cfg->n_kv_heads}, {"vocab-size", k->vocab, cfg->vocab},
                {"rope-theta", k->rope_theta, cfg->rope_theta},   {"norm-eps", k->norm_eps, cfg->norm_eps},
                /* 0 when unscaled on either side (opts_model.c zeroes all four then) */
                {"rope-scaling-factor", k->rope_scaling.factor, cfg->rope_scaling.factor},
                {"rope-low-freq-factor", k->rope_scaling.low_freq_factor, cfg->rope_scaling.low_freq_factor},
                {"rope-high-freq-factor", k->rope_scaling.high_freq_factor, cfg->rope_scaling.high_freq_factor},
                {"rope-original-max-positions", k->rope_scaling.original_max_pos, cfg->rope_scaling.original_max_pos},
                {"tie-word-embeddings", k->tied, cfg->tied}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!same(keys[i].ckpt, keys[i].run))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s/manifest.json: model %s is %g, but this run has --%s %g (a different model)",
                           c->dir, keys[i].flag, keys[i].ckpt, keys[i].flag, keys[i].run);
    return 0;
}

/* The tensor of that name in whichever shard file holds it. */
static const st_tensor *find(const wp_ckpt *c, const char *name, const st_file **file) {
    for (int i = 0; i < c->manifest.n_files; i++) {
        const st_tensor *t = st_find(c->files[i], name);
        if (t) {
            *file = c->files[i];
            return t;
        }
    }
    return NULL;
}

typedef struct {
    size_t a, b;
} part_span;

static int span_cmp(const void *x, const void *y) {
    const part_span *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* One part "<name>#<a>-<b>" (checkpoint.h) of the tensor `name` of numel elements into dst + a;
 * 0 when t is not one of its parts (*span.b stays 0). */
static wp_result read_part(const st_file *f, const st_tensor *t, const char *name, size_t numel, float *dst, part_span *span,
                     char *err, size_t errlen) {
    size_t len = strlen(name), a, b;
    int used = 0;
    span->a = span->b = 0;
    if (strncmp(t->name, name, len) != 0 || t->name[len] != '#') return 0;
    if (sscanf(t->name + len + 1, "%zu-%zu%n", &a, &b, &used) != 2 || t->name[len + 1 + used] != 0 || a >= b || b > numel)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s names no part of %s's %zu elements", st_path(f), t->name, name, numel);
    if (!t->known || t->dtype != WP_F32 || t->ndim != 1 || t->numel != b - a)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s is not %zu F32 values in one dimension", st_path(f), t->name, b - a);
    span->a = a;
    span->b = b;
    return st_to_f32(f, t, dst + a, err, errlen);
}

/* A tensor that slice owners wrote in parts: the parts must tile it exactly. */
static wp_result read_parts(const wp_ckpt *c, const char *name, size_t numel, float *dst, char *err, size_t errlen) {
    int n = 0, cap = 0, rc = 0;
    part_span *spans = NULL;
    for (int i = 0; rc == 0 && i < c->manifest.n_files; i++)
        for (int k = 0; rc == 0 && k < st_count(c->files[i]); k++) {
            part_span sp;
            rc = read_part(c->files[i], st_at(c->files[i], k), name, numel, dst, &sp, err, errlen);
            if (rc || sp.b == 0) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                part_span *more = realloc(spans, (size_t)cap * sizeof *more);
                if (!more) rc = wp_fail(WP_FAILED, err, errlen, "%s: out of memory", c->dir);
                else spans = more;
            }
            if (rc == 0) spans[n++] = sp;
        }
    if (rc == 0 && n == 0) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s is in none of the shard files", c->dir, name);
    if (rc == 0) qsort(spans, (size_t)n, sizeof *spans, span_cmp);
    size_t next = 0;
    for (int i = 0; rc == 0 && i < n; next = spans[i++].b)
        if (spans[i].a != next) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: the parts of %s %s at element %zu", c->dir, name,
                                             spans[i].a > next ? "leave a gap" : "overlap", next);
    if (rc == 0 && next != numel) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: the parts of %s end at element %zu of %zu", c->dir, name, next, numel);
    free(spans);
    return rc;
}

static wp_result read_tensor(const wp_ckpt *c, const wp_param *p, const char *suffix, float *dst, char *err, size_t errlen) {
    char name[WP_ST_NAME_MAX];
    snprintf(name, sizeof name, "%s%s", p->name, suffix);
    const st_file *f;
    const st_tensor *t = find(c, name, &f);
    if (!t) return read_parts(c, name, (size_t)p->rows * (size_t)p->cols, dst, err, errlen);
    if (!t->known || t->dtype != WP_F32) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s is %s, expected F32", st_path(f), name, t->dtype_name);
    wp_result rc = st_check_shape(f, t, p->rows, p->cols, err, errlen);
    if (rc == 0) rc = st_to_f32(f, t, dst, err, errlen);
    return rc;
}

wp_result ckpt_read_master(const wp_ckpt *c, const wp_param *p, float *dst, char *err, size_t errlen) {
    return read_tensor(c, p, "", dst, err, errlen);
}

static wp_result load_chunk(const wp_ckpt *c, wp_optim *o, int chunk, float *host, char *err, size_t errlen) {
    static const char *const suffix[3] = {"", ".exp_avg", ".exp_avg_sq"};
    const wp_layout *L = layout_of_optim(o);
    int first, end;
    size_t off, len;
    optim_range(o, chunk, &off, &len); /* the whole chunk is read, and the part held kept */
    layout_chunk_params(L, chunk, &first, &end);
    for (int kind = 0; kind < 3; kind++) {
        for (int p = first; p < end; p++) {
            WP_TRY(read_tensor(c, &L->params[p], suffix[kind], host + L->params[p].offset, err, errlen));
        }
        /* a NaN master or moment (or a negative second moment) would only surface as NaN losses later */
        for (size_t i = 0; i < len; i++)
            if (!isfinite(host[off + i]) || (kind == 2 && host[off + i] < 0))
                return wp_fail(WP_BAD_INPUT, err, errlen, "%s: chunk %d's %s holds %g at element %zu (not finite%s)", c->dir, chunk,
                               kind == 0 ? "masters" : kind == 1 ? "exp_avg" : "exp_avg_sq", (double)host[off + i], i,
                               kind == 2 ? " and non-negative" : "");
        if (optim_set(o, chunk, (wp_optim_buf)kind, host + off)) return wp_fail(WP_FAILED, err, errlen, "%s: %s", c->dir, optim_error(o));
    }
    return 0;
}

wp_result ckpt_load_optim(const wp_ckpt *c, wp_optim *o, char *err, size_t errlen) {
    const wp_layout *L = layout_of_optim(o);
    WP_TRY(ckpt_check_model(c, &L->cfg, err, errlen));
    size_t most = 1;
    for (int i = 0; i < optim_n_owned(o); i++)
        if (L->chunk_numel[optim_owned_chunk(o, i)] > most) most = L->chunk_numel[optim_owned_chunk(o, i)];
    float *host = malloc(most * sizeof *host);
    if (!host) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory for %zu floats", c->dir, most);
    wp_result rc = WP_OK;
    for (int i = 0; rc == 0 && i < optim_n_owned(o); i++) rc = load_chunk(c, o, optim_owned_chunk(o, i), host, err, errlen);
    free(host);
    if (rc == 0) {
        optim_set_steps(o, c->manifest.info.optimizer_step);
        if (optim_zero_grad(o)) rc = wp_fail(WP_FAILED, err, errlen, "%s: %s", c->dir, optim_error(o));
    }
    return rc;
}
