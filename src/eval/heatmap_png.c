/* The public entry to the scan heatmap: drawn (png_heatmap.c) on a canvas
 * and written as a PNG (png_canvas.c). */
#include "eval/png_canvas.h"

#include <string.h>

rp_status rp_heatmap_write_png(const rp_heatmap *h, const char *path) {
    rp_canvas cv;
    memset(&cv, 0, sizeof cv);
    rp_status s = rp_heatmap_draw(h, &cv);
    if (!s) s = rp_canvas_write_png(&cv, path);
    rp_canvas_free(&cv);
    return s;
}
