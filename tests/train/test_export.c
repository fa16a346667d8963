/* Export and import: a checkpoint written by 2 ranks is exported as Hugging Face safetensors
 * (fp32, fp16, bf16), checked by an independent json+numpy reader, and imported back under
 * another chunking: import(export(x)) == x bit for bit in fp32, == round(x) otherwise. Also a
 * sharded directory with an index and tied embeddings, and refusals naming flag and key.
 * argv: [python3 check_export.py] (the python check is skipped, saying so, when absent). */
#include <dirent.h>
#include <sys/wait.h>

#include "adapters.h"
#include "checkpoint.h"
#include "hf.h"
#include "safetensors.h"
#include "tu.h"

static char dir[256], err[2048];
static wp_kern *kern;
static wp_layout Lw;         /* writers' layout: 2 chunks */
static wp_optim *writers[2];
static const char *python, *checker;

static wp_optim *new_optim(const wp_layout *L, const int *chunks, int n) {
    wp_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    wp_optim *o = optim_create(layout_optim_model(L), kern, chunks, n, &hp, err, sizeof err);
    CHECK(o, "optim_create: %s", err);
    return o;
}

static void make_checkpoint(const char *save) {
    wp_model_cfg c;
    tu_model(&c, 3, 24, 4, 2, 44, 53);
    c.precision = WP_PREC_BF16;
    model_cfg_even_chunks(&c, 2);
    layout_build(&c, &Lw, err, sizeof err);
    uint64_t rng = 31;
    for (int r = 0; r < 2; r++) {
        writers[r] = new_optim(&Lw, &r, 1);
        size_t n = Lw.chunk_numel[r];
        float *m = malloc(n * 4);
        for (size_t j = 0; j < n; j++) m[j] = (float)(0.3 * tu_normal(&rng));
        optim_set(writers[r], r, WP_OPT_MASTER, m);
        free(m);
        EXPECT(ckpt_write_shard(save, 12, r, writers[r], err, sizeof err) == 0, "shard: %s", err);
    }
    wp_ckpt_info in = {.step = 12, .loss_scale = 1, .seed = 1, .micro_batches = 2, .nranks = 2, .cfg = Lw.cfg};
    EXPECT(ckpt_commit(save, 12, 2, &in, NULL, err, sizeof err) == 0, "commit: %s", err);
}

static float master_of(const char *name, size_t j) {
    const wp_param *p = layout_find(&Lw, name);
    float *buf = malloc(Lw.chunk_numel[p->chunk] * 4);
    optim_get(writers[p->chunk], p->chunk, WP_OPT_MASTER, buf);
    float v = buf[p->offset + j];
    free(buf);
    return v;
}

static void python_check_sharded(const char *out, const char *step_dir, int64_t max_bytes);
static void python_check(const char *out, const char *step_dir) { python_check_sharded(out, step_dir, 0); }
static void python_check_sharded(const char *out, const char *step_dir, int64_t max_bytes) {
    if (!python || !checker) {
        printf("python check skipped: no python3 given\n");
        return;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s' %lld", python, checker, out, step_dir, (long long)max_bytes);
    int st = system(cmd);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc == 77) printf("python check skipped (numpy missing)\n");
    else EXPECT(rc == 0, "%s exited %d", cmd, rc);
}

static void default_opts(wp_opts *o) {
    char *argv[] = {"train"};
    cli_parse(1, argv, o, err, sizeof err);
}

/* --init-from's two steps: config.json read, then applied to the flags. */
static int apply_config(const char *dir, wp_opts *o) {
    hf_config c;
    int rc = hf_read_config(dir, &c, err, sizeof err);
    return rc ? rc : (int)hf_config_apply(&c, o, err, sizeof err);
}

/* Import under 3 chunks on one owner; every master must equal round(original, dtype). */
static void import_and_compare(const char *out, wp_dtype dtype) {
    static wp_opts o;
    default_opts(&o);
    int rc = apply_config(out, &o);
    EXPECT(rc == 0, "config apply: %s", err);
    EXPECT(o.num_layers == 3 && o.hidden_size == 24 && o.ffn_hidden_size == 44 && o.num_attention_heads == 4 &&
               o.num_query_groups == 2 && o.vocab_size == 53 && o.norm_eps == 1e-5 && o.rope_theta == 10000,
           "config.json did not fill the model flags");
    o.num_chunks = 3;
    o.set[FLAG_num_chunks] = true;
    wp_model_cfg c;
    wp_layout L;
    EXPECT(model_cfg_from_opts(&o, 1, &c, err, sizeof err) == 0 && layout_build(&c, &L, err, sizeof err) == 0, "cfg: %s", err);
    int all[3] = {2, 0, 1};
    wp_optim *imp = new_optim(&L, all, 3);
    rc = hf_load_masters(out, imp, err, sizeof err);
    EXPECT(rc == 0, "import %s: %s", wp_dtype_name(dtype), err);
    int bad = 0;
    for (int ch = 0; ch < 3; ch++) {
        float *buf = malloc(L.chunk_numel[ch] * 4);
        optim_get(imp, ch, WP_OPT_MASTER, buf);
        int first, end;
        layout_chunk_params(&L, ch, &first, &end);
        for (int p = first; p < end; p++)
            for (size_t j = 0; j < (size_t)L.params[p].rows * L.params[p].cols; j += 7)
                bad += buf[L.params[p].offset + j] != wp_round_to(master_of(L.params[p].name, j), dtype);
        optim_get(imp, ch, WP_OPT_EXP_AVG, buf);
        for (size_t j = 0; j < L.chunk_numel[ch]; j++) bad += buf[j] != 0;
        free(buf);
    }
    EXPECT(bad == 0, "import(export(x)) in %s: %d values differ", wp_dtype_name(dtype), bad);
    EXPECT(optim_steps(imp) == 0, "imported weights start at step 0");
    optim_destroy(imp);
    layout_free(&L);
    /* a flag the user set that disagrees is refused */
    default_opts(&o);
    o.hidden_size = 32;
    o.set[FLAG_hidden_size] = true;
    rc = apply_config(out, &o);
    EXPECT_REFUSED(rc, err, "--hidden-size", "hidden_size", "config.json");
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) perror(path);
}

static int count_entries(const char *path, const char *prefix) {
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d) closedir(d);
    return n;
}

/* Shards of at most 1500 bytes (the 53x24 fp32 embedding, 5088 bytes, alone in one): the index,
 * the independent reader, our import; the tokenizer file beside the checkpoint is copied; a
 * second export replaces the first whole (no stale shard); a directory holding anything an
 * export does not write is refused and left alone, and no OUT_DIR.tmp stays behind. */
static void test_sharded_export(const wp_ckpt *ck, const char *step_dir) {
    char out[600], p[700], tok[700];
    snprintf(out, sizeof out, "%s/hf-sharded", dir);
    snprintf(tok, sizeof tok, "%s/tokenizer.json", step_dir);
    write_file(tok, "{\"model\": {\"type\": \"BPE\"}}");
    hf_export_opts x = {.dtype = WP_F32, .max_shard_bytes = 1500, .max_pos = 0};
    EXPECT(hf_export_with(ck, out, &x, err, sizeof err) == 0, "sharded export: %s", err);
    int shards = count_entries(out, "model-");
    EXPECT(shards > 2, "%d shards", shards);
    snprintf(p, sizeof p, "%s/model-00001-of-%05d.safetensors", out, shards);
    EXPECT(fs_exists(p), "%s missing", p);
    snprintf(p, sizeof p, "%s/tokenizer.json", out);
    EXPECT(fs_exists(p), "the checkpoint's tokenizer.json was not copied");
    python_check_sharded(out, step_dir, x.max_shard_bytes);
    import_and_compare(out, WP_F32);
    unlink(tok);
    x.max_shard_bytes = HF_DEFAULT_MAX_SHARD;
    EXPECT(hf_export_with(ck, out, &x, err, sizeof err) == 0, "export over an export: %s", err);
    EXPECT(count_entries(out, "model-") == 0 && count_entries(out, "model.safetensors") == 1 && !fs_exists(p),
           "the old export's shards or tokenizer survived the new export");
    snprintf(p, sizeof p, "%s/notes.txt", out);
    write_file(p, "mine");
    int rc = hf_export_with(ck, out, &x, err, sizeof err);
    EXPECT_REFUSED(rc, err, "notes.txt", "hf-sharded");
    EXPECT(fs_exists(p), "the refused export touched the directory");
    snprintf(p, sizeof p, "%s.tmp", out);
    EXPECT(!fs_exists(p), "%s left behind", p);
    x.max_shard_bytes = 0;
    EXPECT_REFUSED(hf_export_with(ck, out, &x, err, sizeof err), err, "--max-shard-size", "0");
}

static void test_export(void) {
    char save[512], step_dir[600];
    snprintf(save, sizeof save, "%s/ckpt", dir);
    make_checkpoint(save);
    snprintf(step_dir, sizeof step_dir, "%s/step-12", save);
    wp_ckpt *ck;
    if (ckpt_open(&ck, step_dir, err, sizeof err)) {
        EXPECT(0, "open: %s", err);
        return;
    }
    const wp_dtype types[3] = {WP_F32, WP_F16, WP_BF16};
    for (int t = 0; t < 3; t++) {
        char out[600];
        snprintf(out, sizeof out, "%s/hf-%s", dir, wp_dtype_name(types[t]));
        EXPECT(hf_export(ck, out, types[t], err, sizeof err) == 0, "export: %s", err);
        python_check(out, step_dir);
        import_and_compare(out, types[t]);
    }
    test_sharded_export(ck, step_dir);
    ckpt_close(ck);
}

/* Two shards named by an index, no lm_head, tie_word_embeddings: the head is the embedding. */
static void test_sharded_tied(void) {
    char hf[512], p[700];
    snprintf(hf, sizeof hf, "%s/tied", dir);
    fs_mkdirs(hf, err, sizeof err);
    char index[8192] = "{\"metadata\": {}, \"weight_map\": {";
    bool first = true;
    for (int part = 0; part < 2; part++) {
        st_desc d[64];
        int n = 0;
        for (int i = 0; i < Lw.n_params; i++) {
            const wp_param *q = &Lw.params[i];
            if (strcmp(q->name, "lm_head.weight") == 0 || (i < Lw.n_params / 2) != (part == 0)) continue;
            snprintf(d[n].name, sizeof d[n].name, "%s", q->name);
            d[n].dtype = WP_F32;
            d[n].ndim = q->cols == 1 ? 1 : 2;
            d[n].shape[0] = q->rows;
            d[n].shape[1] = q->cols;
            size_t len = strlen(index);
            snprintf(index + len, sizeof index - len, "%s\"%s\": \"part-%d.safetensors\"", first ? "" : ", ", q->name, part);
            first = false;
            n++;
        }
        snprintf(p, sizeof p, "%s/part-%d.safetensors", hf, part);
        st_writer *w;
        EXPECT(st_writer_open(&w, p, d, n, NULL, NULL, 0, err, sizeof err) == 0, "writer: %s", err);
        for (int k = 0; k < n; k++) {
            const wp_param *q = layout_find(&Lw, d[k].name);
            float *buf = malloc(Lw.chunk_numel[q->chunk] * 4);
            optim_get(writers[q->chunk], q->chunk, WP_OPT_MASTER, buf);
            st_writer_put(w, buf + q->offset, (size_t)q->rows * q->cols * 4, err, sizeof err);
            free(buf);
        }
        EXPECT(st_writer_finish(w, NULL, NULL, err, sizeof err) == 0, "finish: %s", err);
    }
    strcat(index, "}}");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", hf);
    write_file(p, index);
    snprintf(p, sizeof p, "%s/config.json", hf);
    write_file(p, "{\"model_type\": \"llama\", \"hidden_size\": 24, \"intermediate_size\": 44, \"num_hidden_layers\": 3,"
                  " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 53, \"rms_norm_eps\": 1e-05,"
                  " \"tie_word_embeddings\": true}");
    int all[2] = {0, 1};
    wp_optim *o = new_optim(&Lw, all, 2);
    int rc = hf_load_masters(hf, o, err, sizeof err);
    EXPECT(rc == 0, "sharded import: %s", err);
    const wp_param *head = layout_find(&Lw, "lm_head.weight"), *emb = layout_find(&Lw, "model.embed_tokens.weight");
    float *hb = malloc(Lw.chunk_numel[head->chunk] * 4), *eb = malloc(Lw.chunk_numel[emb->chunk] * 4);
    optim_get(o, head->chunk, WP_OPT_MASTER, hb);
    optim_get(writers[emb->chunk], emb->chunk, WP_OPT_MASTER, eb);
    EXPECT(memcmp(hb + head->offset, eb + emb->offset, (size_t)head->rows * head->cols * 4) == 0, "tied head != embedding");
    optim_get(o, 0, WP_OPT_MASTER, eb);
    EXPECT(eb[Lw.params[3].offset + 5] == master_of(Lw.params[3].name, 5), "sharded import: values");
    free(hb), free(eb);
    /* what the model does not implement, or a missing config, is refused by name */
    write_file(p, "{\"model_type\": \"llama\", \"attention_bias\": true}");
    static wp_opts op;
    default_opts(&op);
    rc = apply_config(hf, &op);
    EXPECT_REFUSED(rc, err, "config.json", "attention_bias");
    unlink(p);
    rc = hf_load_masters(hf, o, err, sizeof err);
    EXPECT_REFUSED(rc, err, "config.json", "missing");
    optim_destroy(o);
}

int main(int argc, char **argv) {
    if (argc == 3) {
        python = argv[1];
        checker = argv[2];
    }
    kern = tu_cpu_kern();
    tu_scratch(dir, sizeof dir, "export");
    test_export();
    test_sharded_tied();
    for (int r = 0; r < 2; r++) optim_destroy(writers[r]);
    layout_free(&Lw);
    kern_destroy(kern);
    tu_cleanup(dir);
    return check_result("train/export");
}
