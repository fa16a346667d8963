/* Writing checkpoints: one shard per rank (concurrently), then rank 0's commit: manifest last,
 * rename of the whole directory, atomic `latest`, pruning. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "progress.h"
#include "manifest.h"
#include "safetensors.h"

static const char *const kind_suffix[3] = {"", ".exp_avg", ".exp_avg_sq"};

static wp_result step_dir_name(char *out, size_t len, const char *save_dir, int64_t step, bool tmp, char *err, size_t errlen) {
    int n = snprintf(out, len, "%s/step-%" PRId64 "%s", save_dir, step, tmp ? ".tmp" : "");
    if (n < 0 || (size_t)n >= len) return wp_fail(WP_FAILED, err, errlen, "%s: path too long", save_dir);
    return 0;
}

/* The part of tensor p that elements [lo, hi) of its chunk cover: [*a, *b) within the tensor,
 * false when none. */
static bool tensor_part(const wp_param *p, size_t lo, size_t hi, size_t *a, size_t *b) {
    size_t numel = (size_t)p->rows * (size_t)p->cols;
    size_t first = p->offset > lo ? p->offset : lo, last = p->offset + numel < hi ? p->offset + numel : hi;
    if (first >= last) return false;
    *a = first - p->offset;
    *b = last - p->offset;
    return true;
}

/* A whole tensor under its own name; a part of one (a slice owner's, schedule/ir.h) as the 1-D
 * run of its row-major elements under "<name>#<a>-<b>" (checkpoint.h). */
static void describe(st_desc *d, const wp_param *pr, const char *suffix, size_t a, size_t b) {
    size_t numel = (size_t)pr->rows * (size_t)pr->cols;
    d->dtype = WP_F32;
    if (a == 0 && b == numel) {
        snprintf(d->name, sizeof d->name, "%s%s", pr->name, suffix);
        d->ndim = pr->cols == 1 ? 1 : 2; /* norms are 1-D, as in Hugging Face */
        d->shape[0] = pr->rows;
        d->shape[1] = pr->cols;
        return;
    }
    snprintf(d->name, sizeof d->name, "%s%s#%zu-%zu", pr->name, suffix, a, b);
    d->ndim = 1;
    d->shape[0] = (int64_t)(b - a);
    d->shape[1] = 1;
}

/* Tensor list of a shard: per owned chunk, masters, then exp_avg, then exp_avg_sq, each in the
 * chunk's storage order over the elements the rank holds, so each (chunk, kind) is one
 * contiguous run of the file. */
static st_desc *shard_descs(const wp_optim *o, int *count) {
    const wp_layout *L = layout_of_optim(o);
    int n = 0;
    for (int i = 0; i < optim_n_owned(o); i++) {
        int first, end;
        layout_chunk_params(L, optim_owned_chunk(o, i), &first, &end);
        n += 3 * (end - first);
    }
    st_desc *d = calloc((size_t)(n > 0 ? n : 1), sizeof *d);
    if (!d) return NULL;
    int k = 0;
    for (int i = 0; i < optim_n_owned(o); i++) {
        int c = optim_owned_chunk(o, i), first, end;
        size_t off, len, a, b;
        optim_range(o, c, &off, &len);
        layout_chunk_params(L, c, &first, &end);
        for (int kind = 0; kind < 3; kind++)
            for (int p = first; p < end; p++)
                if (tensor_part(&L->params[p], off, off + len, &a, &b)) describe(&d[k++], &L->params[p], kind_suffix[kind], a, b);
    }
    *count = k;
    return d;
}

/* Straight from the optimizer's buffers where they are host memory (no staging copy: the save
 * is then the disk's speed, weipipe bench's "save" phase); else through one host buffer. */
static wp_result put_chunks(st_writer *w, wp_optim *o, char *err, size_t errlen) {
    size_t most = 0, off, len;
    for (int i = 0; i < optim_n_owned(o); i++)
        if (optim_range(o, optim_owned_chunk(o, i), &off, &len) && len > most) most = len;
    float *host = NULL;
    wp_result rc = WP_OK;
    for (int i = 0; rc == 0 && i < optim_n_owned(o); i++) {
        int c = optim_owned_chunk(o, i);
        optim_range(o, c, &off, &len);
        for (int kind = 0; rc == 0 && kind < 3; kind++) {
            const float *data = optim_host_view(o, c, (wp_optim_buf)kind);
            if (!data && !host && !(host = malloc((most ? most : 1) * sizeof *host)))
                rc = wp_fail(WP_FAILED, err, errlen, "checkpoint: out of memory for %zu floats", most);
            if (rc == 0 && !data && optim_get(o, c, (wp_optim_buf)kind, host))
                rc = wp_fail(WP_FAILED, err, errlen, "checkpoint: %s", optim_error(o));
            if (rc == 0) rc = st_writer_put(w, data ? data : host, len * sizeof *host, err, errlen);
        }
    }
    free(host);
    return rc;
}

static wp_result write_receipt(const char *dir, int rank, uint64_t size, uint32_t crc, int64_t opt_step, char *err, size_t errlen) {
    char path[WP_PATH_MAX], name[64], hex[16];
    snprintf(name, sizeof name, "rank-%05d.done", rank);
    WP_TRY(fs_join(path, sizeof path, dir, name, err, errlen));
    snprintf(hex, sizeof hex, "%08x", crc);
    json_t *j = json_pack("{s:I, s:s, s:I}", "size", (json_int_t)size, "crc32", hex, "optimizer_step", (json_int_t)opt_step);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", path);
    wp_result rc = fs_write_file_atomic(path, text, strlen(text), err, errlen);
    free(text);
    return rc;
}

wp_result ckpt_write_shard(const char *save_dir, int64_t step, int rank, wp_optim *o, char *err, size_t errlen) {
    char dir[WP_PATH_MAX], path[WP_PATH_MAX], name[64], rank_s[16], step_s[32];
    wp_result rc = step_dir_name(dir, sizeof dir, save_dir, step, true, err, errlen);
    if (rc == 0) rc = fs_mkdirs(dir, err, errlen);
    manifest_shard_name(rank, name, sizeof name);
    if (rc == 0) rc = fs_join(path, sizeof path, dir, name, err, errlen);
    if (rc) return rc;
    /* -1 in the receipt: this rank owns no chunk, so it has no step count to vouch for */
    int64_t t = optim_n_owned(o) ? optim_steps(o) : -1;
    if (optim_n_owned(o) && t < 0) return wp_fail(WP_FAILED, err, errlen, "checkpoint: rank %d's chunks have taken different numbers of steps", rank);
    int n;
    st_desc *descs = shard_descs(o, &n);
    if (!descs) return wp_fail(WP_FAILED, err, errlen, "checkpoint: out of memory");
    snprintf(rank_s, sizeof rank_s, "%d", rank);
    snprintf(step_s, sizeof step_s, "%" PRId64, t);
    const char *keys[] = {"format", "rank", "optimizer_step"}, *values[] = {WP_CKPT_FORMAT, rank_s, step_s};
    st_writer *w;
    rc = st_writer_open(&w, path, descs, n, keys, values, 3, err, errlen);
    free(descs);
    if (rc) return rc;
    uint64_t bytes = 0;
    for (int i = 0; i < optim_n_owned(o); i++) {
        size_t off, len;
        optim_range(o, optim_owned_chunk(o, i), &off, &len);
        bytes += 3 * len * sizeof(float); /* masters and both moments, as put_chunks writes them */
    }
    char what[WP_PATH_MAX + 32];
    snprintf(what, sizeof what, "saving %.200s", dir);
    io_progress_begin(what, bytes); /* the ranks of this process share one meter */
    rc = put_chunks(w, o, err, errlen);
    io_progress_end(rc == 0);
    uint64_t size;
    uint32_t crc;
    if (rc) {
        st_writer_abort(w);
        return rc;
    }
    rc = st_writer_finish(w, &size, &crc, err, errlen);
    if (rc == 0) rc = write_receipt(dir, rank, size, crc, t, err, errlen);
    return rc;
}

/* ---- commit (rank 0, after all shards are written) ---- */

static wp_result read_receipt(const char *dir, int rank, int64_t opt_step, wp_manifest_file *f, char *err, size_t errlen) {
    char path[WP_PATH_MAX], name[64], shard[WP_PATH_MAX];
    snprintf(name, sizeof name, "rank-%05d.done", rank);
    manifest_shard_name(rank, f->name, sizeof f->name);
    wp_result rc = fs_join(path, sizeof path, dir, name, err, errlen);
    if (rc == 0) rc = fs_join(shard, sizeof shard, dir, f->name, err, errlen);
    if (rc) return rc;
    json_t *j = NULL;
    char why[64]; /* a missing receipt is reported below as the rank's unfinished shard */
    (void)fs_load_json(path, 4096, 0, &j, why, sizeof why);
    json_int_t size = -1, step = -1;
    const char *hex = NULL;
    if (!j || json_unpack(j, "{s:I, s:s, s:I}", "size", &size, "crc32", &hex, "optimizer_step", &step) != 0) {
        json_decref(j);
        return wp_fail(WP_FAILED, err, errlen, "%s: missing or unreadable: rank %d has not finished its shard", path, rank);
    }
    f->size = (uint64_t)size;
    f->crc = (uint32_t)strtoul(hex, NULL, 16);
    json_decref(j);
    struct stat st;
    if (stat(shard, &st) != 0 || (uint64_t)st.st_size != f->size)
        return wp_fail(WP_FAILED, err, errlen, "%s: missing or not the %llu bytes its rank wrote", shard, (unsigned long long)f->size);
    if (step >= 0 && step != opt_step)
        return wp_fail(WP_FAILED, err, errlen, "%s: optimizer step %lld, but the checkpoint's is %lld", shard, (long long)step,
                       (long long)opt_step);
    return 0;
}

/* rank-RRRRR.safetensors with RRRRR < nranks */
static bool is_shard_name(const char *name, int nranks) {
    char expect[64];
    for (int r = 0; r < nranks; r++) {
        manifest_shard_name(r, expect, sizeof expect);
        if (strcmp(name, expect) == 0) return true;
    }
    return false;
}

/* Everything in the directory but the nranks shard files goes: receipts, and files left by an
 * earlier, crashed attempt (perhaps with more ranks). */
static wp_result remove_strays(const char *dir, int nranks, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot open directory", dir);
    struct dirent *e;
    wp_result rc = WP_OK;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || is_shard_name(e->d_name, nranks)) continue;
        char path[WP_PATH_MAX];
        rc = fs_join(path, sizeof path, dir, e->d_name, err, errlen);
        if (rc == 0) rc = fs_remove_tree(path, err, errlen);
    }
    closedir(d);
    return rc;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* "step-K" or "step-K.tmp": K into *step, *tmp says which; 0 when the name is neither. */
static int parse_step_name(const char *name, int64_t *step, bool *tmp) {
    char *end;
    if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9') return 0;
    errno = 0;
    long long k = strtoll(name + 5, &end, 10);
    if (errno) return 0;
    *step = k;
    *tmp = strcmp(end, ".tmp") == 0;
    return *end == '\0' || *tmp;
}

/* May this commit delete finished step k (wp_ckpt_keep)? */
static bool may_prune(const wp_ckpt_keep *keep, int64_t k) {
    if (!keep->written || k <= keep->resumed_from) return true;
    for (int i = 0; i < keep->n_written; i++)
        if (keep->written[i] == k) return true;
    return false;
}

static wp_result prune(const char *save_dir, int64_t current, const wp_ckpt_keep *keep, char *err, size_t errlen) {
    DIR *d = opendir(save_dir);
    if (!d) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot open directory", save_dir);
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    wp_result rc = WP_OK;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        int64_t k;
        bool tmp;
        char path[WP_PATH_MAX];
        if (!parse_step_name(e->d_name, &k, &tmp)) continue;
        if (tmp) {
            /* an attempt older than the checkpoint just committed died half-way */
            if (k < current && fs_join(path, sizeof path, save_dir, e->d_name, err, errlen) == 0) rc = fs_remove_tree(path, err, errlen);
            continue;
        }
        if (k != current && !may_prune(keep, k)) continue; /* another run's: neither counted nor deleted */
        if (n == cap) {
            int64_t *grown = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!grown) {
                rc = wp_fail(WP_FAILED, err, errlen, "%s: out of memory listing checkpoints", save_dir);
                break;
            }
            steps = grown;
        }
        steps[n++] = k;
    }
    closedir(d);
    qsort(steps, n, sizeof *steps, cmp_desc);
    int keep_last = keep->keep_last;
    for (size_t i = (size_t)keep_last; rc == 0 && keep_last > 0 && i < n; i++) {
        char path[WP_PATH_MAX];
        if (steps[i] == current) continue;
        rc = step_dir_name(path, sizeof path, save_dir, steps[i], false, err, errlen);
        if (rc == 0) rc = fs_remove_tree(path, err, errlen);
    }
    free(steps);
    return rc;
}

/* The run's tokenizer into the step directory (a plain name, checked), atomically, with the size
 * and CRC-32 the manifest lists. Every failure here is a runtime one (1): the file was
 * checked when the run started. */
const char *const ckpt_side_files[CKPT_SIDE_FILES] = {"tokenizer_config.json", "generation_config.json"};

static wp_result copy_tokenizer(const char *dir, const wp_ckpt_info *info, wp_manifest_file *f, char *err, size_t errlen) {
    const char *name = info->tokenizer_name;
    if (strcmp(name, "tokenizer.model") != 0 && strcmp(name, "tokenizer.json") != 0)
        return wp_fail(WP_FAILED, err, errlen, "checkpoint: tokenizer name '%s' is not tokenizer.model or tokenizer.json", name);
    if (!info->tokenizer_data || info->tokenizer_size == 0)
        return wp_fail(WP_FAILED, err, errlen, "checkpoint: tokenizer %s without its bytes", name);
    char path[WP_PATH_MAX];
    wp_result rc = fs_join(path, sizeof path, dir, name, err, errlen);
    if (rc == 0) rc = fs_write_file_atomic(path, info->tokenizer_data, info->tokenizer_size, err, errlen);
    for (int i = 0; rc == 0 && i < CKPT_SIDE_FILES; i++) {
        if (!info->side_data[i]) continue;
        rc = fs_join(path, sizeof path, dir, ckpt_side_files[i], err, errlen);
        if (rc == 0) rc = fs_write_file_atomic(path, info->side_data[i], info->side_size[i], err, errlen);
    }
    if (rc) return 1;
    snprintf(f->name, sizeof f->name, "%s", name);
    f->size = info->tokenizer_size;
    f->crc = fs_crc32(0, info->tokenizer_data, info->tokenizer_size);
    return 0;
}

static wp_result point_latest(const char *save_dir, int64_t step, char *err, size_t errlen) {
    char path[WP_PATH_MAX], text[64];
    wp_result rc = fs_join(path, sizeof path, save_dir, "latest", err, errlen);
    snprintf(text, sizeof text, "step-%" PRId64 "\n", step);
    if (rc == 0) rc = fs_write_file_atomic(path, text, strlen(text), err, errlen);
    return rc;
}

wp_result ckpt_commit(const char *save_dir, int64_t step, int nranks, const wp_ckpt_info *info, const wp_ckpt_keep *keep,
                char *err, size_t errlen) {
    char tmp[WP_PATH_MAX], final[WP_PATH_MAX], manifest[WP_PATH_MAX];
    wp_result rc = step_dir_name(tmp, sizeof tmp, save_dir, step, true, err, errlen);
    if (rc == 0) rc = step_dir_name(final, sizeof final, save_dir, step, false, err, errlen);
    if (rc == 0) rc = fs_join(manifest, sizeof manifest, tmp, "manifest.json", err, errlen);
    if (rc) return rc;
    if (nranks < 1) return wp_fail(WP_FAILED, err, errlen, "checkpoint: %d ranks", nranks);
    wp_manifest_file *files = calloc((size_t)nranks, sizeof *files);
    if (!files) return wp_fail(WP_FAILED, err, errlen, "checkpoint: out of memory");
    for (int r = 0; rc == 0 && r < nranks; r++) rc = read_receipt(tmp, r, info->optimizer_step, &files[r], err, errlen);
    wp_ckpt_info in = *info;
    in.step = step;
    in.nranks = nranks;
    if (rc == 0) rc = remove_strays(tmp, nranks, err, errlen);
    wp_manifest_file tok = {0};
    bool has_tok = info->tokenizer_name[0] != '\0';
    if (rc == 0 && has_tok) rc = copy_tokenizer(tmp, info, &tok, err, errlen);
    if (rc == 0) rc = manifest_write(manifest, &in, files, nranks, has_tok ? &tok : NULL, err, errlen);
    free(files);
    if (rc == 0) rc = fs_fsync_dir(tmp, err, errlen);
    /* the same step saved again (a stop requested at a save step, a run resumed from before it):
     * the new copy takes the finished one's place without a moment where step-K is missing or
     * partial (was: the old one removed first, so a crash there left `latest` naming nothing) */
    if (rc == 0) rc = fs_replace_dir(tmp, final, err, errlen);
    if (rc == 0) rc = point_latest(save_dir, step, err, errlen);
    wp_ckpt_keep all = {.keep_last = 0, .resumed_from = -1};
    if (rc == 0) rc = prune(save_dir, step, keep ? keep : &all, err, errlen);
    return rc;
}
