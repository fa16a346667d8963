/* config.json's max_position_embeddings (see hf_positions.h). */
#include "hf_positions.h"

#include <jansson.h>

#include "fsutil.h"

wp_result hf_max_positions(const char *hf_dir, int64_t *positions, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    WP_TRY(fs_join(path, sizeof path, hf_dir, "config.json", err, errlen));
    json_t *j;
    WP_TRY(fs_load_json(path, (size_t)64 << 20, 0, &j, err, errlen));
    json_t *v = json_object_get(j, "max_position_embeddings");
    wp_result rc = WP_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: key max_position_embeddings missing or not an integer in [1, 2^31)", path);
    else
        *positions = json_integer_value(v);
    json_decref(j);
    return rc;
}
