/* A small RGB canvas written as PNG (libpng): filled rectangles, lines and
 * text in a 5x8 bitmap font drawn for reprise (printable ASCII; anything else
 * is drawn as '?'). Used for the scan heatmap (png_heatmap.c). */
#ifndef RP_PNG_CANVAS_H
#define RP_PNG_CANVAS_H

#include "reprise.h"
#include "eval/scan.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct rp_rgb {
    uint8_t r, g, b;
} rp_rgb;

typedef struct rp_canvas {
    int w, h;
    uint8_t *px; /* [h][w][3] */
} rp_canvas;

#define RP_FONT_W 5 /* glyph pixels; a character advances (RP_FONT_W + 1) * scale */
#define RP_FONT_H 8 /* rows 0..6 above the baseline, row 7 for descenders; a line is 10 * scale */

rp_status rp_canvas_init(rp_canvas *c, int w, int h, rp_rgb fill);
void rp_canvas_free(rp_canvas *c);
void rp_canvas_rect(rp_canvas *c, int x, int y, int w, int h, rp_rgb col); /* clipped */
void rp_canvas_frame(rp_canvas *c, int x, int y, int w, int h, int t,
                     rp_rgb col); /* outline t px wide */
/* Text with its top-left corner at (x, y); returns the width drawn. */
int rp_canvas_text(rp_canvas *c, int x, int y, const char *s, int scale, rp_rgb col);
int rp_text_width(const char *s, int scale);
/* Whether glyph ch has any pixel set at (col, row) (for tests). */
bool rp_font_pixel(char ch, int col, int row);
/* Writes the canvas as an 8-bit RGB PNG, atomically. */
rp_status rp_canvas_write_png(const rp_canvas *c, const char *path);

/* ---- the scan heatmap ---------------------------------------------------- */

/* rp_heatmap (the description of a heatmap) and rp_heatmap_write_png are
 * public (reprise_tools.h). */

/* Draws h (described in reprise_tools.h) on a new canvas. */
rp_status rp_heatmap_draw(const rp_heatmap *h, rp_canvas *out);
/* The colour of delta d on a scale reaching good_max on the better side and
 * bad_max on the worse side (both > 0). */
rp_rgb rp_heatmap_colour(double d, int sign, double good_max, double bad_max);

#endif
