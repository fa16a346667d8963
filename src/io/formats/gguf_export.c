/* weipipe export --format gguf: a checkpoint as one llama-architecture GGUF v3 file (gguf.h),
 * laid out as llama.cpp's convert_hf_to_gguf.py lays it out, since llama.cpp's loader and CPU
 * kernels rely on it: the llama.* hyperparameters it reads, the matrices in the file's type
 * (F32/F16/BF16) and every 1-D tensor (the norms) in F32 whatever that type (ggml's CPU binary
 * ops have no F32 activation times F16/BF16 operand: a BF16 norm aborts llama.cpp's first step),
 * under llama.cpp's names with Q and K rows permuted to its RoPE layout, each
 * tensor aligned to 32 bytes, and the checkpoint's tokenizer.json as tokenizer.ggml.* when it is
 * a byte-level BPE (else tokenizer.ggml.model "none"); llama3 rope scaling as the converter writes
 * it, the tensor rope_freqs.weight (gguf_rope.c) ahead of the weights and no rope keys; written to
 * a new OUT.tmp-XXXXXXXX and renamed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_file.h"
#include "gguf_rope.h"

#define TOK_NAME_HF "tokenizer.json" /* tokenizer.h's TOK_FILE_HF */

#define ALIGN 32

typedef gguf_buf buf;

void gguf_put(buf *b, const void *x, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t want = (b->cap + n) * 2;
        unsigned char *q = realloc(b->p, want);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = want;
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}
#define put gguf_put
void gguf_put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
void gguf_put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
void gguf_put_str(buf *b, const char *s, size_t len) {
    gguf_put_u64(b, len);
    put(b, s, len);
}
#define put_u32 gguf_put_u32
#define put_u64 gguf_put_u64
static void put_str(buf *b, const char *s) { gguf_put_str(b, s, strlen(s)); }
static void kv_u32(buf *b, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, GGUF_U32);
    put_u32(b, v);
}
static void kv_f32(buf *b, const char *k, float v) {
    put_str(b, k);
    put_u32(b, GGUF_F32);
    put(b, &v, 4);
}
static void kv_str(buf *b, const char *k, const char *v) {
    put_str(b, k);
    put_u32(b, GGUF_STRING);
    put_str(b, v);
}

static int metadata(buf *b, const wp_model_cfg *cfg, wp_dtype dtype) {
    int n = 0;
    kv_str(b, "general.architecture", "llama"), n++;
    kv_str(b, "general.name", "weipipe"), n++;
    kv_u32(b, "general.alignment", ALIGN), n++;
    /* llama.cpp's LLAMA_FTYPE: all F32 0, mostly F16 1, mostly BF16 32 */
    kv_u32(b, "general.file_type", dtype == WP_F32 ? 0 : dtype == WP_F16 ? 1 : 32), n++;
    kv_u32(b, "llama.block_count", (uint32_t)cfg->n_layers), n++;
    kv_u32(b, "llama.context_length", (uint32_t)hf_default_max_positions(cfg)), n++;
    kv_u32(b, "llama.embedding_length", (uint32_t)cfg->h), n++;
    kv_u32(b, "llama.feed_forward_length", (uint32_t)cfg->ffn), n++;
    kv_u32(b, "llama.attention.head_count", (uint32_t)cfg->n_heads), n++;
    kv_u32(b, "llama.attention.head_count_kv", (uint32_t)cfg->n_kv_heads), n++;
    kv_f32(b, "llama.attention.layer_norm_rms_epsilon", (float)cfg->norm_eps), n++;
    kv_f32(b, "llama.rope.freq_base", (float)cfg->rope_theta), n++;
    kv_u32(b, "llama.rope.dimension_count", (uint32_t)cfg->head_dim), n++;
    kv_u32(b, "llama.vocab_size", (uint32_t)cfg->vocab), n++;
    if (cfg->has_bos) kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)cfg->bos_id), n++;
    if (cfg->has_eos) kv_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)cfg->eos_id), n++;
    return n;
}

/* The checkpoint's tokenizer.json as tokenizer.ggml.* when it is a byte-level BPE (gguf_tokenizer.c),
 * its token list padded to the model's vocabulary (llama.cpp sizes the embedding by the list);
 * any other tokenizer, or none, as model "none", which llama.cpp requires the key for and then
 * runs on ids alone with llama.vocab_size dummy tokens (the converter's _set_vocab_none). */
static wp_result tokenizer_kvs(const wp_ckpt *c, const wp_model_cfg *cfg, buf *b, int *n, char *err, size_t errlen) {
    const char *tok = ckpt_tokenizer(c);
    size_t len = tok ? strlen(tok) : 0, name = strlen(TOK_NAME_HF);
    int before = *n;
    if (tok && len >= name && strcmp(tok + len - name, TOK_NAME_HF) == 0)
        WP_TRY(gguf_tokenizer_kvs(tok, (size_t)cfg->vocab, b, n, err, errlen));
    if (*n == before) kv_str(b, "tokenizer.ggml.model", "none"), (*n)++;
    return 0;
}

/* The tensor's type in the file: F32 for a 1-D tensor (see the top), else the file's. */
static uint32_t tensor_type(const wp_param *p, wp_dtype dtype) {
    if (p->cols == 1 || dtype == WP_F32) return GGML_F32;
    return dtype == WP_F16 ? GGML_F16 : GGML_BF16;
}
static size_t type_size(uint32_t type) { return type == GGML_F32 ? 4 : 2; }

static bool exported(const wp_model_cfg *cfg, const wp_param *p) { return !(cfg->tied && strcmp(p->name, "lm_head.weight") == 0); }

/* The inverse of gguf_import.c's unpermute: row i*D/2 + j of each head goes to 2j + i. */
static void permute(const float *src, float *dst, int heads, int hd, int cols) {
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < hd / 2; j++)
                memcpy(dst + ((size_t)h * hd + 2 * j + i) * cols, src + ((size_t)h * hd + i * hd / 2 + j) * cols,
                       (size_t)cols * sizeof *dst);
}

/* One tensor: the master read, permuted when Q or K, converted to its type, padded. */
static wp_result write_tensor(int fd, const char *tmp, const wp_ckpt *c, const wp_layout *L, const wp_param *p, wp_dtype dtype,
                        float *a, float *b, char *err, size_t errlen) {
    size_t n = (size_t)p->rows * p->cols;
    uint32_t type = tensor_type(p, dtype);
    WP_TRY(ckpt_read_master(c, p, a, err, errlen));
    const float *src = a;
    if (strstr(p->name, "self_attn.q_proj") || strstr(p->name, "self_attn.k_proj")) {
        permute(a, b, strstr(p->name, "q_proj") ? L->cfg.n_heads : L->cfg.n_kv_heads, L->cfg.head_dim, p->cols);
        src = b;
    }
    unsigned char *out = (unsigned char *)(src == a ? b : a); /* the other buffer, big enough for fp32 */
    for (size_t i = 0; i < n; i++) {
        if (type == GGML_F32) memcpy(out + 4 * i, &src[i], 4);
        else {
            uint16_t h = type == GGML_F16 ? wp_f32_to_f16(src[i]) : wp_f32_to_bf16(src[i]);
            memcpy(out + 2 * i, &h, 2);
        }
    }
    size_t bytes = n * type_size(type), pad = (ALIGN - bytes % ALIGN) % ALIGN;
    memset(out + bytes, 0, pad);
    return fs_write_all(fd, out, bytes + pad, tmp, err, errlen);
}

static wp_result header(buf *b, const wp_ckpt *c, const wp_layout *L, wp_dtype dtype, char *err, size_t errlen) {
    const wp_model_cfg *cfg = &L->cfg;
    buf kv = {0};
    int nkv = metadata(&kv, cfg, dtype), nt = 0;
    wp_result rc = tokenizer_kvs(c, cfg, &kv, &nkv, err, errlen);
    if (rc) {
        free(kv.p);
        return rc;
    }
    bool scaled = cfg->rope_scaling.factor > 0;
    for (int i = 0; i < L->n_params; i++) nt += exported(cfg, &L->params[i]);
    nt += scaled;
    put(b, "GGUF", 4);
    put_u32(b, 3);
    put_u64(b, (uint64_t)nt);
    put_u64(b, (uint64_t)nkv);
    if (kv.p) put(b, kv.p, kv.n);
    b->oom |= kv.oom;
    free(kv.p);
    uint64_t off = 0;
    if (scaled) { /* F32 [head_dim / 2], first as the converter's extra tensors */
        put_str(b, GGUF_ROPE_TENSOR);
        put_u32(b, 1);
        put_u64(b, (uint64_t)(cfg->head_dim / 2));
        put_u32(b, GGML_F32);
        put_u64(b, off);
        off += ((size_t)cfg->head_dim / 2 * 4 + ALIGN - 1) / ALIGN * ALIGN;
    }
    for (int i = 0; i < L->n_params; i++) {
        const wp_param *p = &L->params[i];
        char name[96];
        if (!exported(cfg, p) || gguf_name(p->name, false, name, sizeof name)) continue;
        put_str(b, name);
        bool vec = p->cols == 1;
        put_u32(b, vec ? 1 : 2);
        put_u64(b, (uint64_t)(vec ? p->rows : p->cols));
        if (!vec) put_u64(b, (uint64_t)p->rows);
        put_u32(b, tensor_type(p, dtype));
        put_u64(b, off);
        size_t bytes = (size_t)p->rows * p->cols * type_size(tensor_type(p, dtype));
        off += bytes + (ALIGN - bytes % ALIGN) % ALIGN;
    }
    static const unsigned char zero[ALIGN];
    put(b, zero, (ALIGN - b->n % ALIGN) % ALIGN);
    return b->oom ? wp_fail(WP_FAILED, err, errlen, "export: out of memory") : 0;
}

static wp_result write_file(const wp_ckpt *c, const wp_layout *L, const char *tmp, wp_dtype dtype, char *err, size_t errlen) {
    buf h = {0};
    int hrc = header(&h, c, L, dtype, err, errlen);
    if (hrc) {
        free(h.p);
        return hrc;
    }
    size_t most = 1;
    for (int i = 0; i < L->n_params; i++)
        if ((size_t)L->params[i].rows * L->params[i].cols > most) most = (size_t)L->params[i].rows * L->params[i].cols;
    float *a = malloc((most + ALIGN) * sizeof *a), *b = malloc((most + ALIGN) * sizeof *b);
    int fd = open(tmp, O_WRONLY | O_CLOEXEC); /* gguf_export created it */
    int rc = !a || !b ? wp_fail(WP_FAILED, err, errlen, "export: out of memory")
             : fd < 0 ? wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot create", tmp) : 0;
    if (rc == 0) rc = fs_write_all(fd, h.p, h.n, tmp, err, errlen);
    if (rc == 0 && L->cfg.rope_scaling.factor > 0) { /* a holds at least head_dim + ALIGN floats */
        size_t bytes = (size_t)L->cfg.head_dim / 2 * 4, pad = (ALIGN - bytes % ALIGN) % ALIGN;
        gguf_rope_factors(L->cfg.head_dim, L->cfg.rope_theta, &L->cfg.rope_scaling, a);
        memset((unsigned char *)a + bytes, 0, pad);
        rc = fs_write_all(fd, a, bytes + pad, tmp, err, errlen);
    }
    for (int i = 0; rc == 0 && i < L->n_params; i++)
        if (exported(&L->cfg, &L->params[i])) rc = write_tensor(fd, tmp, c, L, &L->params[i], dtype, a, b, err, errlen);
    if (rc == 0 && fsync(fd) != 0) rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: fsync", tmp);
    if (fd >= 0 && close(fd) != 0 && rc == 0) rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: close", tmp);
    free(a);
    free(b);
    free(h.p);
    return rc;
}

wp_result gguf_export(const wp_ckpt *c, const char *out, wp_dtype dtype, char *err, size_t errlen) {
    wp_model_cfg cfg = ckpt_info(c)->cfg;
    char tmp[WP_PATH_MAX];
    model_cfg_even_chunks(&cfg, 1);
    wp_layout L;
    WP_TRY(layout_build(&cfg, &L, err, errlen));
    /* a new file that no one else holds (a user's OUT.tmp is never truncated or removed) */
    int fd;
    wp_result rc = fs_create_beside(out, ".tmp", false, tmp, sizeof tmp, &fd, err, errlen);
    if (rc) {
        layout_free(&L);
        return rc;
    }
    close(fd);
    rc = write_file(c, &L, tmp, dtype, err, errlen);
    if (rc == 0) rc = fs_rename_durable(tmp, out, err, errlen);
    else unlink(tmp);
    layout_free(&L);
    return rc;
}
