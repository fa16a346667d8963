/* weipipe export CKPT_DIR OUT_DIR [--precision P]: a checkpoint as a Hugging Face Llama dir. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "checkpoint.h"
#include "hf.h"
#include "safetensors.h"
#include "log.h"

/* fp32 unless --precision is given: then the dtype its weights travel in (fp16, bf16, fp32). */
static wp_dtype export_dtype(const wp_opts *o) {
    if (!o->set[FLAG_precision]) return WP_F32;
    if (strcmp(o->precision, "bf16") == 0) return WP_BF16;
    if (strcmp(o->precision, "fp32") == 0) return WP_F32;
    return WP_F16;
}

int cmd_export(const wp_opts *o) {
    if (o->nargs != 2) {
        wp_error("export: expected CKPT_DIR OUT_DIR, got %d argument%s", o->nargs, o->nargs == 1 ? "" : "s");
        return 2;
    }
    char err[2 * WP_PATH_MAX], dir[WP_PATH_MAX];
    wp_ckpt *c = NULL;
    int rc = ckpt_resolve(o->args[0], NULL, dir, sizeof dir, err, sizeof err);
    if (rc == 0) rc = ckpt_open(&c, dir, err, sizeof err);
    if (rc == 0) rc = hf_export(c, o->args[1], export_dtype(o), err, sizeof err);
    if (rc) {
        wp_error("%s", err);
        ckpt_close(c);
        return rc;
    }
    if (!o->quiet)
        printf("export: %s (step %" PRId64 ") -> %s/model.safetensors (%s) and config.json\n", dir, ckpt_info(c)->step,
               o->args[1], st_dtype_name(export_dtype(o)));
    ckpt_close(c);
    return 0;
}
