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
                    NONFINITE = {70, 70, 70};

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

rp_status rp_heatmap_draw(const rp_heatmap *h, rp_canvas *out) {
    memset(out, 0, sizeof *out);
    const int n = h->end - h->start;
    if (h->start < 0 || n < 1 || n > RP_MAX_LAYERS)
        return rp_fail(RP_ERR_INVALID_ARG, "heatmap: layer range %d..%d", h->start, h->end);
    const int S = 2; /* text scale */
    const int cw = (RP_FONT_W + 1) * S, lh = 10 * S;
    const int cell = RP_MAX(8, RP_MIN(48, 576 / n));
    const int grid = cell * n;
    const int max_extra = h->max_extra > 0 ? RP_MIN(h->max_extra, n) : n;

    /* the colour scale: each side reaches its largest magnitude */
    double good_max = 0, bad_max = 0;
    for (int r = 0; r < h->n_rows; r++) {
        const double g = h->sign * h->rows[r].delta;
        if (!isfinite(g)) continue;
        if (g > good_max) good_max = g;
        if (-g > bad_max) bad_max = -g;
    }
    /* ranks of the best blocks and the Pareto list */
    rank_item *order = rp_malloc(((size_t)h->n_rows + 1) * sizeof *order, "heatmap ranks");
    int *best = rp_malloc(((size_t)max_extra + 1) * sizeof *best, "heatmap Pareto list");
    bool *front = rp_malloc(((size_t)max_extra + 1) * sizeof *front, "heatmap Pareto list");
    if (!order || !best || !front) {
        free(order);
        free(best);
        free(front);
        return RP_ERR_NOMEM;
    }
    int n_ranked = 0;
    for (int r = 0; r < h->n_rows; r++)
        if (isfinite(h->rows[r].delta))
            order[n_ranked++] = (rank_item){h->sign * h->rows[r].delta, h->rows[r].extra,
                                            h->rows[r].i, h->rows[r].j, r};
    qsort(order, (size_t)n_ranked, sizeof *order, cmp_rank);
    const int n_best = RP_MIN(h->n_best, n_ranked);
    rp_scan_pareto(h->rows, h->n_rows, h->sign, max_extra, best, front);

    /* layout: title, grid with its axes, legend bar, text panel */
    char buf[160];
    const int M = 20;
    const int lab_digits = h->end >= 100 ? 3 : h->end >= 10 ? 2 : 1;
    const int ylab_w = lab_digits * cw + 8;
    const int gx = M + ylab_w + lh + 6; /* room for the tick labels and the axis name */
    const int y_note = M + lh + 2, y_axis = y_note + lh + 16, y_ticks = y_axis + lh + 6;
    const int gy = y_ticks + lh + 2;
    const int bar_x = gx + grid + 36, bar_w = 22, bar_h = RP_MIN(RP_MAX(grid, 160), 320);
    const int bar_y = gy + lh + 4;
    const int panel_x = bar_x + bar_w + 12 * cw;
    const int panel_chars = 30;
    int panel_lines = 4 + n_best + max_extra;
    int width = panel_x + panel_chars * cw + M;
    if (h->title) width = RP_MAX(width, M + rp_text_width(h->title, S) + M);
    if (h->note) width = RP_MAX(width, M + rp_text_width(h->note, S) + M);
    int height = RP_MAX(gy + grid + 2 * lh + 20, gy + panel_lines * lh + M);
    height = RP_MAX(height, bar_y + bar_h + 4 * lh + 12 + M);
    rp_status s = rp_canvas_init(out, width, height, WHITE);
    if (s) {
        free(order);
        free(best);
        free(front);
        return s;
    }
    if (h->title) rp_canvas_text(out, M, M, h->title, S, INK);
    if (h->note) rp_canvas_text(out, M, y_note, h->note, S, GREY_TXT);

    /* axes: j across the top, i down the left; a label every `step` layers */
    int step = 1;
    while (step * cell < lab_digits * cw + 4 && step < n)
        step = step < 2 ? 2 : step < 5 ? 5 : step + 5;
    rp_canvas_text(out, gx, y_axis, "end layer j (block [i,j) repeats)", S, INK);
    for (int jj = h->start + 1; jj <= h->end; jj++) {
        if ((jj - h->start) % step && jj != h->end) continue;
        snprintf(buf, sizeof buf, "%d", jj);
        const int x = gx + (jj - h->start - 1) * cell + (cell - rp_text_width(buf, S)) / 2;
        rp_canvas_text(out, x, y_ticks, buf, S, INK);
    }
    for (int ii = h->start; ii < h->end; ii++) {
        if ((ii - h->start) % step && ii != h->end - 1) continue;
        snprintf(buf, sizeof buf, "%d", ii);
        const int y = gy + (ii - h->start) * cell + (cell - RP_FONT_H * S) / 2 + S;
        rp_canvas_text(out, gx - 6 - rp_text_width(buf, S), y, buf, S, INK);
    }
    /* the axis name of i, one letter per line down the left edge */
    static const char *const i_name = "start i";
    for (int k = 0; i_name[k]; k++) {
        char ch[2] = {i_name[k], 0};
        rp_canvas_text(out, M, gy + k * (lh - 2), ch, S, INK);
    }

    /* cells */
    const bool annotate = cell >= 5 * (RP_FONT_W + 1) + 6;
    for (int ii = h->start; ii < h->end; ii++)
        for (int jj = ii + 1; jj <= h->end; jj++) {
            if (jj - ii > max_extra) continue;
            const int x = gx + (jj - h->start - 1) * cell, y = gy + (ii - h->start) * cell;
            const rp_scan_row *row = NULL;
            for (int r = 0; r < h->n_rows && !row; r++)
                if (h->rows[r].i == ii && h->rows[r].j == jj) row = &h->rows[r];
            const rp_rgb col =
                row ? rp_heatmap_colour(row->delta, h->sign, good_max, bad_max) : MISSING;
            rp_canvas_rect(out, x, y, cell, cell, col);
            rp_canvas_frame(out, x, y, cell + 1, cell + 1, 1, GRID);
            if (row && annotate) {
                short_value(buf, sizeof buf, row->delta);
                rp_canvas_text(out, x + (cell - rp_text_width(buf, 1)) / 2,
                               y + cell - RP_FONT_H - 4, buf, 1, dark(col) ? WHITE : INK);
            }
        }
    /* the best blocks: outlined, ranked */
    for (int k = n_best - 1; k >= 0; k--) {
        const rp_scan_row *row = &h->rows[order[k].idx];
        if (row->i < h->start || row->j > h->end) continue;
        const int x = gx + (row->j - h->start - 1) * cell, y = gy + (row->i - h->start) * cell;
        /* black outside, white inside: visible on the darkest blue and red */
        const int t = RP_MAX(2, cell / 12);
        rp_canvas_frame(out, x - 1, y - 1, cell + 3, cell + 3, t, INK);
        rp_canvas_frame(out, x - 1 + t, y - 1 + t, cell + 3 - 2 * t, cell + 3 - 2 * t, 1, WHITE);
        snprintf(buf, sizeof buf, "%d", k + 1);
        const rp_rgb col = rp_heatmap_colour(row->delta, h->sign, good_max, bad_max);
        const int ts = cell >= 24 ? 2 : 1;
        rp_canvas_text(out, x + RP_MAX(3, cell / 10), y + RP_MAX(3, cell / 10), buf, ts,
                       dark(col) ? WHITE : INK);
    }

    /* legend: the bar from worse (top) through zero to better (bottom) */
    rp_canvas_text(out, bar_x, gy - lh, h->unit ? h->unit : "change", S, INK);
    const bool has_good = good_max > 0, has_bad = bad_max > 0;
    const int zero_y = has_good && has_bad ? bar_y + bar_h / 2
                       : has_bad           ? bar_y + bar_h - 1
                                           : bar_y;
    for (int y = bar_y; y < bar_y + bar_h; y++) {
        double d;
        if (y < zero_y) {
            const double t = (double)(zero_y - y) / (double)(zero_y - bar_y);
            d = -h->sign * bad_max * t * t;
        } else {
            const double span = (double)(bar_y + bar_h - 1 - zero_y);
            const double t = span > 0 ? (double)(y - zero_y) / span : 0;
            d = h->sign * good_max * t * t;
        }
        rp_canvas_rect(out, bar_x, y, bar_w, 1, rp_heatmap_colour(d, h->sign, good_max, bad_max));
    }
    rp_canvas_frame(out, bar_x - 1, bar_y - 1, bar_w + 2, bar_h + 2, 1, GREY_TXT);
    /* ticks at the ends, at zero and halfway along the colour ramp */
    struct {
        int y;
        double v;
        bool on;
    } ticks[5] = {
        {bar_y, -h->sign * bad_max, has_bad},
        {(bar_y + zero_y) / 2, -h->sign * bad_max / 4, has_bad && zero_y - bar_y > 3 * lh},
        {zero_y, 0.0, true},
        {(zero_y + bar_y + bar_h - 1) / 2, h->sign * good_max / 4,
         has_good && bar_y + bar_h - zero_y > 3 * lh},
        {bar_y + bar_h - 1, h->sign * good_max, has_good},
    };
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
    /* the key under the bar: only what the map holds */
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
    if (n_ranked < h->n_rows) {
        ky += lh;
        rp_canvas_rect(out, bar_x - 4, ky + 2, 2 * cw, lh - 6, NONFINITE);
        rp_canvas_text(out, bar_x - 4 + 2 * cw + 8, ky, "not finite", S, INK);
    }

    /* panel: best blocks, then the Pareto list */
    int py = gy - lh;
    rp_canvas_text(out, panel_x, py, "best blocks", S, INK);
    py += lh + 4;
    for (int k = 0; k < n_best; k++, py += lh) {
        const rp_scan_row *row = &h->rows[order[k].idx];
        char v[32];
        long_value(v, sizeof v, row->delta);
        snprintf(buf, sizeof buf, "%d. %d,%d (+%d) %s", k + 1, row->i, row->j, row->extra, v);
        rp_canvas_text(out, panel_x, py, buf, S, INK);
    }
    py += lh / 2;
    rp_canvas_text(out, panel_x, py, "best per extra layers", S, INK);
    py += lh + 4;
    for (int k = 1; k <= max_extra; k++) {
        if (best[k] < 0) continue;
        const rp_scan_row *row = &h->rows[best[k]];
        char v[32];
        long_value(v, sizeof v, row->delta);
        snprintf(buf, sizeof buf, "+%-2d %d,%d %s%s", k, row->i, row->j, v, front[k] ? " *" : "");
        rp_canvas_text(out, panel_x, py, buf, S, front[k] ? INK : GREY_TXT);
        py += lh;
    }
    bool any_front = false;
    for (int k = 1; k <= max_extra; k++) any_front |= front[k];
    rp_canvas_text(out, panel_x, py + 4,
                   any_front ? "* beats every smaller block" : "(no block beats the identity)", S,
                   GREY_TXT);
    free(order);
    free(best);
    free(front);
    return RP_OK;
}
