/* weipipe eval end to end: a checkpoint with non-trivial random weights (std 0.3, so the loss
 * depends on every weight), `weipipe eval` on the committed validation shard, the export read
 * by scripts/hf_check.py (transformers when installed, else a plain-torch fp64 Llama) on the
 * same tokens: the two mean losses must agree to 1e-4. Also eval's refusals (exit 2).
 * argv: WEIPIPE DATA_SHARD [PYTHON HF_CHECK_PY] */
#include <sys/wait.h>

#include "checkpoint.h"
#include "hf.h"
#include "tu.h"

static char dir[256], err[2048];
static const char *weipipe, *data;

/* Runs a command; its exit status, and its stdout+stderr in out. */
static int run(const char *cmd, char *out, size_t len) {
    char full[4096];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void make_checkpoint(const char *save, const wp_rope_scaling *sc) {
    wp_model_cfg c;
    tu_model(&c, 4, 64, 4, 2, 160, 256); /* configs/tiny.ini's shape */
    c.seq = 32;
    if (sc) c.rope_scaling = *sc;
    model_cfg_even_chunks(&c, 2);
    wp_layout L;
    layout_build(&c, &L, err, sizeof err);
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    wp_kern *k = kern_create(&ko, err, sizeof err);
    int all[2] = {0, 1};
    wp_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    wp_optim *o = optim_create(layout_optim_model(&L), k, all, 2, &hp, err, sizeof err);
    uint64_t rng = 8;
    for (int ch = 0; ch < 2; ch++) {
        float *m = malloc(L.chunk_numel[ch] * 4);
        int first, end;
        layout_chunk_params(&L, ch, &first, &end);
        for (int p = first; p < end; p++)
            for (size_t j = 0; j < (size_t)L.params[p].rows * L.params[p].cols; j++)
                m[L.params[p].offset + j] = (float)(L.params[p].kind == WP_PARAM_NORM ? 1 + 0.2 * tu_normal(&rng) : 0.3 * tu_normal(&rng));
        optim_set(o, ch, WP_OPT_MASTER, m);
        free(m);
    }
    EXPECT(ckpt_write_shard(save, 3, 0, o, err, sizeof err) == 0, "shard: %s", err);
    wp_ckpt_info in = {.step = 3, .loss_scale = 1024, .seed = 1, .micro_batches = 1, .nranks = 1, .cfg = L.cfg};
    EXPECT(ckpt_commit(save, 3, 1, &in, NULL, err, sizeof err) == 0, "commit: %s", err);
    optim_destroy(o);
    kern_destroy(k);
    layout_free(&L);
}

static double eval_loss(const char *ckpt, const char *extra) {
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' eval '%s' --data '%s' --seq-length 32 --batches 8 %s", weipipe, ckpt, data, extra);
    int rc = run(cmd, out, sizeof out);
    double loss = NAN;
    const char *at = strstr(out, "loss ");
    EXPECT(rc == 0 && at && sscanf(at, "loss %lf", &loss) == 1, "%s: exit %d: %s", cmd, rc, out);
    printf("%s", out);
    return loss;
}

static void expect_exit2(const char *args, const char *culprit) {
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' eval %s", weipipe, args);
    int rc = run(cmd, out, sizeof out);
    EXPECT(rc == 2 && strstr(out, culprit), "'%s': exit %d, '%s' (want 2 naming '%s')", args, rc, out, culprit);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_eval WEIPIPE DATA [PYTHON HF_CHECK]\n");
        return 1;
    }
    weipipe = argv[1];
    data = argv[2];
    tu_scratch(dir, sizeof dir, "eval");
    char save[512], ckpt[600], out_dir[600];
    snprintf(save, sizeof save, "%s/run", dir);
    snprintf(ckpt, sizeof ckpt, "%s/step-3", save);
    make_checkpoint(save, NULL);
    double fp32 = eval_loss(save, "--precision fp32"); /* a save directory means its latest */
    double mixed = eval_loss(ckpt, "");
    EXPECT(isfinite(fp32) && fp32 > 1.0 && fp32 < 50.0, "loss %g is not a plausible cross-entropy", fp32);
    /* the checkpoint's own precision rounds the weights to fp16: close, not equal */
    EXPECT(fabs(mixed - fp32) < 1e-2 && mixed != fp32, "fp16 weights: loss %.8f vs fp32 %.8f", mixed, fp32);

    wp_ckpt *ck;
    snprintf(out_dir, sizeof out_dir, "%s/hf", dir);
    if (ckpt_open(&ck, ckpt, err, sizeof err) == 0) {
        EXPECT(hf_export(ck, out_dir, WP_F32, err, sizeof err) == 0, "export: %s", err);
        ckpt_close(ck);
    }
    if (argc == 5) {
        char cmd[4096], out[8192];
        snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' --data '%s' --seq-length 32 --batches 8 --ckpt '%s' --weipipe '%s' --tolerance 1e-4",
                 argv[3], argv[4], out_dir, data, ckpt, weipipe);
        int rc = run(cmd, out, sizeof out);
        printf("%s", out);
        if (rc == 77) printf("hf_check skipped: torch or numpy missing\n");
        else EXPECT(rc == 0, "hf_check exited %d", rc);
    } else {
        printf("hf_check skipped: no python3 given\n");
    }

    /* The same weights under Llama 3.x rope scaling, exported in shards of at most 20000 bytes
     * (the 65536-byte embedding alone in one): eval reads the scaling from the checkpoint, the
     * reference from config.json's rope_scaling and the index. Head dim 16, original 64: pairs
     * 0 kept, 1-2 smoothed, 3-7 divided by 8. */
    wp_rope_scaling sc = {8, 1, 4, 64};
    char save3[600], ckpt3[700], out3[600];
    snprintf(save3, sizeof save3, "%s/run-llama3", dir);
    snprintf(ckpt3, sizeof ckpt3, "%s/step-3", save3);
    snprintf(out3, sizeof out3, "%s/hf-llama3", dir);
    make_checkpoint(save3, &sc);
    double scaled = eval_loss(save3, "--precision fp32");
    EXPECT(fabs(scaled - fp32) > 1e-3, "llama3 scaling changed the loss by only %.2e (%.8f vs %.8f)", fabs(scaled - fp32),
           scaled, fp32);
    if (ckpt_open(&ck, ckpt3, err, sizeof err) == 0) {
        hf_export_opts x = {.dtype = WP_F32, .max_shard_bytes = 20000, .max_pos = 0};
        EXPECT(hf_export_with(ck, out3, &x, err, sizeof err) == 0, "sharded export: %s", err);
        ckpt_close(ck);
    }
    char idx[700];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", out3);
    EXPECT(access(idx, F_OK) == 0, "the sharded export has no %s", idx);
    if (argc == 5) {
        char cmd[4096], out[8192];
        snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' --data '%s' --seq-length 32 --batches 8 --ckpt '%s' --weipipe '%s' --tolerance 1e-4",
                 argv[3], argv[4], out3, data, ckpt3, weipipe);
        int rc = run(cmd, out, sizeof out);
        printf("%s", out);
        if (rc == 77) printf("hf_check (llama3, sharded) skipped: torch or numpy missing\n");
        else EXPECT(rc == 0, "hf_check (llama3, sharded) exited %d", rc);
    }

    char args[2048], tmp[700];
    snprintf(args, sizeof args, "'%s'", ckpt);
    expect_exit2(args, "--data");
    snprintf(args, sizeof args, "'%s' --data '%s' --seq-length 32 --batches 100000", ckpt, data);
    expect_exit2(args, "--batches");
    snprintf(tmp, sizeof tmp, "%s/step-4.tmp", save);
    rename(ckpt, tmp);
    snprintf(args, sizeof args, "'%s' --data '%s'", tmp, data);
    expect_exit2(args, ".tmp");
    snprintf(args, sizeof args, "'%s/nothing' --data '%s'", dir, data);
    expect_exit2(args, "nothing");
    tu_cleanup(dir);
    return check_result("train/eval");
}
