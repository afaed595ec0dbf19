/* RGB canvas, a 5x8 bitmap font and PNG output through libpng. */
#include "eval/png_canvas.h"
#include "base/util.h"

#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

rp_status rp_canvas_init(rp_canvas *c, int w, int h, rp_rgb fill) {
    memset(c, 0, sizeof *c);
    if (w < 1 || h < 1 || w > 16384 || h > 16384)
        return rp_fail(RP_ERR_INVALID_ARG, "canvas of %d x %d pixels: each side must be 1..16384",
                       w, h);
    c->px = rp_malloc((size_t)w * (size_t)h * 3, "image");
    if (!c->px) return RP_ERR_NOMEM;
    c->w = w;
    c->h = h;
    for (size_t k = 0; k < (size_t)w * (size_t)h; k++) {
        c->px[3 * k] = fill.r;
        c->px[3 * k + 1] = fill.g;
        c->px[3 * k + 2] = fill.b;
    }
    return RP_OK;
}

void rp_canvas_free(rp_canvas *c) {
    free(c->px);
    memset(c, 0, sizeof *c);
}

void rp_canvas_rect(rp_canvas *c, int x, int y, int w, int h, rp_rgb col) {
    const int x0 = RP_MAX(x, 0), y0 = RP_MAX(y, 0);
    const int x1 = RP_MIN(x + w, c->w), y1 = RP_MIN(y + h, c->h);
    for (int yy = y0; yy < y1; yy++)
        for (int xx = x0; xx < x1; xx++) {
            uint8_t *p = c->px + ((size_t)yy * (size_t)c->w + (size_t)xx) * 3;
            p[0] = col.r;
            p[1] = col.g;
            p[2] = col.b;
        }
}

void rp_canvas_frame(rp_canvas *c, int x, int y, int w, int h, int t, rp_rgb col) {
    rp_canvas_rect(c, x, y, w, t, col);
    rp_canvas_rect(c, x, y + h - t, w, t, col);
    rp_canvas_rect(c, x, y, t, h, col);
    rp_canvas_rect(c, x + w - t, y, t, h, col);
}

/* ---- font ------------------------------------------------------------------
 * Printable ASCII, 5 columns by 8 rows: capitals and digits stand on rows
 * 0..6, the x-height is rows 2..6, descenders reach row 7. A row left out is
 * empty. */
static const char *const g_font[95][RP_FONT_H] = {
    /*   */ {NULL},
    /* ! */ {"  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "     ", "  #  "},
    /* " */ {" # # ", " # # ", " # # "},
    /* # */ {" # # ", " # # ", "#####", " # # ", "#####", " # # ", " # # "},
    /* $ */ {"  #  ", " ####", "# #  ", " ### ", "  # #", "#### ", "  #  "},
    /* % */ {"##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##"},
    /* & */ {" ##  ", "#  # ", "# #  ", " #   ", "# # #", "#  # ", " ## #"},
    /* ' */ {"  #  ", "  #  ", " #   "},
    /* ( */ {"   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "},
    /* ) */ {" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "},
    /* * */ {"     ", "  #  ", "# # #", " ### ", "# # #", "  #  "},
    /* + */ {"     ", "  #  ", "  #  ", "#####", "  #  ", "  #  "},
    /* , */ {"     ", "     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "},
    /* - */ {"     ", "     ", "     ", "#####"},
    /* . */ {"     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "},
    /* / */ {"     ", "    #", "   # ", "  #  ", " #   ", "#    "},
    /* 0 */ {" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "},
    /* 1 */ {"  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
    /* 2 */ {" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"},
    /* 3 */ {"#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "},
    /* 4 */ {"   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "},
    /* 5 */ {"#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "},
    /* 6 */ {"  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "},
    /* 7 */ {"#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "},
    /* 8 */ {" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "},
    /* 9 */ {" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "},
    /* : */ {"     ", " ##  ", " ##  ", "     ", " ##  ", " ##  "},
    /* ; */ {"     ", " ##  ", " ##  ", "     ", " ##  ", "  #  ", " #   "},
    /* < */ {"   # ", "  #  ", " #   ", "#    ", " #   ", "  #  ", "   # "},
    /* = */ {"     ", "     ", "#####", "     ", "#####"},
    /* > */ {" #   ", "  #  ", "   # ", "    #", "   # ", "  #  ", " #   "},
    /* ? */ {" ### ", "#   #", "    #", "   # ", "  #  ", "     ", "  #  "},
    /* @ */ {" ### ", "#   #", "    #", " ## #", "# # #", "# # #", " ### "},
    /* A */ {" ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"},
    /* B */ {"#### ", "#   #", "#   #", "#### ", "#   #", "#   #", "#### "},
    /* C */ {" ### ", "#   #", "#    ", "#    ", "#    ", "#   #", " ### "},
    /* D */ {"###  ", "#  # ", "#   #", "#   #", "#   #", "#  # ", "###  "},
    /* E */ {"#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####"},
    /* F */ {"#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#    "},
    /* G */ {" ### ", "#   #", "#    ", "# ###", "#   #", "#   #", " ####"},
    /* H */ {"#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"},
    /* I */ {" ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
    /* J */ {"  ###", "   # ", "   # ", "   # ", "   # ", "#  # ", " ##  "},
    /* K */ {"#   #", "#  # ", "# #  ", "##   ", "# #  ", "#  # ", "#   #"},
    /* L */ {"#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####"},
    /* M */ {"#   #", "## ##", "# # #", "# # #", "#   #", "#   #", "#   #"},
    /* N */ {"#   #", "#   #", "##  #", "# # #", "#  ##", "#   #", "#   #"},
    /* O */ {" ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "},
    /* P */ {"#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    "},
    /* Q */ {" ### ", "#   #", "#   #", "#   #", "# # #", "#  # ", " ## #"},
    /* R */ {"#### ", "#   #", "#   #", "#### ", "# #  ", "#  # ", "#   #"},
    /* S */ {" ####", "#    ", "#    ", " ### ", "    #", "    #", "#### "},
    /* T */ {"#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "},
    /* U */ {"#   #", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "},
    /* V */ {"#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  "},
    /* W */ {"#   #", "#   #", "#   #", "# # #", "# # #", "# # #", " # # "},
    /* X */ {"#   #", "#   #", " # # ", "  #  ", " # # ", "#   #", "#   #"},
    /* Y */ {"#   #", "#   #", " # # ", "  #  ", "  #  ", "  #  ", "  #  "},
    /* Z */ {"#####", "    #", "   # ", "  #  ", " #   ", "#    ", "#####"},
    /* [ */ {" ### ", " #   ", " #   ", " #   ", " #   ", " #   ", " ### "},
    /* \ */ {"     ", "#    ", " #   ", "  #  ", "   # ", "    #"},
    /* ] */ {" ### ", "   # ", "   # ", "   # ", "   # ", "   # ", " ### "},
    /* ^ */ {"  #  ", " # # ", "#   #"},
    /* _ */ {"     ", "     ", "     ", "     ", "     ", "     ", "     ", "#####"},
    /* ` */ {" #   ", "  #  "},
    /* a */ {"     ", "     ", " ### ", "    #", " ####", "#   #", " ####"},
    /* b */ {"#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#### "},
    /* c */ {"     ", "     ", " ### ", "#    ", "#    ", "#   #", " ### "},
    /* d */ {"    #", "    #", " ## #", "#  ##", "#   #", "#   #", " ####"},
    /* e */ {"     ", "     ", " ### ", "#   #", "#####", "#    ", " ### "},
    /* f */ {"  ## ", " #  #", " #   ", "###  ", " #   ", " #   ", " #   "},
    /* g */ {"     ", "     ", " ####", "#   #", "#   #", " ####", "    #", " ### "},
    /* h */ {"#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#   #"},
    /* i */ {"  #  ", "     ", " ##  ", "  #  ", "  #  ", "  #  ", " ### "},
    /* j */ {"   # ", "     ", "  ## ", "   # ", "   # ", "   # ", "#  # ", " ##  "},
    /* k */ {"#    ", "#    ", "#  # ", "# #  ", "##   ", "# #  ", "#  # "},
    /* l */ {" ##  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
    /* m */ {"     ", "     ", "## # ", "# # #", "# # #", "#   #", "#   #"},
    /* n */ {"     ", "     ", "# ## ", "##  #", "#   #", "#   #", "#   #"},
    /* o */ {"     ", "     ", " ### ", "#   #", "#   #", "#   #", " ### "},
    /* p */ {"     ", "     ", "#### ", "#   #", "#   #", "#### ", "#    ", "#    "},
    /* q */ {"     ", "     ", " ####", "#   #", "#   #", " ####", "    #", "    #"},
    /* r */ {"     ", "     ", "# ## ", "##  #", "#    ", "#    ", "#    "},
    /* s */ {"     ", "     ", " ####", "#    ", " ### ", "    #", "#### "},
    /* t */ {" #   ", " #   ", "###  ", " #   ", " #   ", " #  #", "  ## "},
    /* u */ {"     ", "     ", "#   #", "#   #", "#   #", "#  ##", " ## #"},
    /* v */ {"     ", "     ", "#   #", "#   #", "#   #", " # # ", "  #  "},
    /* w */ {"     ", "     ", "#   #", "#   #", "# # #", "# # #", " # # "},
    /* x */ {"     ", "     ", "#   #", " # # ", "  #  ", " # # ", "#   #"},
    /* y */ {"     ", "     ", "#   #", "#   #", "#   #", " ####", "    #", " ### "},
    /* z */ {"     ", "     ", "#####", "   # ", "  #  ", " #   ", "#####"},
    /* { */ {"   # ", "  #  ", "  #  ", " #   ", "  #  ", "  #  ", "   # "},
    /* | */ {"  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "},
    /* } */ {" #   ", "  #  ", "  #  ", "   # ", "  #  ", "  #  ", " #   "},
    /* ~ */ {"     ", "     ", " #   ", "# # #", "   # "},
};

bool rp_font_pixel(char ch, int col, int row) {
    if (ch < 32 || ch > 126) ch = '?';
    if (col < 0 || col >= RP_FONT_W || row < 0 || row >= RP_FONT_H) return false;
    const char *r = g_font[ch - 32][row];
    return r && r[col] == '#';
}

int rp_text_width(const char *s, int scale) {
    size_t n = strlen(s);
    return n ? (int)n * (RP_FONT_W + 1) * scale - scale : 0;
}

int rp_canvas_text(rp_canvas *c, int x, int y, const char *s, int scale, rp_rgb col) {
    int cx = x;
    for (const char *p = s; *p; p++) {
        for (int row = 0; row < RP_FONT_H; row++)
            for (int k = 0; k < RP_FONT_W; k++)
                if (rp_font_pixel(*p, k, row))
                    rp_canvas_rect(c, cx + k * scale, y + row * scale, scale, scale, col);
        cx += (RP_FONT_W + 1) * scale;
    }
    return rp_text_width(s, scale);
}

/* ---- PNG ------------------------------------------------------------------ */

typedef struct png_err {
    char msg[256];
} png_err;

static void on_png_error(png_structp png, png_const_charp msg) {
    png_err *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

rp_status rp_canvas_write_png(const rp_canvas *c, const char *path) {
    rp_atomic_file af;
    rp_status s = rp_atomic_open(&af, path);
    if (s) return s;
    png_err err = {{0}};
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(&png, &info);
        rp_atomic_abort(&af);
        return rp_fail(RP_ERR_NOMEM, "writing %s: libpng could not start", path);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        rp_atomic_abort(&af);
        return rp_fail(RP_ERR_IO, "writing PNG %s: %s", path, err.msg);
    }
    png_init_io(png, af.fp);
    png_set_IHDR(png, info, (png_uint_32)c->w, (png_uint_32)c->h, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_text txt = {
        .compression = PNG_TEXT_COMPRESSION_NONE, .key = "Software", .text = "reprise " RP_VERSION};
    png_set_text(png, info, &txt, 1);
    png_write_info(png, info);
    for (int y = 0; y < c->h; y++) png_write_row(png, c->px + (size_t)y * (size_t)c->w * 3);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return rp_atomic_commit(&af);
}
