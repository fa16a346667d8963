/* SVG timeline: ranks as rows, time across; compute blocks labelled chunk/micro-batch; each
 * rank's outgoing transfers as thin bars in three sub-rows under its blocks (forward weights or
 * activations; backward weights or activation gradients; gradients). */
#include <math.h>
#include <string.h>

#include "draw_common.h"

enum { WIDTH = 1100, LEFT = 64, RIGHT = 16, TOP = 58, ROW = 46, BLOCK = 24, LANE = 4, BOTTOM = 40 };

typedef struct {
    FILE *f;
    double t0, scale; /* x = LEFT + (t - t0) * scale */
} canvas;

static double x_of(const canvas *c, double t) { return LEFT + (t - c->t0) * c->scale; }

static void put_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else fputc(*s, f);
    }
}

/* A tick spacing of 1, 2 or 5 times a power of ten, about span/8. */
static double tick_step(double span) {
    double raw = span / 8, p = pow(10, floor(log10(raw)));
    return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

static void time_label(char *out, size_t len, double t, bool unit) {
    if (unit) snprintf(out, len, "%g", t);
    else if (t == 0 || t >= 1) snprintf(out, len, "%gs", t);
    else if (t >= 1e-3) snprintf(out, len, "%gms", t * 1e3);
    else snprintf(out, len, "%gus", t * 1e6);
}

static void axis(const canvas *c, int n, double t0, double t1, bool unit) {
    double y = TOP + n * ROW + 6, step = tick_step(t1 - t0);
    fprintf(c->f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#333'/>\n", LEFT, y, WIDTH - RIGHT, y);
    for (double t = 0; t <= t1 - t0 + 1e-9 * step; t += step) {
        char lab[32];
        double x = x_of(c, t0 + t);
        time_label(lab, sizeof lab, t, unit);
        fprintf(c->f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#333'/>", x, y, x, y + 4);
        fprintf(c->f, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%s</text>\n", x, y + 15, lab);
    }
    fprintf(c->f, "<text x='%d' y='%.1f' font-size='10' text-anchor='end'>%s</text>\n", WIDTH - RIGHT, y + 30,
            unit ? "time (F = B = W = 1)" : "time");
}

static void legend(FILE *f) {
    static const struct { int op; const char *name; } ops[] = {
        {WP_OP_F, "F"}, {WP_OP_B, "B (input grad)"}, {WP_OP_W, "W-pass"}, {WP_OP_BW, "BW (fused)"},
        {WP_OP_ACC, "ACC"}, {WP_OP_FOLD, "FOLD"}, {WP_OP_UPDATE, "UPDATE"}, {WP_OP_REDUCE, "REDUCE wait"},
    };
    static const int chans[] = {WP_SCH_WFWD, WP_SCH_WBWD, WP_SCH_GRAD, WP_SCH_GRADRET, WP_SCH_ACT, WP_SCH_ACTGRAD};
    double x = LEFT;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        fprintf(f, "<rect x='%.0f' y='30' width='10' height='10' fill='%s'/>", x, draw_op_color(ops[i].op));
        fprintf(f, "<text x='%.0f' y='39' font-size='10'>%s</text>\n", x + 13, ops[i].name);
        x += 20 + 6.2 * (double)strlen(ops[i].name);
    }
    x += 10;
    fprintf(f, "<text x='%.0f' y='39' font-size='10'>sent:</text>", x);
    x += 30;
    for (size_t i = 0; i < sizeof chans / sizeof chans[0]; i++) {
        fprintf(f, "<rect x='%.0f' y='33' width='12' height='4' fill='%s'/>", x, draw_channel_color(chans[i]));
        fprintf(f, "<text x='%.0f' y='39' font-size='10'>%s</text>\n", x + 15, channel_name(chans[i]));
        x += 22 + 6.2 * (double)strlen(channel_name(chans[i]));
    }
}

static void block(const canvas *c, const wp_comp_event *e) {
    double x0 = x_of(c, e->t0), w = (e->t1 - e->t0) * c->scale, y = TOP + e->rank * ROW;
    if (e->op == WP_OP_REDUCE) {
        if (w > 0.5)
            fprintf(c->f, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='%s' fill-opacity='0.25'/>\n", x0, (int)y,
                    w, BLOCK, draw_op_color(e->op));
        return;
    }
    if (w < 1.5) w = 1.5; /* instant ops (unit model) stay visible as ticks */
    fprintf(c->f, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='%s' stroke='#fff' stroke-width='0.5'>",
            x0, (int)y, w, BLOCK, draw_op_color(e->op));
    fprintf(c->f, "<title>%s chunk %d", op_name(e->op), e->chunk);
    if (op_is_compute(e->op)) fprintf(c->f, " micro-batch %d", e->mb);
    fprintf(c->f, ": %g .. %g</title></rect>\n", e->t0, e->t1);
    char lab[24];
    if (!op_is_compute(e->op)) return;
    int n = snprintf(lab, sizeof lab, "%d/%d", e->chunk, e->mb);
    if (w >= 6.0 * n + 2)
        fprintf(c->f, "<text x='%.2f' y='%.1f' font-size='10' fill='#fff' text-anchor='middle'>%s</text>\n",
                x0 + w / 2, y + BLOCK / 2 + 3.5, lab);
}

static void bar(const canvas *c, const wp_xfer_event *x) {
    double x0 = x_of(c, x->t0), w = (x->t1 - x->t0) * c->scale;
    double y = TOP + x->src * ROW + BLOCK + 3 + draw_channel_lane(x->channel) * LANE;
    char nm[48];
    if (w < 1) w = 1;
    fprintf(c->f, "<rect x='%.2f' y='%.1f' width='%.2f' height='%d' fill='%s'><title>%s %d-&gt;%d</title></rect>\n", x0,
            y, w, LANE - 1, draw_channel_color(x->channel), buf_name(x->buf, nm, sizeof nm), x->src, x->dst);
}

void draw_svg(FILE *f, const wp_schedule *s, const wp_run *run, const wp_draw_opts *o) {
    const int n = s->nranks, height = TOP + n * ROW + BOTTOM;
    double t0 = 0, t1 = 1;
    if (!draw_window(run, o->step, &t0, &t1) || t1 <= t0) t1 = t0 + 1;
    canvas c = {f, t0, (WIDTH - LEFT - RIGHT) / (t1 - t0)};
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif'>\n", WIDTH,
            height);
    fprintf(f, "<rect width='100%%' height='100%%' fill='#fff'/>\n<text x='%d' y='18' font-size='13'>", LEFT);
    put_text(f, o->title ? o->title : strategy_name(s->strategy));
    fputs("</text>\n", f);
    legend(f);
    for (int r = 0; r < n; r++) {
        double y = TOP + r * ROW;
        fprintf(f, "<text x='%d' y='%.1f' font-size='11' text-anchor='end'>rank %d</text>\n", LEFT - 6,
                y + BLOCK / 2 + 4, r);
        fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#eee'/>\n", LEFT, y + ROW - 4, WIDTH - RIGHT,
                y + ROW - 4);
    }
    for (int i = 0; i < run->n_xfer; i++)
        if (run->xfer[i].step == o->step) bar(&c, &run->xfer[i]);
    for (int i = 0; i < run->n_comp; i++)
        if (run->comp[i].step == o->step) block(&c, &run->comp[i]);
    axis(&c, n, t0, t1, o->unit_time);
    fputs("</svg>\n", f);
}
