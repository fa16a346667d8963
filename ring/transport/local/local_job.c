/* A job with --transport local: its ranks are threads of this process (launch_threads.c opens
 * one local world, local.h), so the row has no open: the job runner starts the threads. The
 * transport's row of the registry (transport_table.h). */
#include "transport_table.h"

const tp_row tp_row_local = {.name = "local", .meet = TP_MEET_THREADS, .built = true};
