/* The scan heatmap: start layer i down, end layer j across, one cell per
 * block, a diverging colour scale centred on zero, the best blocks ranked,
 * and the legend and Pareto list beside the grid. */
#include "eval/png_canvas.h"
#include "core/model.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const rp_rgb WHITE = {255, 255, 255}, INK = {20, 20, 20}, GREY_TXT = {90, 90, 90},
                    GRID = {205, 205, 205}, MISSING = {228, 228, 228}, ZERO = {247, 247, 247},
                    NONFINITE = {70, 70, 70}, BASE_BG = {236, 226, 160};

/* Colour ramps from zero outwards, drawn for this scale: blue for better,
 * red for worse, dark at the far end so the extremes stay readable. */
static const rp_rgb RAMP_GOOD[] = {{247, 247, 247}, {198, 222, 240}, {128, 180, 222},
                                   {58, 128, 192},  {18, 74, 150},   {8, 40, 96}};
static const rp_rgb RAMP_BAD[] = {{247, 247, 247}, {250, 210, 190}, {238, 150, 118},
                                  {210, 84, 66},   {168, 24, 40},   {100, 0, 30}};

static rp_rgb ramp(const rp_rgb *r, int n, double t) {
    if (!(t > 0)) return r[0];
    if (t >= 1) return r[n - 1];
    const double x = t * (n - 1);
    const int k = (int)x;
    const double f = x - k;
    rp_rgb c = {(uint8_t)lround(r[k].r + f * (r[k + 1].r - r[k].r)),
                (uint8_t)lround(r[k].g + f * (r[k + 1].g - r[k].g)),
                (uint8_t)lround(r[k].b + f * (r[k + 1].b - r[k].b))};
    return c;
}

rp_rgb rp_heatmap_colour(double d, int sign, double good_max, double bad_max) {
    const double g = sign * d; /* > 0: better than the identity */
    if (!isfinite(g)) return NONFINITE;
    if (g == 0) return ZERO;
    /* square-root ramp: a small change stays visible next to a large one */
    if (g > 0)
        return ramp(RAMP_GOOD, (int)RP_ARRAY_LEN(RAMP_GOOD),
                    good_max > 0 ? sqrt(g / good_max) : 1.0);
    return ramp(RAMP_BAD, (int)RP_ARRAY_LEN(RAMP_BAD), bad_max > 0 ? sqrt(-g / bad_max) : 1.0);
}

static bool dark(rp_rgb c) {
    return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b < 140;
}

/* A delta in at most 5 characters for a cell: "-0.16", "+12.3", "+125". */
static void short_value(char *buf, size_t n, double d) {
    const double a = fabs(d);
    if (!isfinite(d))
        snprintf(buf, n, "%s", isnan(d) ? "nan" : d > 0 ? "+inf" : "-inf");
    else if (a >= 9999.5)
        snprintf(buf, n, "%+.0e", d);
    else if (a >= 99.95)
        snprintf(buf, n, "%+.0f", d);
    else if (a >= 9.995)
        snprintf(buf, n, "%+.1f", d);
    else if (a >= 0.0995 || a == 0)
        snprintf(buf, n, "%+.2f", d);
    else
        snprintf(buf, n, "%+.0e", d);
}

/* A value for the legend and the lists: 4 significant digits. */
static void long_value(char *buf, size_t n, double d) {
    const double a = fabs(d);
    if (a != 0 && (a < 1e-3 || a >= 1e5))
        snprintf(buf, n, "%+.3e", d);
    else
        snprintf(buf, n, "%+.4g", d);
}

/* Blocks in rank order: best first, then fewer extra layers, then by i, j. */
typedef struct rank_item {
    double g; /* sign * delta */
    int extra, i, j, idx;
} rank_item;

static int cmp_rank(const void *a, const void *b) {
    const rank_item *x = a, *y = b;
    if (x->g != y->g) return x->g > y->g ? -1 : 1;
    if (x->extra != y->extra) return x->extra - y->extra;
    return x->i != y->i ? x->i - y->i : x->j - y->j;
}

/* The sizes and positions of every part of the picture, and the colour scale. */
typedef struct hm_layout {
    int n;          /* layers across and down */
    int max_extra;  /* longest block drawn */
    int pareto_max; /* most extra layers of a plan drawn (the Pareto list's range) */
    int S, cw, lh;  /* text scale, character width, line height */
    int cell, grid;
    int M; /* margin */
    int lab_digits;
    int gx, gy; /* the grid's top left */
    int y_note, y_axis, y_ticks;
    int bar_x, bar_y, bar_w, bar_h;
    int panel_x;
    int width, height;
    double good_max, bad_max; /* each side of the colour scale reaches its largest magnitude */
} hm_layout;

/* The blocks ranked (finite ones) and the Pareto list. */
typedef struct hm_ranks {
    rank_item *order;
    int *best;   /* [max_extra + 1] best block per extra layers, -1 none */
    bool *front; /* [max_extra + 1] beats every smaller block */
    int n_ranked, n_best;
} hm_ranks;

static void ranks_free(hm_ranks *r) {
    free(r->order);
    free(r->best);
    free(r->front);
}

/* The largest extra-layer count among the rows (a plan on a base has more
 * than its block). */
static int rows_max_extra(const rp_heatmap *h) {
    int m = 1;
    for (int r = 0; r < h->n_rows; r++) m = RP_MAX(m, RP_MIN(h->rows[r].extra, RP_MAX_LAYERS));
    return m;
}

static rp_status rank_blocks(const rp_heatmap *h, int max_extra, hm_ranks *k) {
    memset(k, 0, sizeof *k);
    k->order = rp_malloc(((size_t)h->n_rows + 1) * sizeof *k->order, "heatmap ranks");
    k->best = rp_malloc(((size_t)max_extra + 1) * sizeof *k->best, "heatmap Pareto list");
    k->front = rp_malloc(((size_t)max_extra + 1) * sizeof *k->front, "heatmap Pareto list");
    if (!k->order || !k->best || !k->front) {
        ranks_free(k);
        return RP_ERR_NOMEM;
    }
    for (int r = 0; r < h->n_rows; r++)
        if (isfinite(h->rows[r].delta))
            k->order[k->n_ranked++] = (rank_item){h->sign * h->rows[r].delta, h->rows[r].extra,
                                                  h->rows[r].i, h->rows[r].j, r};
    qsort(k->order, (size_t)k->n_ranked, sizeof *k->order, cmp_rank);
    k->n_best = RP_MIN(h->n_best, k->n_ranked);
    rp_scan_pareto(h->rows, h->n_rows, h->sign, max_extra, k->best, k->front);
    return RP_OK;
}

/* layout: title, grid with its axes, legend bar, text panel */
static void layout(const rp_heatmap *h, int n_best, hm_layout *L) {
    L->n = h->end - h->start;
    L->S = 2;
    L->cw = (RP_FONT_W + 1) * L->S;
    L->lh = 10 * L->S;
    L->cell = RP_MAX(8, RP_MIN(48, 576 / L->n));
    L->grid = L->cell * L->n;
    L->max_extra = h->max_extra > 0 ? RP_MIN(h->max_extra, L->n) : L->n;
    L->pareto_max = RP_MAX(L->max_extra, rows_max_extra(h));
    L->good_max = L->bad_max = 0;
    for (int r = 0; r < h->n_rows; r++) {
        const double g = h->sign * h->rows[r].delta;
        if (!isfinite(g)) continue;
        if (g > L->good_max) L->good_max = g;
        if (-g > L->bad_max) L->bad_max = -g;
    }
    const int S = L->S, cw = L->cw, lh = L->lh, M = L->M = 20;
    L->lab_digits = h->end >= 100 ? 3 : h->end >= 10 ? 2 : 1;
    const int ylab_w = L->lab_digits * cw + 8;
    L->gx = M + ylab_w + lh + 6; /* room for the tick labels and the axis name */
    L->y_note = M + lh + 2;
    L->y_axis = L->y_note + lh + 16;
    L->y_ticks = L->y_axis + lh + 6;
    L->gy = L->y_ticks + lh + 2;
    L->bar_x = L->gx + L->grid + 36;
    L->bar_w = 22;
    L->bar_h = RP_MIN(RP_MAX(L->grid, 160), 320);
    L->bar_y = L->gy + lh + 4;
    /* the panel clears the legend's ticks and its caption */
    L->panel_x = RP_MAX(L->bar_x + L->bar_w + 12 * cw,
                        L->bar_x + rp_text_width(h->unit ? h->unit : "change", S) + 2 * cw);
    const int panel_chars = 30;
    const int panel_lines = 5 + n_best + L->pareto_max;
    L->width = L->panel_x + panel_chars * cw + M;
    if (h->title) L->width = RP_MAX(L->width, M + rp_text_width(h->title, S) + M);
    if (h->note) L->width = RP_MAX(L->width, M + rp_text_width(h->note, S) + M);
    L->height = RP_MAX(L->gy + L->grid + 2 * lh + 20, L->gy + panel_lines * lh + M);
    L->height = RP_MAX(L->height, L->bar_y + L->bar_h + 4 * lh + 12 + M);
}

/* axes: j across the top, i down the left; a label every `step` layers */
static void draw_axes(rp_canvas *out, const rp_heatmap *h, const hm_layout *L) {
    const int S = L->S, cell = L->cell;
    char buf[160];
    int step = 1;
    while (step * cell < L->lab_digits * L->cw + 4 && step < L->n)
        step = step < 2 ? 2 : step < 5 ? 5 : step + 5;
    rp_canvas_text(out, L->gx, L->y_axis, "end layer j (block [i,j) repeats)", S, INK);
    for (int jj = h->start + 1; jj <= h->end; jj++) {
        if ((jj - h->start) % step && jj != h->end) continue;
        snprintf(buf, sizeof buf, "%d", jj);
        const int x = L->gx + (jj - h->start - 1) * cell + (cell - rp_text_width(buf, S)) / 2;
        rp_canvas_text(out, x, L->y_ticks, buf, S, INK);
    }
    for (int ii = h->start; ii < h->end; ii++) {
        if ((ii - h->start) % step && ii != h->end - 1) continue;
        snprintf(buf, sizeof buf, "%d", ii);
        const int y = L->gy + (ii - h->start) * cell + (cell - RP_FONT_H * S) / 2 + S;
        rp_canvas_text(out, L->gx - 6 - rp_text_width(buf, S), y, buf, S, INK);
    }
    /* the axis name of i, one letter per line down the left edge */
    static const char *const i_name = "start i";
    for (int k = 0; i_name[k]; k++) {
        char ch[2] = {i_name[k], 0};
        rp_canvas_text(out, L->M, L->gy + k * (L->lh - 2), ch, S, INK);
    }
}

static void draw_cells(rp_canvas *out, const rp_heatmap *h, const hm_layout *L) {
    const int cell = L->cell;
    const bool annotate = cell >= 5 * (RP_FONT_W + 1) + 6;
    char buf[160];
    for (int ii = h->start; ii < h->end; ii++)
        for (int jj = ii + 1; jj <= h->end; jj++) {
            if (jj - ii > L->max_extra) continue;
            const int x = L->gx + (jj - h->start - 1) * cell, y = L->gy + (ii - h->start) * cell;
            const rp_scan_row *row = NULL;
            for (int r = 0; r < h->n_rows && !row; r++)
                if (h->rows[r].i == ii && h->rows[r].j == jj) row = &h->rows[r];
            const rp_rgb col =
                row ? rp_heatmap_colour(row->delta, h->sign, L->good_max, L->bad_max) : MISSING;
            rp_canvas_rect(out, x, y, cell, cell, col);
            rp_canvas_frame(out, x, y, cell + 1, cell + 1, 1, GRID);
            if (row && annotate) {
                short_value(buf, sizeof buf, row->delta);
                rp_canvas_text(out, x + (cell - rp_text_width(buf, 1)) / 2,
                               y + cell - RP_FONT_H - 4, buf, 1, dark(col) ? WHITE : INK);
            }
        }
}

/* the base plan's blocks: hatched, labelled */
static void draw_base(rp_canvas *out, const rp_heatmap *h, const hm_layout *L) {
    if (!h->base) return;
    const int cell = L->cell;
    for (int k = 0; k < h->base->n; k++) {
        const int ii = h->base->b[k].i, jj = h->base->b[k].j;
        if (ii < h->start || jj > h->end) continue;
        const int x = L->gx + (jj - h->start - 1) * cell, y = L->gy + (ii - h->start) * cell;
        rp_canvas_rect(out, x, y, cell, cell, BASE_BG);
        for (int d = 0; d < 2 * cell; d += RP_MAX(4, cell / 6)) /* diagonal hatching */
            for (int t = 0; t < cell; t++)
                if (d - t >= 0 && d - t < cell) rp_canvas_rect(out, x + t, y + d - t, 1, 1, INK);
        const int t = RP_MAX(2, cell / 12);
        rp_canvas_frame(out, x - 1, y - 1, cell + 3, cell + 3, t, INK);
        if (cell >= 4 * (RP_FONT_W + 1) + 4) {
            const int w = rp_text_width("base", 1);
            rp_canvas_rect(out, x + (cell - w) / 2 - 1, y + (cell - RP_FONT_H) / 2 - 1, w + 2,
                           RP_FONT_H + 2, WHITE);
            rp_canvas_text(out, x + (cell - w) / 2, y + (cell - RP_FONT_H) / 2, "base", 1, INK);
        }
    }
}

/* the best blocks: outlined, ranked */
static void draw_best(rp_canvas *out, const rp_heatmap *h, const hm_layout *L, const hm_ranks *k) {
    const int cell = L->cell;
    char buf[32];
    for (int r = k->n_best - 1; r >= 0; r--) {
        const rp_scan_row *row = &h->rows[k->order[r].idx];
        if (row->i < h->start || row->j > h->end) continue;
        const int x = L->gx + (row->j - h->start - 1) * cell,
                  y = L->gy + (row->i - h->start) * cell;
        /* black outside, white inside: visible on the darkest blue and red */
        const int t = RP_MAX(2, cell / 12);
        rp_canvas_frame(out, x - 1, y - 1, cell + 3, cell + 3, t, INK);
        rp_canvas_frame(out, x - 1 + t, y - 1 + t, cell + 3 - 2 * t, cell + 3 - 2 * t, 1, WHITE);
        snprintf(buf, sizeof buf, "%d", r + 1);
        const rp_rgb col = rp_heatmap_colour(row->delta, h->sign, L->good_max, L->bad_max);
        const int ts = cell >= 24 ? 2 : 1;
        rp_canvas_text(out, x + RP_MAX(3, cell / 10), y + RP_MAX(3, cell / 10), buf, ts,
                       dark(col) ? WHITE : INK);
    }
}

/* the bar's ticks: at the ends, at zero and halfway along the colour ramp */
static void draw_ticks(rp_canvas *out, const rp_heatmap *h, const hm_layout *L, int zero_y) {
    const int S = L->S, lh = L->lh, bar_x = L->bar_x, bar_y = L->bar_y, bar_w = L->bar_w,
              bar_h = L->bar_h;
    const bool has_good = L->good_max > 0, has_bad = L->bad_max > 0;
    struct {
        int y;
        double v;
        bool on;
    } ticks[5] = {
        {bar_y, -h->sign * L->bad_max, has_bad},
        {(bar_y + zero_y) / 2, -h->sign * L->bad_max / 4, has_bad && zero_y - bar_y > 3 * lh},
        {zero_y, 0.0, true},
        {(zero_y + bar_y + bar_h - 1) / 2, h->sign * L->good_max / 4,
         has_good && bar_y + bar_h - zero_y > 3 * lh},
        {bar_y + bar_h - 1, h->sign * L->good_max, has_good},
    };
    char buf[32];
    for (int k = 0; k < 5; k++) {
        if (!ticks[k].on) continue;
        rp_canvas_rect(out, bar_x + bar_w, ticks[k].y, 6, 1, INK);
        if (ticks[k].v == 0)
            snprintf(buf, sizeof buf, "0");
        else
            long_value(buf, sizeof buf, ticks[k].v);
        int ty = ticks[k].y - RP_FONT_H * S / 2;
        ty = RP_MAX(bar_y - S * 2, RP_MIN(ty, bar_y + bar_h - RP_FONT_H * S + 2 * S));
        rp_canvas_text(out, bar_x + bar_w + 10, ty, buf, S, INK);
    }
}

/* legend: the bar from worse (top) through zero to better (bottom), then the
 * key under it (only what the map holds) */
static void draw_legend(rp_canvas *out, const rp_heatmap *h, const hm_layout *L, int n_ranked) {
    const int S = L->S, cw = L->cw, lh = L->lh, bar_x = L->bar_x, bar_y = L->bar_y,
              bar_w = L->bar_w, bar_h = L->bar_h;
    rp_canvas_text(out, bar_x, L->gy - lh, h->unit ? h->unit : "change", S, INK);
    const bool has_good = L->good_max > 0, has_bad = L->bad_max > 0;
    const int zero_y = has_good && has_bad ? bar_y + bar_h / 2
                       : has_bad           ? bar_y + bar_h - 1
                                           : bar_y;
    for (int y = bar_y; y < bar_y + bar_h; y++) {
        double d;
        if (y < zero_y) {
            const double t = (double)(zero_y - y) / (double)(zero_y - bar_y);
            d = -h->sign * L->bad_max * t * t;
        } else {
            const double span = (double)(bar_y + bar_h - 1 - zero_y);
            const double t = span > 0 ? (double)(y - zero_y) / span : 0;
            d = h->sign * L->good_max * t * t;
        }
        rp_canvas_rect(out, bar_x, y, bar_w, 1,
                       rp_heatmap_colour(d, h->sign, L->good_max, L->bad_max));
    }
    rp_canvas_frame(out, bar_x - 1, bar_y - 1, bar_w + 2, bar_h + 2, 1, GREY_TXT);
    draw_ticks(out, h, L, zero_y);
    int ky = bar_y + bar_h + 8;
    if (has_good) {
        rp_canvas_text(out, bar_x - 4, ky, "blue: better", S, INK);
        ky += lh;
    }
    if (has_bad) {
        rp_canvas_text(out, bar_x - 4, ky, "red: worse", S, INK);
        ky += lh;
    }
    rp_canvas_rect(out, bar_x - 4, ky + 2, 2 * cw, lh - 6, MISSING);
    rp_canvas_frame(out, bar_x - 4, ky + 2, 2 * cw, lh - 6, 1, GRID);
    rp_canvas_text(out, bar_x - 4 + 2 * cw + 8, ky, "not run", S, INK);
    if (h->base) {
        ky += lh;
        rp_canvas_rect(out, bar_x - 4, ky + 2, 2 * cw, lh - 6, BASE_BG);
        rp_canvas_frame(out, bar_x - 4, ky + 2, 2 * cw, lh - 6, 1, INK);
        rp_canvas_text(out, bar_x - 4 + 2 * cw + 8, ky, "base plan", S, INK);
    }
    if (n_ranked < h->n_rows) {
        ky += lh;
        rp_canvas_rect(out, bar_x - 4, ky + 2, 2 * cw, lh - 6, NONFINITE);
        rp_canvas_text(out, bar_x - 4 + 2 * cw + 8, ky, "not finite", S, INK);
    }
}

/* panel: best blocks, then the Pareto list */
static void draw_panel(rp_canvas *out, const rp_heatmap *h, const hm_layout *L, const hm_ranks *k) {
    const int S = L->S, lh = L->lh, panel_x = L->panel_x;
    char buf[160];
    int py = L->gy - lh;
    rp_canvas_text(out, panel_x, py, "best blocks", S, INK);
    py += lh + 4;
    for (int r = 0; r < k->n_best; r++, py += lh) {
        const rp_scan_row *row = &h->rows[k->order[r].idx];
        char v[32];
        long_value(v, sizeof v, row->delta);
        snprintf(buf, sizeof buf, "%d. %d,%d (+%d) %s", r + 1, row->i, row->j, row->extra, v);
        rp_canvas_text(out, panel_x, py, buf, S, INK);
    }
    py += lh / 2;
    rp_canvas_text(out, panel_x, py, "best per extra layers", S, INK);
    py += lh + 4;
    for (int e = 1; e <= L->pareto_max; e++) {
        if (k->best[e] < 0) continue;
        const rp_scan_row *row = &h->rows[k->best[e]];
        char v[32];
        long_value(v, sizeof v, row->delta);
        snprintf(buf, sizeof buf, "+%-2d %d,%d %s%s", e, row->i, row->j, v,
                 k->front[e] ? " *" : "");
        rp_canvas_text(out, panel_x, py, buf, S, k->front[e] ? INK : GREY_TXT);
        py += lh;
    }
    bool any_front = false;
    for (int e = 1; e <= L->pareto_max; e++) any_front |= k->front[e];
    rp_canvas_text(out, panel_x, py + 4,
                   any_front ? "* beats every smaller block" : "(no block beats the identity)", S,
                   GREY_TXT);
}

rp_status rp_heatmap_draw(const rp_heatmap *h, rp_canvas *out) {
    memset(out, 0, sizeof *out);
    const int n = h->end - h->start;
    if (h->start < 0 || n < 1 || n > RP_MAX_LAYERS)
        return rp_fail(RP_ERR_INVALID_ARG, "heatmap: layer range %d..%d", h->start, h->end);
    hm_layout L;
    hm_ranks k;
    const int max_extra = RP_MAX(h->max_extra > 0 ? RP_MIN(h->max_extra, n) : n, rows_max_extra(h));
    rp_status s = rank_blocks(h, max_extra, &k);
    if (s) return s;
    layout(h, k.n_best, &L);
    if ((s = rp_canvas_init(out, L.width, L.height, WHITE))) {
        ranks_free(&k);
        return s;
    }
    if (h->title) rp_canvas_text(out, L.M, L.M, h->title, L.S, INK);
    if (h->note) rp_canvas_text(out, L.M, L.y_note, h->note, L.S, GREY_TXT);
    draw_axes(out, h, &L);
    draw_cells(out, h, &L);
    draw_base(out, h, &L);
    draw_best(out, h, &L, &k);
    draw_legend(out, h, &L, k.n_ranked);
    draw_panel(out, h, &L, &k);
    ranks_free(&k);
    return RP_OK;
}
