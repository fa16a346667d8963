/* weipipe train: prepare the job once (model, validated schedule, flags), then run its ranks
 * through the job runner (ring/job.h), which reads the transport table for how they meet:
 * threads of this process, or processes over a rendezvous started by our own launcher or by
 * torchrun / srun / mpirun. Each process that runs ranks writes its own --trace file. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "adapters.h"
#include "bootstrap.h"
#include "fsutil.h"
#include "commands.h"
#include "job.h"
#include "log.h"
#include "savelock.h"
#include "stop.h"
#include "train.h"

/* Rank R > 0 of a job whose ranks do not share one process writes tr.rank-R.json beside
 * --trace tr.json (the extension kept last, so viewers and globs see a .json), FILE.rank-R
 * when --trace has no extension. */
static void trace_path(const train_job *j, int rank, char *path, size_t len) {
    const char *t = j->o.trace, *slash = strrchr(t, '/'), *dot = strrchr(t, '.');
    if (rank == 0) snprintf(path, len, "%s", t);
    else if (dot && dot > (slash ? slash : t) && dot[1]) snprintf(path, len, "%.*s.rank-%d%s", (int)(dot - t), t, rank, dot);
    else snprintf(path, len, "%s.rank-%d", t, rank);
}

static int open_trace(void *arg, int first_rank, char *err, size_t errlen) {
    train_job *j = arg;
    if (!j->o.trace[0]) return 0;
    char path[WP_PATH_MAX + 32];
    trace_path(j, first_rank, path, sizeof path);
    j->trace = trace_open(path, err, errlen);
    return j->trace ? 0 : 1;
}

/* A run that failed leaves no half-written trace (not valid JSON, and a bad-input run must
 * leave no output file at all). */
static int close_trace(void *arg, int first_rank, int rc, char *err, size_t errlen) {
    train_job *j = arg;
    if (!j->trace) return rc;
    wp_trace *t = j->trace;
    j->trace = NULL;
    if (rc == 0) return trace_close(t, err, errlen);
    char why[256], path[WP_PATH_MAX + 32];
    trace_close(t, why, sizeof why);
    trace_path(j, first_rank, path, sizeof path);
    unlink(path);
    return rc;
}

/* One job at a time per --save directory (savelock.h): taken by the process that starts the
 * job (threads, or weipipe's own launcher) before anything runs, or by rank 0's process under an
 * external launcher once the ranks met (its failure then ends every rank with the reason). */
static wp_save_lock save_lock = {.fd = -1};

static wp_result lock_save(const train_job *j, char *err, size_t errlen) {
    if (!j->o.save[0]) return 0;
    char job[128];
    if (boot_job_id_from_environ(job, sizeof job) != 0)
        snprintf(job, sizeof job, "weipipe train, pid %ld, no launcher", (long)getpid());
    return save_lock_take(&save_lock, j->o.save, job, err, errlen);
}

static int begin_process(void *arg, int first_rank, char *err, size_t errlen) {
    int rc = first_rank == 0 && boot_launched() ? lock_save(arg, err, errlen) : 0;
    return rc ? rc : open_trace(arg, first_rank, err, errlen);
}

static int end_process(void *arg, int first_rank, int rc, char *err, size_t errlen) {
    rc = close_trace(arg, first_rank, rc, err, errlen);
    if (first_rank == 0 && boot_launched()) save_lock_release(&save_lock);
    return rc;
}

static int rank_fn(wp_rank_ctx *ctx, void *arg) {
    const train_job *j = arg;
    if (ctx->addr_note[0] && !j->o.quiet) fprintf(stderr, "rank %d: listening on %s\n", ctx->rank, ctx->addr_note);
    return train_rank(arg, ctx->rank, ctx->local_rank, ctx->t, ctx->ctl, ctx->err, sizeof ctx->err);
}

/* Another run's steps in a fresh run's --save would mix two runs (and --resume auto would then
 * pick the wrong one up): refused unless --resume or --overwrite-save, which moves the old
 * directory aside as SAVE.old-<unix time> (never deletes) and starts an empty one. */
static wp_result fresh_save_dir(const wp_opts *o, char *err, size_t errlen) {
    if (!o->save[0] || o->resume[0] || o->calibrate[0] || !fs_is_dir(o->save)) return 0;
    DIR *d = opendir(o->save);
    if (!d) return wp_fail(WP_FAILED, err, errlen, "--save %.1000s: cannot read it: %s", o->save, strerror(errno));
    char step[300] = "";
    for (struct dirent *e; !step[0] && (e = readdir(d));)
        if (strncmp(e->d_name, "step-", 5) == 0 || strcmp(e->d_name, "latest") == 0) snprintf(step, sizeof step, "%s", e->d_name);
    closedir(d);
    if (!step[0]) return 0;
    if (!o->overwrite_save)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--save %.1000s holds another run's checkpoints (%s): --resume auto continues it, "
                        "--overwrite-save moves them aside and starts over", o->save, step);
    if (boot_launched())
        return wp_fail(WP_BAD_INPUT, err, errlen, "--overwrite-save: under a launcher every rank would move %.1000s; move it aside "
                        "before launching", o->save);
    char aside[WP_PATH_MAX + 48];
    snprintf(aside, sizeof aside, "%s.old-%lld", o->save, (long long)time(NULL));
    if (fs_exists(aside)) return wp_fail(WP_BAD_INPUT, err, errlen, "--overwrite-save: %.1000s exists already", aside);
    if (rename(o->save, aside) != 0)
        return wp_fail(WP_FAILED, err, errlen, "--overwrite-save: cannot move %.1000s to %.1000s: %s", o->save, aside, strerror(errno));
    if (!o->quiet) fprintf(stderr, "--overwrite-save: moved the old %.1000s to %.1000s\n", o->save, aside);
    return fs_mkdirs(o->save, err, errlen);
}

int cmd_train(const wp_opts *given) {
    static wp_opts opts; /* the flags with what --resume's manifest gives */
    opts = *given;
    const wp_opts *o = &opts;
    static train_job j; /* holds a copy of the options: large */
    static char job_flags[1 << 16];
    char err[2048];
    if (o->nargs != 0) {
        wp_error("train: takes no positional arguments, got '%s'", o->args[0]);
        return 2;
    }
    if (stop_install(err, sizeof err)) {
        wp_error("%s", err);
        return 1;
    }
    int rc = resume_opts_from_manifest(&opts, err, sizeof err);
    if (!rc) rc = fresh_save_dir(o, err, sizeof err);
    if (!rc) rc = train_job_prepare(&j, o, err, sizeof err);
    if (!rc && !boot_launched()) rc = lock_save(&j, err, sizeof err);
    if (!rc) {
        j.job.process_begin = begin_process;
        j.job.process_end = end_process;
        if (cli_job_flags(&j.o, job_flags, sizeof job_flags) == 0) j.job.job_flags = job_flags;
        rc = wp_job_run(&j.job, rank_fn, &j, err, sizeof err);
    }
    save_lock_release(&save_lock);
    if (rc) wp_error("%s", err);
    train_job_free(&j);
    return rc;
}
