/* Printing schedules and reports (print.h). */
#include "print.h"
#include "seq_split.h"

#include <string.h>

bool format_parse(const char *name, wp_format *f) {
    static const char *const names[] = {"text", "csv", "json"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0) {
            *f = (wp_format)i;
            return true;
        }
    return false;
}

char *fmt_bytes(char *out, size_t len, double b) {
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (b >= 1000 && u < 4) b /= 1000, u++;
    snprintf(out, len, u ? "%.2f %s" : "%.0f %s", b, units[u]);
    return out;
}

char *fmt_seconds(char *out, size_t len, double s) {
    if (s >= 1 || s == 0) snprintf(out, len, "%.3f s", s);
    else if (s >= 1e-3) snprintf(out, len, "%.2f ms", s * 1e3);
    else snprintf(out, len, "%.1f us", s * 1e6);
    return out;
}

static void owned_list(FILE *f, const wp_schedule *s, int r) {
    if (s->nslices) { /* ir.h: rank k owns slice k of every chunk */
        fprintf(f, "slice %d of %d of every chunk", r, s->nslices);
        return;
    }
    int n = 0;
    for (int c = 0; c < s->nchunks; c++)
        if (s->owner[c] == r) fprintf(f, "%s%d", n++ ? "," : "", c);
    if (!n) fputs("none", f);
}

void print_schedule_text(FILE *f, const wp_schedule *s) {
    char b[96];
    fprintf(f, "%s: %d ranks, %d micro-batches, %d chunks, %s backward", strategy_name(s->strategy), s->nranks,
            sched_samples(s), s->nchunks, s->split ? "split (B + W)" : "fused (BW)");
    if (s->nseg > 1) fprintf(f, "; %d segments each, unit u = segment u %% %d of micro-batch u / %d", s->nseg, s->nseg, s->nseg);
    fputc('\n', f);
    for (int r = 0; r < s->nranks; r++) {
        const wp_rank_prog *p = &s->rank[r];
        fprintf(f, "rank %d (owns ", r);
        owned_list(f, s, r);
        fprintf(f, "; %d actions", p->n);
        for (int i = 0; i < p->n_carry; i++) fprintf(f, "%s%s", i ? ", " : "; starts holding ", buf_name(p->carry[i], b, sizeof b));
        fputs("):", f);
        for (int i = 0; i < p->n; i++) {
            if (i == 0 || p->a[i].turn != p->a[i - 1].turn) fprintf(f, "\n  t%-4d", p->a[i].turn);
            fprintf(f, " %s;", action_text(&p->a[i], b, sizeof b));
        }
        fputc('\n', f);
    }
}

/* Whether an action names a buffer: the weights a compute reads, the GW a W-pass adds into. */
static bool has_buffer(const wp_action *a) {
    if (a->op == WP_OP_REDUCE || a->op == WP_OP_UPDATE) return false;
    return !(a->op == WP_OP_W && a->to_master);
}

void print_schedule_csv(FILE *f, const wp_schedule *s) {
    char b[64];
    fputs("rank,index,turn,op,chunk,mb,buffer,peer,channel,to_master\n", f);
    for (int r = 0; r < s->nranks; r++)
        for (int i = 0; i < s->rank[r].n; i++) {
            const wp_action *a = &s->rank[r].a[i];
            bool xfer = a->op == WP_OP_SEND || a->op == WP_OP_RECV;
            fprintf(f, "%d,%d,%d,%s,%d,%d,%s,%d,%s,%d\n", r, i, a->turn, op_name(a->op),
                    a->op == WP_OP_REDUCE ? -1 : a->chunk, op_is_compute(a->op) ? a->mb : -1,
                    has_buffer(a) ? buf_name(a->buf, b, sizeof b) : "", xfer ? a->peer : -1,
                    xfer ? channel_name(a->channel) : "", a->to_master);
        }
}

void print_report_text(FILE *f, const wp_schedule *s, const wp_run *rep, bool bytes) {
    char x[32], y[32], z[32], w[32];
    fprintf(f, "\nper rank (peak buffers held at once; transfers per step):\n");
    fprintf(f, "%4s %3s %3s %3s %3s %5s %11s %11s %11s %11s %6s\n", "rank", "W", "GW", "A", "GA", "acts",
            "acts bytes", "sent", "received", "peak bytes", "xfers");
    for (int r = 0; r < s->nranks; r++) {
        const wp_rank_report *q = &rep->rank[r];
        size_t sent = 0, recv = 0;
        for (int k = 0; k < WP_BUF_KINDS; k++) sent += q->sent[k], recv += q->recv[k];
        if (bytes)
            fprintf(f, "%4d %3d %3d %3d %3d %5d %11s %11s %11s %11s %6d\n", r, q->peak_n[WP_BUF_W], q->peak_n[WP_BUF_GW],
                    q->peak_n[WP_BUF_A], q->peak_n[WP_BUF_GA], q->peak_acts, fmt_bytes(x, sizeof x, (double)q->peak_acts_bytes),
                    fmt_bytes(y, sizeof y, (double)sent), fmt_bytes(z, sizeof z, (double)recv),
                    fmt_bytes(w, sizeof w, (double)q->peak_bytes), q->n_sent + q->n_recv);
        else
            fprintf(f, "%4d %3d %3d %3d %3d %5d %11s %11s %11s %11s %6d\n", r, q->peak_n[WP_BUF_W], q->peak_n[WP_BUF_GW],
                    q->peak_n[WP_BUF_A], q->peak_n[WP_BUF_GA], q->peak_acts, "-", "-", "-", "-", q->n_sent + q->n_recv);
    }
}

static void json_buf(FILE *f, wp_buf b) {
    char nm[48];
    fprintf(f, "{\"name\":\"%s\",\"kind\":\"%s\",\"chunk\":%d,\"index\":%d,\"lane\":%d}", buf_name(b, nm, sizeof nm),
            b.kind == WP_BUF_W ? "W" : b.kind == WP_BUF_GW ? "GW" : b.kind == WP_BUF_A ? "A" : "GA", b.chunk, b.idx, b.lane);
}

static void json_action(FILE *f, const wp_action *a) {
    fprintf(f, "{\"op\":\"%s\",\"turn\":%d", op_name(a->op), a->turn);
    if (op_is_compute(a->op)) fprintf(f, ",\"chunk\":%d,\"mb\":%d,\"to_master\":%s", a->chunk, a->mb, a->to_master ? "true" : "false");
    if (a->op == WP_OP_ACC || a->op == WP_OP_UPDATE) fprintf(f, ",\"chunk\":%d", a->chunk);
    if (a->op == WP_OP_SEND || a->op == WP_OP_RECV) fprintf(f, ",\"peer\":%d,\"channel\":\"%s\"", a->peer, channel_name(a->channel));
    if (has_buffer(a)) {
        fputs(",\"buffer\":", f);
        json_buf(f, a->buf);
    }
    fputc('}', f);
}

static void json_report(FILE *f, const wp_rank_report *q) {
    size_t sent = 0, recv = 0;
    for (int k = 0; k < WP_BUF_KINDS; k++) sent += q->sent[k], recv += q->recv[k];
    fprintf(f, "{\"peak_W\":%d,\"peak_GW\":%d,\"peak_A\":%d,\"peak_GA\":%d,\"peak_acts\":%d,\"peak_acts_bytes\":%zu,"
               "\"peak_bytes\":%zu,\"owner_bytes\":%zu,\"sent_bytes\":%zu,\"recv_bytes\":%zu,\"sent_W\":%zu,"
               "\"sent_GW\":%zu,\"sent_A\":%zu,\"sent_GA\":%zu,\"transfers_sent\":%d,\"transfers_received\":%d}",
            q->peak_n[WP_BUF_W], q->peak_n[WP_BUF_GW], q->peak_n[WP_BUF_A], q->peak_n[WP_BUF_GA], q->peak_acts,
            q->peak_acts_bytes, q->peak_bytes, q->owner_bytes, sent, recv, q->sent[WP_BUF_W], q->sent[WP_BUF_GW],
            q->sent[WP_BUF_A], q->sent[WP_BUF_GA], q->n_sent, q->n_recv);
}

void print_schedule_json(FILE *f, const wp_schedule *s, const wp_run *rep) {
    /* with segments, an action's mb is a unit: segment mb % segments of micro-batch mb / segments */
    fprintf(f, "{\"strategy\":\"%s\",\"nranks\":%d,\"num_microbatches\":%d,\"segments\":%d,\"num_chunks\":%d,"
               "\"split_backward\":%s,\"owner\":[", strategy_name(s->strategy), s->nranks, sched_samples(s), sched_nseg(s),
            s->nchunks, s->split ? "true" : "false");
    for (int c = 0; c < s->nchunks; c++) fprintf(f, "%s%d", c ? "," : "", s->owner[c]);
    fputs("],\"ranks\":[", f);
    for (int r = 0; r < s->nranks; r++) {
        const wp_rank_prog *p = &s->rank[r];
        fprintf(f, "%s\n{\"rank\":%d,\"carry\":[", r ? "," : "", r);
        for (int i = 0; i < p->n_carry; i++) {
            if (i) fputc(',', f);
            json_buf(f, p->carry[i]);
        }
        fputs("],\"actions\":[", f);
        for (int i = 0; i < p->n; i++) {
            if (i) fputc(',', f);
            json_action(f, &p->a[i]);
        }
        fputs("]", f);
        if (rep && rep->rank) {
            fputs(",\"report\":", f);
            json_report(f, &rep->rank[r]);
        }
        fputc('}', f);
    }
    fputs("]}\n", f);
}
