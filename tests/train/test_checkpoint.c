/* Checkpoints: 4 ranks (one chunk each) write their shards concurrently and rank 0 commits;
 * the checkpoint loads under other layouts (2 uneven chunks on 1 owner, 3 chunks on 3 owners)
 * with bit-identical masters, moments and step count. Every damage is refused naming the file
 * and what is wrong: a flipped byte, a truncated shard, a missing or broken manifest, another
 * model shape, a .tmp directory. keep-last prunes; a missing rank's shard stops the commit. */
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "tu.h"

static char dir[256], err[2048];
static wp_kern *kern;
static wp_layout L4;        /* the writers' layout: 4 chunks */
static wp_optim *writers[4];

static wp_model_cfg shape(void) {
    wp_model_cfg c;
    tu_model(&c, 4, 24, 4, 2, 52, 61); /* grouped-query heads, odd vocabulary and widths */
    return c;
}

static wp_optim *new_optim(const wp_layout *L, const int *chunks, int n) {
    wp_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    wp_optim *o = optim_create(layout_optim_model(L), kern, chunks, n, &hp, err, sizeof err);
    CHECK(o, "optim_create: %s", err);
    return o;
}

/* Writers: one chunk per rank, three AdamW steps on random gradients so that masters, m and v
 * all hold distinct, non-trivial values. */
static void make_writers(void) {
    wp_model_cfg c = shape();
    model_cfg_even_chunks(&c, 4);
    CHECK(layout_build(&c, &L4, err, sizeof err) == 0, "layout: %s", err);
    uint64_t rng = 2024;
    for (int r = 0; r < 4; r++) {
        writers[r] = new_optim(&L4, &r, 1);
        optim_init_from_seed(writers[r], 5);
        size_t n = L4.chunk_numel[r];
        float *g = malloc(n * 4);
        for (int t = 0; t < 3; t++) {
            for (size_t j = 0; j < n; j++) g[j] = (float)tu_normal(&rng);
            optim_set(writers[r], r, WP_OPT_GRAD, g);
            optim_step_chunk(writers[r], r, 1e-2f, 0.5f);
        }
        free(g);
    }
}

typedef struct {
    const char *save;
    int64_t step;
    int rank;
    int rc;
    char err[512];
} shard_job;

static void *write_one(void *arg) {
    shard_job *j = arg;
    j->rc = ckpt_write_shard(j->save, j->step, j->rank, writers[j->rank], j->err, sizeof j->err);
    return NULL;
}

static wp_ckpt_info info_of(int64_t step) {
    wp_ckpt_info in = {.step = step, .optimizer_step = 3, .loss_scale = 2048, .loss_scale_clean_steps = 17, .seed = 5,
                       .micro_batches = 8, .nranks = 4, .cfg = L4.cfg};
    return in;
}

/* All 4 ranks at once (threads stand in for processes), then the commit. */
static int save(const char *save_dir, int64_t step, int keep_last) {
    pthread_t th[4];
    shard_job jobs[4];
    for (int r = 0; r < 4; r++) {
        jobs[r] = (shard_job){.save = save_dir, .step = step, .rank = r};
        pthread_create(&th[r], NULL, write_one, &jobs[r]);
    }
    for (int r = 0; r < 4; r++) {
        pthread_join(th[r], NULL);
        EXPECT(jobs[r].rc == 0, "rank %d shard: %s", r, jobs[r].err);
    }
    wp_ckpt_info in = info_of(step);
    int rc = ckpt_commit(save_dir, step, 4, &in, &(wp_ckpt_keep){.keep_last = keep_last, .resumed_from = -1}, err, sizeof err);
    EXPECT(rc == 0, "commit step %lld: %s", (long long)step, err);
    return rc;
}

/* Every buffer of every owned tensor, by name, against the writers'; returns how many. */
static int compare_by_name(wp_optim *o, const char *what) {
    const wp_layout *L = layout_of_optim(o);
    int diff = 0, compared = 0;
    for (int i = 0; i < optim_n_owned(o); i++) {
        int c = optim_owned_chunk(o, i);
        size_t n = L->chunk_numel[c];
        float *got = malloc(n * 4), *src = malloc(L4.total_numel * 4);
        for (int b = 0; b < 3; b++) {
            optim_get(o, c, (wp_optim_buf)b, got);
            int first, end;
            layout_chunk_params(L, c, &first, &end);
            for (int p = first; p < end; p++) {
                const wp_param *mine = &L->params[p], *theirs = layout_find(&L4, mine->name);
                optim_get(writers[theirs->chunk], theirs->chunk, (wp_optim_buf)b, src);
                size_t cnt = (size_t)mine->rows * mine->cols;
                diff += memcmp(got + mine->offset, src + theirs->offset, cnt * 4) != 0;
                compared++;
            }
        }
        free(got), free(src);
    }
    EXPECT(diff == 0, "%s: %d of %d tensors differ", what, diff, compared);
    EXPECT(optim_steps(o) == 3, "%s: step count %lld, want 3", what, (long long)optim_steps(o));
    return compared;
}

static void load_under(const char *step_dir, const char *chunk_layers, int owners) {
    wp_model_cfg c = shape();
    int n = 0;
    for (const char *p = chunk_layers; *p; p++)
        if (*p >= '0' && *p <= '9') c.chunk_layers[n++] = *p - '0';
    c.n_chunks = n;
    wp_layout L;
    EXPECT(layout_build(&c, &L, err, sizeof err) == 0, "layout %s: %s", chunk_layers, err);
    wp_ckpt *ck;
    int rc = ckpt_open(&ck, step_dir, err, sizeof err);
    EXPECT(rc == 0, "open: %s", err);
    if (rc) return;
    int loaded = 0, compared = 0;
    for (int r = 0; r < owners; r++) {
        int mine[8], k = 0;
        for (int ch = 0; ch < n; ch++)
            if (ch % owners == r) mine[k++] = ch;
        wp_optim *o = new_optim(&L, mine, k);
        rc = ckpt_load_optim(ck, o, err, sizeof err);
        EXPECT(rc == 0, "load %s rank %d: %s", chunk_layers, r, err);
        char what[64];
        snprintf(what, sizeof what, "chunks %s, owner %d of %d", chunk_layers, r, owners);
        compared += compare_by_name(o, what);
        loaded += optim_n_owned(o);
        optim_destroy(o);
    }
    EXPECT(loaded == n && compared == 3 * L4.n_params, "%d of %d chunks loaded, %d of %d tensors compared", loaded, n,
           compared, 3 * L4.n_params);
    const wp_ckpt_info *in = ckpt_info(ck);
    EXPECT(in->step == 7 && in->optimizer_step == 3 && in->loss_scale == 2048 && in->loss_scale_clean_steps == 17 &&
               in->seed == 5 && in->micro_batches == 8 && in->nranks == 4 && in->cfg.h == 24 && in->cfg.n_kv_heads == 2 &&
               in->cfg.precision == WP_PREC_MIXED && in->cfg.n_chunks == 4,
           "manifest info did not round-trip");
    ckpt_close(ck);
    layout_free(&L);
}

static void test_reshard(void) {
    char save_dir[512], step_dir[600];
    snprintf(save_dir, sizeof save_dir, "%s/run", dir);
    save(save_dir, 7, 3);
    int rc = ckpt_resolve(save_dir, NULL, step_dir, sizeof step_dir, err, sizeof err);
    EXPECT(rc == 0 && strstr(step_dir, "step-7"), "resolve save dir -> latest: %s (%s)", step_dir, err);
    load_under(step_dir, "3,1", 1);
    load_under(step_dir, "1,2,1", 3);
    load_under(step_dir, "4", 1);
    rc = ckpt_resolve("auto", save_dir, step_dir, sizeof step_dir, err, sizeof err);
    EXPECT(rc == 0 && strstr(step_dir, "run/step-7"), "resolve auto: '%s'", step_dir);
    char empty[512];
    snprintf(empty, sizeof empty, "%s/fresh", dir);
    rc = ckpt_resolve("auto", empty, step_dir, sizeof step_dir, err, sizeof err);
    EXPECT(rc == 0 && step_dir[0] == '\0', "auto without a checkpoint must mean 'start fresh'");
    rc = ckpt_resolve("auto", "", step_dir, sizeof step_dir, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--save");
}

/* A damaged copy of a fresh checkpoint must be refused with the file and field named. */
static void damaged(const char *tag, void (*damage)(const char *step_dir), const char *f1, const char *f2) {
    char save_dir[512], step_dir[600];
    snprintf(save_dir, sizeof save_dir, "%s/%s", dir, tag);
    save(save_dir, 7, 0);
    snprintf(step_dir, sizeof step_dir, "%s/step-7", save_dir);
    damage(step_dir);
    wp_ckpt *ck = NULL;
    int rc = ckpt_resolve(step_dir, NULL, step_dir, sizeof step_dir, err, sizeof err);
    if (rc == 0) rc = ckpt_open(&ck, step_dir, err, sizeof err);
    EXPECT_REFUSED(rc, err, f1, f2);
    EXPECT(ck == NULL, "%s: a refused checkpoint was opened", tag);
}

static void flip_byte(const char *d) {
    char p[700];
    snprintf(p, sizeof p, "%s/rank-00002.safetensors", d);
    FILE *f = fopen(p, "r+b");
    struct stat st;
    stat(p, &st);
    fseek(f, st.st_size * 3 / 4, SEEK_SET);
    int c = fgetc(f);
    fseek(f, st.st_size * 3 / 4, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}
static void truncate_shard(const char *d) {
    char p[700];
    snprintf(p, sizeof p, "%s/rank-00001.safetensors", d);
    struct stat st;
    stat(p, &st);
    if (truncate(p, st.st_size - 100) != 0) perror("truncate");
}
static void delete_manifest(const char *d) {
    char p[700];
    snprintf(p, sizeof p, "%s/manifest.json", d);
    unlink(p);
}
static void break_manifest(const char *d) {
    char p[700];
    snprintf(p, sizeof p, "%s/manifest.json", d);
    struct stat st;
    stat(p, &st);
    if (truncate(p, st.st_size / 2) != 0) perror("truncate");
}
static void delete_shard(const char *d) {
    char p[700];
    snprintf(p, sizeof p, "%s/rank-00003.safetensors", d);
    unlink(p);
}

static void test_damage(void) {
    damaged("flip", flip_byte, "rank-00002.safetensors", "CRC-32");
    damaged("trunc", truncate_shard, "rank-00001.safetensors", "size");
    damaged("nomanifest", delete_manifest, "step-7", "no manifest.json");
    damaged("badmanifest", break_manifest, "manifest.json", "JSON");
    damaged("noshard", delete_shard, "rank-00003.safetensors", "missing");
}

static void test_shape_and_tmp(void) {
    char save_dir[512], step_dir[600], tmp_dir[600];
    snprintf(save_dir, sizeof save_dir, "%s/shape", dir);
    save(save_dir, 7, 0);
    snprintf(step_dir, sizeof step_dir, "%s/step-7", save_dir);
    wp_ckpt *ck;
    if (ckpt_open(&ck, step_dir, err, sizeof err)) return;
    wp_model_cfg c = shape();
    c.h = 32;
    c.head_dim = 8;
    wp_layout L;
    layout_build(&c, &L, err, sizeof err);
    int zero = 0;
    wp_optim *o = new_optim(&L, &zero, 1);
    int rc = ckpt_load_optim(ck, o, err, sizeof err);
    EXPECT_REFUSED(rc, err, "manifest.json", "hidden-size");
    optim_destroy(o);
    layout_free(&L);
    c = shape();
    c.n_kv_heads = 4;
    rc = ckpt_check_model(ck, &c, err, sizeof err);
    EXPECT_REFUSED(rc, err, "num-query-groups");
    ckpt_close(ck);
    /* a crash between the manifest and the rename leaves a complete-looking .tmp: never loaded */
    snprintf(tmp_dir, sizeof tmp_dir, "%s/step-9.tmp", save_dir);
    rename(step_dir, tmp_dir);
    rc = ckpt_open(&ck, tmp_dir, err, sizeof err);
    EXPECT_REFUSED(rc, err, "step-9.tmp", ".tmp");
    rc = ckpt_resolve(tmp_dir, NULL, step_dir, sizeof step_dir, err, sizeof err);
    EXPECT_REFUSED(rc, err, "step-9.tmp", "never loaded");
}

static int count_entries(const char *d, const char *prefix) {
    int n = 0;
    for (int k = 0; k < 20; k++) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s%d", d, prefix, k);
        n += fs_exists(p);
    }
    return n;
}

static void test_keep_last_and_commit_checks(void) {
    char save_dir[512], p[700];
    snprintf(save_dir, sizeof save_dir, "%s/keep", dir);
    snprintf(p, sizeof p, "%s/step-2.tmp", save_dir);
    fs_mkdirs(p, err, sizeof err); /* a stale attempt */
    for (int step = 1; step <= 5; step++) save(save_dir, step, 2);
    EXPECT(count_entries(save_dir, "step-") == 2, "keep-last 2 left %d checkpoints", count_entries(save_dir, "step-"));
    snprintf(p, sizeof p, "%s/step-4", save_dir);
    EXPECT(fs_exists(p), "step-4 was pruned");
    snprintf(p, sizeof p, "%s/step-2.tmp", save_dir);
    EXPECT(!fs_exists(p), "a stale .tmp directory survived");
    char *latest;
    size_t n;
    snprintf(p, sizeof p, "%s/latest", save_dir);
    EXPECT(fs_read_small(p, 100, &latest, &n, err, sizeof err) == 0 && strcmp(latest, "step-5\n") == 0, "latest: %s", err);
    free(latest);
    save(save_dir, 5, 2); /* the same step again replaces it */
    EXPECT(count_entries(save_dir, "step-") == 2, "re-saving step 5 left %d entries step-* (a .tmp or .old beside?)",
           count_entries(save_dir, "step-"));
    /* rank 3 never wrote its shard: no checkpoint may appear */
    for (int r = 0; r < 3; r++) EXPECT(ckpt_write_shard(save_dir, 6, r, writers[r], err, sizeof err) == 0, "shard: %s", err);
    wp_ckpt_info in = info_of(6);
    int rc = ckpt_commit(save_dir, 6, 4, &in, &(wp_ckpt_keep){.keep_last = 2, .resumed_from = -1}, err, sizeof err);
    EXPECT(rc != 0 && strstr(err, "rank 3"), "commit without rank 3's shard: rc %d, '%s'", rc, err);
    snprintf(p, sizeof p, "%s/step-6", save_dir);
    EXPECT(!fs_exists(p), "an incomplete checkpoint was committed");
}

/* fs_replace_dir, behind a re-saved step: the new directory's files take the old one's place,
 * nothing is left beside (no .tmp, no .old), and a missing target is a plain rename. */
static void test_replace_dir(void) {
    char cur[600], nxt[600], f[700];
    snprintf(cur, sizeof cur, "%s/replace/step-7", dir);
    snprintf(nxt, sizeof nxt, "%s/replace/step-7.tmp", dir);
    EXPECT(fs_mkdirs(cur, err, sizeof err) == 0 && fs_mkdirs(nxt, err, sizeof err) == 0, "mkdir: %s", err);
    snprintf(f, sizeof f, "%s/old-shard", cur);
    EXPECT(fs_write_file_atomic(f, "old", 3, err, sizeof err) == 0, "write: %s", err);
    snprintf(f, sizeof f, "%s/new-shard", nxt);
    EXPECT(fs_write_file_atomic(f, "new", 3, err, sizeof err) == 0, "write: %s", err);
    EXPECT(fs_replace_dir(nxt, cur, err, sizeof err) == 0, "fs_replace_dir over an existing step: %s", err);
    snprintf(f, sizeof f, "%s/new-shard", cur);
    EXPECT(fs_exists(f), "the new copy's file is not in place");
    snprintf(f, sizeof f, "%s/old-shard", cur);
    EXPECT(!fs_exists(f), "the old copy's file survived in place");
    snprintf(f, sizeof f, "%s.old", cur);
    EXPECT(!fs_exists(nxt) && !fs_exists(f), "the old copy was left beside (%s or %s)", nxt, f);
    EXPECT(fs_mkdirs(nxt, err, sizeof err) == 0 && fs_remove_tree(cur, err, sizeof err) == 0, "reset: %s", err);
    EXPECT(fs_replace_dir(nxt, cur, err, sizeof err) == 0 && fs_is_dir(cur) && !fs_exists(nxt),
           "fs_replace_dir onto a missing step: %s", err);
}

/* More ranks than chunks: a rank that owns nothing writes an empty shard; the commit and the
 * load still work. */
static void test_empty_rank(void) {
    char save_dir[512], step_dir[600];
    snprintf(save_dir, sizeof save_dir, "%s/empty", dir);
    wp_optim *none = new_optim(&L4, NULL, 0);
    for (int r = 0; r < 4; r++) EXPECT(ckpt_write_shard(save_dir, 1, r, writers[r], err, sizeof err) == 0, "shard: %s", err);
    EXPECT(ckpt_write_shard(save_dir, 1, 4, none, err, sizeof err) == 0, "empty shard: %s", err);
    wp_ckpt_info in = info_of(1);
    EXPECT(ckpt_commit(save_dir, 1, 5, &in, NULL, err, sizeof err) == 0, "commit with an empty rank: %s", err);
    snprintf(step_dir, sizeof step_dir, "%s/step-1", save_dir);
    wp_ckpt *ck;
    int all[4] = {0, 1, 2, 3};
    wp_optim *o = new_optim(&L4, all, 4);
    EXPECT(ckpt_open(&ck, step_dir, err, sizeof err) == 0 && ckpt_info(ck)->nranks == 5, "open: %s", err);
    EXPECT(ckpt_load_optim(ck, o, err, sizeof err) == 0, "load: %s", err);
    EXPECT(compare_by_name(o, "5 writers, one empty") == 3 * L4.n_params, "not every tensor compared");
    ckpt_close(ck);
    optim_destroy(o);
    optim_destroy(none);
}

int main(void) {
    kern = tu_cpu_kern();
    tu_scratch(dir, sizeof dir, "ckpt");
    make_writers();
    test_reshard();
    test_damage();
    test_shape_and_tmp();
    test_keep_last_and_commit_checks();
    test_replace_dir();
    test_empty_rank();
    for (int r = 0; r < 4; r++) optim_destroy(writers[r]);
    layout_free(&L4);
    kern_destroy(kern);
    tu_cleanup(dir);
    return check_result("train/checkpoint");
}
