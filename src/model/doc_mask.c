/* Document masks (cfg.doc_mask): packed documents attend only inside themselves. A document
 * starts at every cfg.doc_boundary token (prepare writes the tokenizer's BOS before each) and at
 * the start of a sequence; each token's query then sees the keys from its document's start to
 * itself (the attention kernels' qlo). Every chunk finds the starts from the micro-batch's
 * tokens itself, so no strategy passes boundaries along; a Seq1F1B segment continues the
 * document its predecessor ended in. The walk runs on the host: b*s ints per F, against
 * attention's work of s^2 per document-free sequence. */
#include <stdlib.h>

#include "model_impl.h"

wp_result doc_mask_starts(wp_model *m, wp_acts *a, const int32_t *tokens) {
    const wp_dims *d = &a->d;
    const size_t T = (size_t)d->T;
    int32_t *tok = malloc(2 * T * sizeof *tok), *lo = tok ? tok + T : NULL;
    if (!tok) {
        kern_set_error(m->k, "model_forward: out of memory for the document starts of %zu tokens", T);
        return WP_FAILED;
    }
    kern_to_host(m->k, tok, tokens, T * sizeof *tok);
    for (int bi = 0; bi < d->b && !kern_error(m->k); bi++) {
        int32_t cur = 0;
        if (a->prev) /* the document the previous segment's last token belongs to */
            kern_to_host(m->k, &cur, a->prev->doc_lo + (size_t)bi * a->prev->d.s + a->prev->d.s - 1, sizeof cur);
        for (int t = 0; t < d->s; t++) {
            size_t at = (size_t)bi * d->s + t;
            if (tok[at] == m->L.cfg.doc_boundary) cur = d->pos0 + t;
            lo[at] = cur;
        }
    }
    kern_to_device(m->k, a->doc_lo, lo, T * sizeof *lo);
    kern_attention_docs(m->k, a->doc_lo, lo, d->b, d->s); /* cuDNN takes them as a list of documents */
    kern_sync(m->k); /* lo is the host's until the copy is done */
    free(tok);
    return kern_status(m->k);
}
