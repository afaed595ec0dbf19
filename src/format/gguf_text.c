/* GGUF values as text (what `reprise inspect` shows, and the metadata values
 * of the public API) and the copy of a file through the reader and writer. */
#include "format/gguf.h"
#include "base/util.h"

#include <inttypes.h>
#include <string.h>

#define PREVIEW_STR 160 /* bytes of a string shown in a preview */
#define PREVIEW_ARR 8   /* elements of an array shown in a preview */

/* The text of b into buf as snprintf would (b may hold NUL bytes); its length. */
static int buf_out(const rp_buf *b, char *buf, size_t size) {
    if (size) {
        const size_t n = b->len < size - 1 ? b->len : size - 1;
        if (n) memcpy(buf, b->data, n);
        buf[n] = 0;
    }
    return b->len > (size_t)INT32_MAX ? INT32_MAX : (int)b->len;
}

static bool put_escaped(rp_buf *b, const char *s, uint64_t len, uint64_t max) {
    bool ok = rp_buf_append(b, "\"", 1);
    for (uint64_t i = 0; ok && i < len && i < max; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            ok = rp_buf_printf(b, "\\%c", c);
        else if (c == '\n')
            ok = rp_buf_append(b, "\\n", 2);
        else if (c == '\t')
            ok = rp_buf_append(b, "\\t", 2);
        else if (c < 0x20 || c == 0x7f)
            ok = rp_buf_printf(b, "\\x%02x", c);
        else
            ok = rp_buf_append(b, &s[i], 1);
    }
    ok = ok && rp_buf_append(b, "\"", 1);
    if (ok && len > max) ok = rp_buf_printf(b, "...(%" PRIu64 " bytes)", len);
    return ok;
}

static bool put_value(rp_buf *b, const rp_gguf_val *v, bool preview, bool in_array) {
    switch (v->type) {
    case RP_GGUF_INT8:
    case RP_GGUF_INT16:
    case RP_GGUF_INT32:
    case RP_GGUF_INT64:
        return rp_buf_printf(b, "%" PRId64, v->i);
    case RP_GGUF_FLOAT32:
    case RP_GGUF_FLOAT64:
        return rp_buf_printf(b, "%.9g", v->f);
    case RP_GGUF_BOOL:
        return rp_buf_printf(b, "%s", v->u ? "true" : "false");
    case RP_GGUF_STRING:
        if (preview) return put_escaped(b, v->str.s, v->str.len, PREVIEW_STR);
        if (in_array) return put_escaped(b, v->str.s, v->str.len, v->str.len);
        return rp_buf_append(b, v->str.s, (size_t)v->str.len);
    case RP_GGUF_ARRAY: {
        const uint64_t n = v->arr.n, lim = preview && n > PREVIEW_ARR ? PREVIEW_ARR : n;
        const uint32_t et = v->arr.type;
        bool ok = rp_buf_append(b, "[", 1);
        for (uint64_t i = 0; ok && i < lim; i++) {
            if (i) ok = rp_buf_append(b, ", ", 2);
            if (!ok) break;
            if (v->arr.elems)
                ok = put_value(b, &v->arr.elems[i], preview, true);
            else if (et == RP_GGUF_FLOAT32 || et == RP_GGUF_FLOAT64)
                ok = rp_buf_printf(b, preview ? "%.6g" : "%.9g", rp_gguf_arr_f64(v, i));
            else if (et == RP_GGUF_BOOL)
                ok = rp_buf_printf(b, "%s", v->arr.raw[i] ? "true" : "false");
            else if (et == RP_GGUF_UINT64)
                ok = rp_buf_printf(b, "%" PRIu64, (uint64_t)rp_gguf_arr_i64(v, i));
            else
                ok = rp_buf_printf(b, "%" PRId64, rp_gguf_arr_i64(v, i));
        }
        if (ok && lim < n) ok = rp_buf_printf(b, ", ... %" PRIu64 " more", n - lim);
        return ok && rp_buf_append(b, "]", 1);
    }
    default:
        return rp_buf_printf(b, "%" PRIu64, v->u);
    }
}

int rp_gguf_val_text(const rp_gguf_val *v, bool preview, char *buf, size_t size) {
    rp_buf b = {0};
    if (!put_value(&b, v, preview, false)) b.len = 0;
    int n = buf_out(&b, buf, size);
    rp_buf_free(&b);
    return n;
}

int rp_gguf_val_type_text(const rp_gguf_val *v, char *buf, size_t size) {
    if (v->type != RP_GGUF_ARRAY) return snprintf(buf, size, "%s", rp_gguf_type_name((int)v->type));
    char inner[48];
    if (v->arr.type == RP_GGUF_ARRAY && v->arr.n)
        rp_gguf_val_type_text(&v->arr.elems[0], inner, sizeof inner);
    else
        snprintf(inner, sizeof inner, "%s", rp_gguf_type_name((int)v->arr.type));
    return snprintf(buf, size, "arr[%s,%" PRIu64 "]", inner, v->arr.n);
}

rp_status rp_gguf_copy(const char *in_path, const char *out_path) {
    rp_gguf *g;
    rp_status s = rp_gguf_open(in_path, &g);
    if (s) return s;
    rp_gguf_writer *w = rp_gguf_writer_new();
    if (!w) {
        rp_gguf_close(g);
        return rp_fail(RP_ERR_NOMEM, "out of memory (GGUF writer)");
    }
    s = rp_gguf_w_copy_kv(w, g);
    /* keep the source's convention for a tensor-less file's tail */
    rp_gguf_w_set_pad_empty(w, rp_gguf_n_tensors(g) > 0 ||
                                   rp_gguf_file_size(g) == rp_gguf_data_offset(g));
    for (uint64_t i = 0; !s && i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        s = rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, t->data);
    }
    if (!s) s = rp_gguf_w_write(w, out_path, NULL, NULL);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    return s;
}
