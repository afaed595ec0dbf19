/* Files: reading inputs (regular files only, opened without blocking, bounded
 * in size), the registry of the input files a process holds open, and atomic
 * output (temporary file + rename) with the rules for what may be replaced.
 *
 * Output rules (rp_atomic_open):
 *   - a symbolic link is resolved and its target is written (the link stays);
 *     a link to nothing is refused, as cp refuses it;
 *   - an existing regular file keeps its mode (and, best effort, its owner);
 *     one with no write bit at all (0444) is refused, even for root;
 *   - a character device (/dev/null, a terminal) is written through directly:
 *     there is nothing to rename over, and `-o /dev/null` discards the output;
 *   - any other non-regular target (FIFO, directory, block device, socket) is
 *     refused, naming what it is;
 *   - a file this process holds open as an input (a model, a checkpoint: same
 *     device and inode) is refused unless rp_output_allow_inputs(true).
 * The temporary files alive at any moment are kept in a table that
 * rp_atomic_remove_temps() (async-signal-safe) unlinks, for a tool's handler of
 * SIGINT / SIGTERM / SIGHUP. */
#include "base/util.h"

#include "reprise_tools.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- reading ------------------------------------------------------------- */

const char *rp_file_kind(unsigned mode) {
    if (S_ISREG(mode)) return "regular file";
    if (S_ISDIR(mode)) return "directory";
    if (S_ISFIFO(mode)) return "FIFO";
    if (S_ISCHR(mode)) return "character device";
    if (S_ISBLK(mode)) return "block device";
    if (S_ISSOCK(mode)) return "socket";
    if (S_ISLNK(mode)) return "symbolic link";
    return "special file";
}

int rp_open_regular(const char *path, struct stat *st) {
    /* O_NONBLOCK: opening a FIFO with no writer would wait forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        rp_fail(RP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, st) != 0) {
        rp_fail(RP_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        rp_fail(RP_ERR_IO, "'%s' is a %s, not a regular file", path, rp_file_kind(st->st_mode));
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

rp_status rp_read_file_max(const char *path, size_t max, char **data, size_t *len) {
    struct stat st;
    int fd = rp_open_regular(path, &st);
    if (fd < 0) return RP_ERR_IO;
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return rp_fail(RP_ERR_IO, "'%s' is %llu bytes, over the limit of %zu bytes for this file",
                       path, (unsigned long long)st.st_size, max);
    }
    rp_buf b = {0};
    char chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rp_status s = rp_fail(RP_ERR_IO, "error reading '%s': %s", path, strerror(errno));
            close(fd);
            rp_buf_free(&b);
            return s;
        }
        if (n == 0) break;
        if (b.len + (size_t)n > max) { /* grew while read */
            close(fd);
            rp_buf_free(&b);
            return rp_fail(RP_ERR_IO, "'%s' is over the limit of %zu bytes for this file", path,
                           max);
        }
        if (!rp_buf_append(&b, chunk, (size_t)n)) {
            close(fd);
            rp_buf_free(&b);
            return RP_ERR_NOMEM;
        }
    }
    close(fd);
    if (!b.data && !rp_buf_reserve(&b, 0)) return RP_ERR_NOMEM;
    b.data[b.len] = 0;
    *data = b.data;
    *len = b.len;
    return RP_OK;
}

rp_status rp_read_file(const char *path, char **data, size_t *len) {
    return rp_read_file_max(path, RP_READ_FILE_MAX, data, len);
}

/* ---- the inputs a process holds open --------------------------------------- */

#define RP_MAX_INPUTS 256
static struct {
    uint64_t dev, ino;
    int refs;
} g_inputs[RP_MAX_INPUTS];
static pthread_mutex_t g_inputs_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool g_allow_inputs;

void rp_input_add(uint64_t dev, uint64_t ino) {
    pthread_mutex_lock(&g_inputs_mu);
    int free_at = -1;
    for (int i = 0; i < RP_MAX_INPUTS; i++) {
        if (g_inputs[i].refs && g_inputs[i].dev == dev && g_inputs[i].ino == ino) {
            g_inputs[i].refs++;
            free_at = -2;
            break;
        }
        if (!g_inputs[i].refs && free_at == -1) free_at = i;
    }
    if (free_at >= 0) {
        g_inputs[free_at].dev = dev;
        g_inputs[free_at].ino = ino;
        g_inputs[free_at].refs = 1;
    }
    pthread_mutex_unlock(&g_inputs_mu);
}

void rp_input_remove(uint64_t dev, uint64_t ino) {
    pthread_mutex_lock(&g_inputs_mu);
    for (int i = 0; i < RP_MAX_INPUTS; i++)
        if (g_inputs[i].refs && g_inputs[i].dev == dev && g_inputs[i].ino == ino) {
            g_inputs[i].refs--;
            break;
        }
    pthread_mutex_unlock(&g_inputs_mu);
}

static bool input_is_open(uint64_t dev, uint64_t ino) {
    bool found = false;
    pthread_mutex_lock(&g_inputs_mu);
    for (int i = 0; i < RP_MAX_INPUTS && !found; i++)
        found = g_inputs[i].refs && g_inputs[i].dev == dev && g_inputs[i].ino == ino;
    pthread_mutex_unlock(&g_inputs_mu);
    return found;
}

void rp_output_allow_inputs(bool allow) {
    atomic_store(&g_allow_inputs, allow);
}

/* ---- live temporary files -------------------------------------------------- */

#define RP_MAX_TEMPS 16
static struct {
    atomic_int live;
    char path[PATH_MAX];
} g_temps[RP_MAX_TEMPS];

static int temp_register(const char *path) {
    if (strlen(path) >= PATH_MAX) return -1;
    for (int i = 0; i < RP_MAX_TEMPS; i++) {
        int want = 0;
        if (atomic_compare_exchange_strong(&g_temps[i].live, &want, 2)) { /* 2: being filled */
            memcpy(g_temps[i].path, path, strlen(path) + 1);
            atomic_store(&g_temps[i].live, 1);
            return i;
        }
    }
    return -1; /* more than RP_MAX_TEMPS at once: that one is not removed on a signal */
}

static void temp_unregister(int slot) {
    if (slot >= 0 && slot < RP_MAX_TEMPS) atomic_store(&g_temps[slot].live, 0);
}

void rp_atomic_remove_temps(void) {
    for (int i = 0; i < RP_MAX_TEMPS; i++)
        if (atomic_load(&g_temps[i].live) == 1) (void)unlink(g_temps[i].path);
}

/* ---- atomic output ----------------------------------------------------------- */

/* Where writing `path` goes: the target of its links. NULL after rp_fail. */
static char *output_target(const char *path, struct stat *st, bool *exists) {
    *exists = false;
    if (stat(path, st) == 0) {
        *exists = true;
        if (S_ISCHR(st->st_mode)) return rp_strdup(path);
        if (!S_ISREG(st->st_mode)) {
            rp_fail(RP_ERR_IO, "'%s' is a %s, not a regular file: refusing to replace it", path,
                    rp_file_kind(st->st_mode));
            return NULL;
        }
        char *t = realpath(path, NULL);
        if (!t) rp_fail(RP_ERR_IO, "cannot resolve '%s': %s", path, strerror(errno));
        return t;
    }
    if (errno != ENOENT) {
        rp_fail(RP_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat ls;
    if (lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode)) {
        rp_fail(RP_ERR_IO,
                "'%s' is a symbolic link to a file that does not exist: refusing to "
                "write through it",
                path);
        return NULL;
    }
    return rp_strdup(path);
}

static rp_status atomic_open_direct(rp_atomic_file *af, const char *path) {
    af->fp = fopen(path, "wb");
    if (!af->fp) {
        rp_status s = rp_fail(RP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        free(af->path);
        memset(af, 0, sizeof *af);
        return s;
    }
    af->direct = true;
    af->tmp_path = rp_strdup(path); /* messages name it */
    af->slot = -1;
    return af->tmp_path ? RP_OK : RP_ERR_NOMEM;
}

rp_status rp_atomic_open(rp_atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    af->slot = -1;
    struct stat st;
    bool exists;
    af->path = output_target(path, &st, &exists);
    if (!af->path) return RP_ERR_IO;
    if (exists && S_ISCHR(st.st_mode)) return atomic_open_direct(af, path);
    rp_status s = RP_OK;
    if (exists && input_is_open((uint64_t)st.st_dev, (uint64_t)st.st_ino) &&
        !atomic_load(&g_allow_inputs))
        s = rp_fail(RP_ERR_IO,
                    "'%s' is an input of this command (the same file): writing it would replace "
                    "the input (give another output, or force it)",
                    path);
    else if (exists && !(st.st_mode & 0222))
        s = rp_fail(RP_ERR_IO, "'%s' is read-only (mode %04o): refusing to replace it", path,
                    (unsigned)(st.st_mode & 07777));
    if (s) {
        free(af->path);
        memset(af, 0, sizeof *af);
        return s;
    }
    size_t n = strlen(af->path) + 32;
    af->tmp_path = rp_malloc(n, "temporary path");
    if (!af->tmp_path) {
        free(af->path);
        return RP_ERR_NOMEM;
    }
    snprintf(af->tmp_path, n, "%s.tmp.%ld", af->path, (long)getpid());
    const mode_t mode = exists ? (st.st_mode & 07777) : 0666;
    int fd = open(af->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno == EEXIST && unlink(af->tmp_path) == 0) /* left by an earlier process */
        fd = open(af->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0 && exists) {
        (void)fchmod(fd, mode);                      /* not narrowed by the umask */
        if (fchown(fd, st.st_uid, st.st_gid) != 0) { /* best effort: not our file to give */
        }
    }
    af->fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!af->fp) {
        s = rp_fail(RP_ERR_IO, "cannot create '%s': %s", af->tmp_path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(af->tmp_path);
        }
        free(af->path);
        free(af->tmp_path);
        memset(af, 0, sizeof *af);
        return s;
    }
    af->slot = temp_register(af->tmp_path);
    return RP_OK;
}

bool rp_atomic_write(rp_atomic_file *af, const void *p, size_t n) {
    if (af->failed) return false;
    if (n && fwrite(p, 1, n, af->fp) != n) {
        af->failed = true;
        rp_fail(RP_ERR_IO, "write to '%s' failed: %s", af->tmp_path, strerror(errno));
        return false;
    }
    return true;
}

static void atomic_release(rp_atomic_file *af) {
    temp_unregister(af->slot);
    free(af->path);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
}

rp_status rp_atomic_commit(rp_atomic_file *af) {
    if (!af->fp) return rp_fail(RP_ERR_INVALID_ARG, "atomic file not open");
    bool ok = !af->failed;
    if (fflush(af->fp) != 0 && ok) {
        ok = false;
        rp_fail(RP_ERR_IO, "write to '%s' failed: %s", af->tmp_path, strerror(errno));
    }
    if (fclose(af->fp) != 0 && ok) {
        ok = false;
        rp_fail(RP_ERR_IO, "closing '%s' failed: %s", af->tmp_path, strerror(errno));
    }
    af->fp = NULL;
    if (af->direct) {
        atomic_release(af);
        return ok ? RP_OK : RP_ERR_IO;
    }
    if (ok && rename(af->tmp_path, af->path) != 0) {
        ok = false;
        rp_fail(RP_ERR_IO, "cannot rename '%s' to '%s': %s", af->tmp_path, af->path,
                strerror(errno));
    }
    if (!ok) remove(af->tmp_path);
    atomic_release(af);
    return ok ? RP_OK : RP_ERR_IO;
}

void rp_atomic_abort(rp_atomic_file *af) {
    if (af->fp) {
        fclose(af->fp);
        if (!af->direct) remove(af->tmp_path);
    }
    atomic_release(af);
}

rp_status rp_atomic_write_file(const char *path, const void *p, size_t n) {
    rp_atomic_file af;
    rp_status s = rp_atomic_open(&af, path);
    if (s) return s;
    if (!rp_atomic_write(&af, p, n)) {
        rp_atomic_abort(&af);
        return RP_ERR_IO; /* the writer named the file and the reason */
    }
    return rp_atomic_commit(&af);
}

/* ---- the public writer (reprise_tools.h) -------------------------------------- */

struct rp_output {
    rp_atomic_file af;
};

rp_status rp_output_open(const char *path, rp_output **out) {
    *out = NULL;
    if (!path || !*path) return rp_fail(RP_ERR_INVALID_ARG, "output path is empty");
    rp_output *o = rp_malloc(sizeof *o, "output file");
    if (!o) return RP_ERR_NOMEM;
    rp_status s = rp_atomic_open(&o->af, path);
    if (s) {
        free(o);
        return s;
    }
    *out = o;
    return RP_OK;
}

rp_status rp_output_write(rp_output *o, const void *p, size_t n) {
    return rp_atomic_write(&o->af, p, n) ? RP_OK : RP_ERR_IO;
}

rp_status rp_output_commit(rp_output *o) {
    if (!o) return rp_fail(RP_ERR_INVALID_ARG, "output file not open");
    rp_status s = rp_atomic_commit(&o->af);
    free(o);
    return s;
}

void rp_output_abort(rp_output *o) {
    if (!o) return;
    rp_atomic_abort(&o->af);
    free(o);
}
