/* The GGUF container (llama.cpp's model file), private to src/io/formats/gguf*.c: a parsed, checked view
 * of a mapped file. gguf_open validates every header field before it sizes anything (counts
 * against the bytes left, string lengths, array counts, tensor dims multiplied with overflow
 * checks, alignment, offsets inside the file, tensors not overlapping), so the accessors below
 * read the mapping without further checks. */
#ifndef WP_IO_GGUF_FILE_H
#define WP_IO_GGUF_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fsutil.h"
#include "gguf.h"
#include "result.h"

enum { /* value types of the key/value section */
    GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY,
    GGUF_U64, GGUF_I64, GGUF_F64, GGUF_NTYPES
};
enum { /* the ggml tensor types weipipe reads or writes */
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q8_0 = 8, GGML_BF16 = 30
};
#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct {
    const char *key;
    size_t keylen;
    uint32_t type;  /* GGUF_* */
    uint32_t atype; /* element type of an array */
    uint64_t n;     /* element count of an array */
    size_t off;     /* value (an array: its first element) from the start of the file */
} gguf_kv;

typedef struct {
    const char *name;
    size_t namelen;
    uint32_t ndims, type;
    uint64_t dims[GGUF_MAX_DIMS]; /* dims[0] varies fastest: a [rows, cols] matrix is {cols, rows} */
    uint64_t numel, nbytes;
    uint64_t off; /* from the start of the data section */
} gguf_tensor;

typedef struct gguf_file gguf_file; /* as gguf.h names it */
struct gguf_file {
    char path[WP_PATH_MAX];
    fs_map map;
    uint32_t version;
    size_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *t;
    uint64_t alignment;
    size_t data; /* start of the data section */
};

/* 0, 2 (err: the file and the field; a file without the magic too), 1 (I/O or memory); gguf.h's
 * gguf_open_if is the one that lets a file of another kind pass. */
wp_result gguf_open(gguf_file **out, const char *path, char *err, size_t errlen);
/* The key, or NULL; a key given twice is refused (2) rather than one of them picked. */
wp_result gguf_find_kv(const gguf_file *f, const char *key, const gguf_kv **kv, char *err, size_t errlen);
/* Scalar values: integer types into *v (a negative or non-integer one: 2 naming the key). */
wp_result gguf_get_uint(const gguf_file *f, const char *key, bool required, uint64_t *v, bool *present, char *err, size_t errlen);
wp_result gguf_get_float(const gguf_file *f, const char *key, bool required, double *v, bool *present, char *err, size_t errlen);
/* A string value (not NUL-terminated): *s NULL when absent and not required. */
wp_result gguf_get_str(const gguf_file *f, const char *key, bool required, const char **s, size_t *len, char *err, size_t errlen);
/* Array elements, walked in order from *pos (start with kv->off); strings are (pointer, length). */
void gguf_next_str(const gguf_file *f, size_t *pos, const char **s, size_t *len);
int64_t gguf_next_int(const gguf_file *f, size_t *pos, uint32_t type);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
const char *gguf_type_name(uint32_t type);
/* F32, F16, BF16, Q8_0, Q4_0, Q4_1: the types gguf_tensor_f32 reads. */
bool gguf_type_readable(uint32_t type);
/* The tensor as fp32 into dst (numel floats); a type weipipe does not dequantize: 2 naming it. */
/* Dequantized into dst (numel floats); a value that is not finite is 2 naming the tensor and the
 * block (or element) that holds it. */
wp_result gguf_tensor_f32(const gguf_file *f, const gguf_tensor *t, float *dst, char *err, size_t errlen);
/* llama.cpp's name of a Hugging Face Llama tensor (tied: the head is token_embd); 1 when none. */
int gguf_name(const char *hf, bool tied, char *out, size_t len);
/* A growing byte buffer for the writer (gguf_export.c); oom set once an append fails. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
    bool oom;
} gguf_buf;
void gguf_put(gguf_buf *b, const void *x, size_t n);
void gguf_put_u32(gguf_buf *b, uint32_t v);
void gguf_put_u64(gguf_buf *b, uint64_t v);
void gguf_put_str(gguf_buf *b, const char *s, size_t len);
/* tokenizer.ggml.* key/values from a Hugging Face tokenizer.json appended to b (*nkv counted up)
 * when it is a byte-level BPE, model_vocab tokens (ids it lacks as [PADn]); nothing for another
 * kind. 2 for a malformed file or one with an id past model_vocab. */
wp_result gguf_tokenizer_kvs(const char *json_path, size_t model_vocab, gguf_buf *b, int *nkv, char *err, size_t errlen);
/* True when path is a regular file that starts with the GGUF magic. */
bool gguf_is_file(const char *path);

#endif
