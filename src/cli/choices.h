/* The enumerated flags' values (flags.def's ENUM rows): each flag's field in wp_opts is a C enum,
 * parsed once by cli_parse/cli_set from the names below. The --help choices "{a|b|c}", the
 * names the parser takes and prints back (INI, manifest, the rendezvous hash) and the enum
 * values come from one list per flag, so a name cannot be added to one and not the others:
 *   WP_CHOICES_<field>(X, SEP): X(VALUE, "name") rows joined by SEP, in --help order.
 * --strategy's and --transport's lists are their tables' (strategies.def, transport_table.h),
 * with all and auto after the strategies. The lower layers' own enums are the values wherever
 * one exists (wp_precision, wp_backend_kind, ...): one name per concept. */
#ifndef WP_CLI_CHOICES_H
#define WP_CLI_CHOICES_H

#include "kernels.h"         /* wp_backend_kind, wp_attn_impl */
#include "layout.h"          /* wp_precision, wp_doc_positions */
#include "lr_schedule.h"     /* wp_lr_decay */
#include "optim.h"           /* wp_optim_memory */
#include "print.h"           /* wp_format */
#include "strategy.h"        /* wp_strategy */
#include "transport_table.h" /* WP_TRANSPORTS */

#define WP_CHOICES_precision(X, SEP) X(WP_PREC_MIXED, "mixed") SEP X(WP_PREC_BF16, "bf16") SEP X(WP_PREC_FP32, "fp32")
#define WP_CHOICES_backend(X, SEP) X(WP_BACKEND_CPU, "cpu") SEP X(WP_BACKEND_CUDA, "cuda")
#define WP_CHOICES_attention(X, SEP) X(WP_ATTN_AUTO, "auto") SEP X(WP_ATTN_CUDNN, "cudnn") SEP X(WP_ATTN_NATIVE, "native")
#define WP_CHOICES_lr_decay_style(X, SEP)                                                                      \
    X(WP_LR_CONSTANT, "constant") SEP X(WP_LR_LINEAR, "linear") SEP X(WP_LR_COSINE, "cosine")
#define WP_CHOICES_wzb2_owner(X, SEP) X(WP_WZB2_SPREAD, "spread") SEP X(WP_WZB2_LAST, "last")
#define WP_CHOICES_i1f1b_order(X, SEP) X(WP_I1F1B_DEPTH_FIRST, "depth-first") SEP X(WP_I1F1B_BREADTH_FIRST, "breadth-first")
#define WP_CHOICES_optimizer_memory(X, SEP) X(WP_OPTIM_MEM_DEVICE, "device") SEP X(WP_OPTIM_MEM_HOST, "host")
#define WP_CHOICES_doc_positions(X, SEP) X(WP_DOC_POS_CONTINUE, "continue") SEP X(WP_DOC_POS_RESTART, "restart")
#define WP_CHOICES_train_on(X, SEP) X(WP_TRAIN_ON_ANSWERS, "answers") SEP X(WP_TRAIN_ON_ALL, "all")
/* every subcommand's formats; cli.c's command table narrows them per subcommand */
#define WP_CHOICES_format(X, SEP)                                                                              \
    X(WP_FMT_TEXT, "text") SEP X(WP_FMT_CSV, "csv") SEP X(WP_FMT_JSON, "json") SEP X(WP_FMT_IDS, "ids")         \
    SEP X(WP_FMT_SAFETENSORS, "safetensors") SEP X(WP_FMT_GGUF, "gguf")

#define WP_CHOICE_VALUE_(value, name) value
#define WP_CHOICE_NAME_(value, name) name
#define WP_CHOICE_COMMA_ ,
#define WP_CHOICE_BAR_ "|"
/* "a|b|c": a flag's choices as flags.def's help starts them */
#define WP_CHOICE_NAMES(field) WP_CHOICES_##field(WP_CHOICE_NAME_, WP_CHOICE_BAR_)

/* The values no lower layer has an enum for. */
typedef enum { WP_CHOICES_wzb2_owner(WP_CHOICE_VALUE_, WP_CHOICE_COMMA_) } wp_wzb2_owner;
typedef enum { WP_CHOICES_i1f1b_order(WP_CHOICE_VALUE_, WP_CHOICE_COMMA_) } wp_i1f1b_order;
typedef enum { WP_CHOICES_train_on(WP_CHOICE_VALUE_, WP_CHOICE_COMMA_) } wp_train_on;
/* --transport: the row of transport_table.h (tp_table_row), WP_TRANSPORT_local ... */
#define WP_TRANSPORT_ENUM_(n) WP_TRANSPORT_##n
typedef enum { WP_TRANSPORTS(WP_TRANSPORT_ENUM_, WP_CHOICE_COMMA_), WP_TRANSPORT_COUNT } wp_transport_kind;
/* --format: schedule's and simulate's wp_format, and the formats only sample and export print */
enum { WP_FMT_IDS = WP_FMT_JSON + 1, WP_FMT_SAFETENSORS, WP_FMT_GGUF };
/* --strategy: a wp_strategy, or one of these two past the table (simulate all of them; pick the
 * fastest, autotune.h) */
enum { WP_STRAT_ALL = WP_STRAT_COUNT, WP_STRAT_AUTO };

/* The C type of each enumerated flag's wp_opts field (cli.h's WP_FIELD_ENUM). */
#define WP_ENUM_TYPE_precision wp_precision
#define WP_ENUM_TYPE_backend wp_backend_kind
#define WP_ENUM_TYPE_attention wp_attn_impl
#define WP_ENUM_TYPE_strategy wp_strategy
#define WP_ENUM_TYPE_wzb2_owner wp_wzb2_owner
#define WP_ENUM_TYPE_i1f1b_order wp_i1f1b_order
#define WP_ENUM_TYPE_train_on wp_train_on
#define WP_ENUM_TYPE_optimizer_memory wp_optim_memory
#define WP_ENUM_TYPE_doc_positions wp_doc_positions
#define WP_ENUM_TYPE_lr_decay_style wp_lr_decay
#define WP_ENUM_TYPE_transport wp_transport_kind
#define WP_ENUM_TYPE_format wp_format

#endif
