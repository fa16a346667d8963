/* Private to src/io: the C face of libsentencepiece (C++), used only by tokenizer.c. The one
 * C++ file of the project is spm_wrap.cc; no C++ type or exception crosses this header. */
#ifndef WP_IO_SPM_WRAP_H
#define WP_IO_SPM_WRAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spm_wrap spm_wrap;

/* A serialized ModelProto (the bytes of a tokenizer.model). 0 ok, 2 not a SentencePiece model
 * (err says why, without the file name), 1 out of memory. */
int spm_wrap_load(const void *data, size_t size, spm_wrap **out, char *err, size_t errlen);
void spm_wrap_free(spm_wrap *s);
int64_t spm_wrap_vocab(const spm_wrap *s);
int32_t spm_wrap_bos(const spm_wrap *s); /* -1 when the model has none */
int32_t spm_wrap_eos(const spm_wrap *s);
/* ids malloc'd (NULL when *n is 0). 0, 1 (memory), 2 (the library refused the text). */
int spm_wrap_encode(const spm_wrap *s, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen);
/* ids already checked in range by the caller. */
int spm_wrap_decode(const spm_wrap *s, const int32_t *ids, size_t n, char **text, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
