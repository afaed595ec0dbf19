/* --dump-tensors DIR / REPRISE_TRACE=DIR: the trace hook's tensors as files,
 * one raw float32 file per tensor and an index, so a forward can be compared
 * op by op with another engine's (llama-eval-callback) or with itself. */
#include "tools.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct trace_writer {
    char dir[4096];
    rp_output *index; /* index.tsv, committed when the process exits */
    long calls;
    bool failed; /* reported once */
} trace_writer;

static trace_writer g_trace;

static void trace_close(void) {
    if (g_trace.index && rp_output_commit(g_trace.index))
        fprintf(stderr, "error: --dump-tensors: %s\n", rp_last_error());
    g_trace.index = NULL;
}

/* One tensor: the values through the library's writer (a temporary file
 * renamed on success; what may not be replaced is refused), then its index
 * line. */
static void trace_write(void *user, const rp_trace_tensor *t) {
    trace_writer *w = user;
    if (w->failed) return;
    char name[64];
    snprintf(name, sizeof name, "%06ld-%s-%d.f32", w->calls, t->name, t->step);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    const size_t nf = (size_t)t->n_rows * (size_t)t->width;
    rp_output *out = NULL;
    rp_status s = rp_output_open(path, &out);
    if (!s) s = rp_output_write(out, t->data, nf * sizeof(float));
    if (!s)
        s = rp_output_commit(out);
    else
        rp_output_abort(out);
    tbuf line = {0};
    tbuf_printf(&line, "%ld\t%s\t%d\t%d\t%d\t%d\t", w->calls, t->name, t->step, t->src, t->n_rows,
                t->width);
    for (int i = 0; i < t->n_rows; i++) tbuf_printf(&line, "%s%d", i ? "," : "", (int)t->pos[i]);
    tbuf_printf(&line, "\t%s\n", name);
    if (!s && !line.data) s = RP_ERR_NOMEM;
    if (!s) s = rp_output_write(w->index, line.data, line.len);
    tbuf_free(&line);
    if (s) {
        fprintf(stderr, "error: --dump-tensors: %s (tracing stops)\n",
                s == RP_ERR_NOMEM ? "out of memory" : rp_last_error());
        w->failed = true;
        return;
    }
    w->calls++;
}

bool tool_trace_open(const char *cmd, rp_context *ctx, const char *dir) {
    if (g_trace.index) {
        tool_error(cmd, "--dump-tensors: one traced context per run");
        return false;
    }
    if (strlen(dir) >= sizeof g_trace.dir - 80) {
        tool_error(cmd, "--dump-tensors: directory name too long");
        return false;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        tool_error(cmd, "--dump-tensors: cannot create %s: %s", dir, strerror(errno));
        return false;
    }
    snprintf(g_trace.dir, sizeof g_trace.dir, "%s", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/index.tsv", dir);
    static const char head[] = "call\tname\tstep\tsrc\trows\twidth\tpos\tfile\n";
    if (rp_output_open(path, &g_trace.index) ||
        rp_output_write(g_trace.index, head, sizeof head - 1)) {
        tool_error(cmd, "--dump-tensors: %s", rp_last_error());
        rp_output_abort(g_trace.index);
        g_trace.index = NULL;
        return false;
    }
    atexit(trace_close);
    rp_context_set_trace(ctx, trace_write, &g_trace);
    return true;
}
