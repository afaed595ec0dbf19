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
    FILE *index;
    long calls;
    bool failed; /* reported once */
} trace_writer;

static trace_writer g_trace;

static void trace_close(void) {
    if (g_trace.index) fclose(g_trace.index);
    g_trace.index = NULL;
}

/* One tensor: the values through a temporary file and a rename (a failed
 * write leaves no file), then its index line. */
static void trace_write(void *user, const rp_trace_tensor *t) {
    trace_writer *w = user;
    if (w->failed) return;
    char name[64];
    snprintf(name, sizeof name, "%06ld-%s-%d.f32", w->calls, t->name, t->step);
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    const size_t nf = (size_t)t->n_rows * (size_t)t->width;
    bool ok = fp && fwrite(t->data, sizeof(float), nf, fp) == nf;
    if (fp && fclose(fp) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        remove(tmp);
        fprintf(stderr, "error: --dump-tensors: cannot write %s: %s (tracing stops)\n", path,
                strerror(errno));
        w->failed = true;
        return;
    }
    fprintf(w->index, "%ld\t%s\t%d\t%d\t%d\t%d\t", w->calls, t->name, t->step, t->src, t->n_rows,
            t->width);
    for (int i = 0; i < t->n_rows; i++) fprintf(w->index, "%s%d", i ? "," : "", (int)t->pos[i]);
    fprintf(w->index, "\t%s\n", name);
    fflush(w->index);
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
    g_trace.index = fopen(path, "w");
    if (!g_trace.index) {
        tool_error(cmd, "--dump-tensors: cannot write %s: %s", path, strerror(errno));
        return false;
    }
    fprintf(g_trace.index, "call\tname\tstep\tsrc\trows\twidth\tpos\tfile\n");
    atexit(trace_close);
    rp_context_set_trace(ctx, trace_write, &g_trace);
    return true;
}
