/* masters_fill (masters_fill.h). */
#include "masters_fill.h"

#include <stdlib.h>

#include "result.h"

wp_result masters_fill(wp_optim *o, masters_reader read, void *ctx, char *err, size_t errlen) {
    const wp_layout *L = layout_of_optim(o);
    size_t most = 1;
    for (int i = 0; i < optim_n_owned(o); i++)
        if (L->chunk_numel[optim_owned_chunk(o, i)] > most) most = L->chunk_numel[optim_owned_chunk(o, i)];
    float *host = malloc(most * sizeof *host); /* one chunk at a time: never the whole model twice */
    if (!host) return wp_fail(WP_FAILED, err, errlen, "--init-from: out of memory for %zu floats", most);
    wp_result rc = optim_reset(o) ? wp_fail(WP_FAILED, err, errlen, "--init-from: %s", optim_error(o)) : 0;
    for (int i = 0; rc == 0 && i < optim_n_owned(o); i++) {
        int c = optim_owned_chunk(o, i), first, end;
        layout_chunk_params(L, c, &first, &end);
        for (int p = first; rc == 0 && p < end; p++) rc = read(ctx, &L->params[p], host + L->params[p].offset, err, errlen);
        size_t off = 0, len = 0; /* a slice owner (fsdp) holds one element range of the chunk */
        optim_range(o, c, &off, &len);
        if (rc == 0 && optim_set(o, c, WP_OPT_MASTER, host + off)) rc = wp_fail(WP_FAILED, err, errlen, "--init-from: %s", optim_error(o));
    }
    free(host);
    return rc;
}
