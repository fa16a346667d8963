/* Subcommand entry points. Each returns the process exit code: 0 success, 1 runtime failure,
 * 2 bad usage or bad input (after printing one line that names the culprit). */
#ifndef WP_COMMANDS_H
#define WP_COMMANDS_H

#include "cli.h"

int cmd_train(const wp_opts *o);
int cmd_eval(const wp_opts *o);
int cmd_schedule(const wp_opts *o);
int cmd_simulate(const wp_opts *o);
int cmd_prepare(const wp_opts *o);
int cmd_export(const wp_opts *o);
int cmd_check(const wp_opts *o);
int cmd_bench(const wp_opts *o);
int cmd_trace_merge(const wp_opts *o);
int cmd_sample(const wp_opts *o);

#endif
