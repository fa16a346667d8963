/* The validator: the schedule engine without costs, over two consecutive steps. */
#include "validate.h"

wp_result sched_validate(const wp_schedule *s, const wp_layout *L, wp_run *rep, char *err, size_t errlen) {
    wp_sizes sz;
    if (L) sizes_from_layout(&sz, L, s->split);
    return engine_run(s, L ? &sz : NULL, NULL, 2, false, rep, err, errlen);
}
