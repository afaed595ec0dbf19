#include "format/safetensors.h"
#include "kernels/quant.h"
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every dtype of the safetensors format, with its width in bits (F4 and F6
 * pack several elements per byte). Only three of them have a reprise type. */
static const struct {
    const char *name;
    uint32_t bits;
    int type;
} g_dtypes[] = {
    {"F32", 32, RP_TYPE_F32},
    {"F16", 16, RP_TYPE_F16},
    {"BF16", 16, RP_TYPE_BF16},
    {"F64", 64, -1},
    {"I64", 64, -1},
    {"U64", 64, -1},
    {"I32", 32, -1},
    {"U32", 32, -1},
    {"I16", 16, -1},
    {"U16", 16, -1},
    {"I8", 8, -1},
    {"U8", 8, -1},
    {"BOOL", 8, -1},
    {"F8_E4M3", 8, -1},
    {"F8_E5M2", 8, -1},
    {"F8_E8M0", 8, -1},
    {"F6_E2M3", 6, -1},
    {"F6_E3M2", 6, -1},
    {"F4", 4, -1},
};

typedef struct st_file {
    char *path;
    const uint8_t *base;
    uint64_t size;
    bool mapped;
    uint64_t dev, ino; /* an input rp_atomic_open will not replace */
    json_t *meta;      /* "__metadata__" object, or NULL */
} st_file;

struct rp_st {
    st_file *files;
    uint32_t n_files, cap_files;
    rp_st_tensor *tensors;
    uint64_t n, cap;
    uint64_t *slots; /* name index: tensor index + 1, 0 = empty */
    uint64_t mask;
};

/* ---- errors ---------------------------------------------------------------- */

static const char *file_label(const st_file *f) {
    return f->path[0] ? f->path : "safetensors buffer";
}

/* "<file>[, tensor 'x'] at byte offset N: msg" */
static rp_status st_fail(const st_file *f, const char *tensor, uint64_t off, const char *fmt, ...)
    RP_PRINTF(4, 5);
static rp_status st_fail(const st_file *f, const char *tensor, uint64_t off, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (tensor)
        return rp_fail(RP_ERR_FORMAT, "%s: tensor '%.200s' at byte offset %" PRIu64 ": %s",
                       file_label(f), tensor, off, msg);
    return rp_fail(RP_ERR_FORMAT, "%s at byte offset %" PRIu64 ": %s", file_label(f), off, msg);
}

/* Byte offset (in the file) of the key "name" in the header, for messages;
 * the start of the header when the key cannot be found verbatim (escaped). */
static uint64_t key_offset(const st_file *f, uint64_t hlen, const char *name) {
    const char *h = (const char *)f->base + 8;
    size_t nl = strlen(name);
    for (const char *p = h; p + nl + 2 <= h + hlen; p++) {
        p = memchr(p, '"', (size_t)(h + hlen - p));
        if (!p || p + nl + 2 > h + hlen) break;
        if (memcmp(p + 1, name, nl) == 0 && p[nl + 1] == '"') {
            const char *q = p + nl + 2;
            while (q < h + hlen && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
            if (q < h + hlen && *q == ':') return (uint64_t)(p - h) + 8;
        }
    }
    return 8;
}

/* ---- name index ------------------------------------------------------------ */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int64_t index_get(const rp_st *st, const char *name) {
    if (!st->slots) return -1;
    for (uint64_t h = hash_str(name) & st->mask;; h = (h + 1) & st->mask) {
        if (!st->slots[h]) return -1;
        if (strcmp(st->tensors[st->slots[h] - 1].name, name) == 0) return (int64_t)st->slots[h] - 1;
    }
}

static void index_put(rp_st *st, uint64_t i) {
    for (uint64_t h = hash_str(st->tensors[i].name) & st->mask;; h = (h + 1) & st->mask)
        if (!st->slots[h]) {
            st->slots[h] = i + 1;
            return;
        }
}

/* Adds tensor i to the index; a name already present is an error naming both files. */
static rp_status index_add(rp_st *st, uint64_t i) {
    if (!st->slots || (st->n + 1) * 2 > st->mask + 1) {
        uint64_t cap = 64;
        while (cap < (st->n + 1) * 4) cap <<= 1;
        uint64_t *s = rp_calloc(cap, sizeof *s, "safetensors name index");
        if (!s) return RP_ERR_NOMEM;
        free(st->slots);
        st->slots = s;
        st->mask = cap - 1;
        for (uint64_t k = 0; k < i; k++) index_put(st, k);
    }
    int64_t dup = index_get(st, st->tensors[i].name);
    if (dup >= 0) {
        const rp_st_tensor *a = &st->tensors[dup], *b = &st->tensors[i];
        if (strcmp(a->file, b->file) == 0)
            return rp_fail(RP_ERR_FORMAT, "%s: tensor '%.200s' is defined twice",
                           a->file[0] ? a->file : "safetensors", a->name);
        return rp_fail(RP_ERR_FORMAT, "tensor '%.200s' is in both '%s' and '%s'", a->name, a->file,
                       b->file);
    }
    index_put(st, i);
    return RP_OK;
}

/* ---- set bookkeeping ------------------------------------------------------- */

static rp_st_tensor *push_tensor(rp_st *st) {
    if (st->n == st->cap) {
        uint64_t cap = st->cap ? st->cap * 2 : 64;
        rp_st_tensor *t =
            rp_realloc(st->tensors, (size_t)cap * sizeof *t, "safetensors tensor table");
        if (!t) return NULL;
        st->tensors = t;
        st->cap = cap;
    }
    rp_st_tensor *t = &st->tensors[st->n];
    memset(t, 0, sizeof *t);
    t->index = (uint32_t)st->n;
    return t;
}

static st_file *push_file(rp_st *st, const char *path) {
    if (st->n_files == st->cap_files) {
        uint32_t cap = st->cap_files ? st->cap_files * 2 : 4;
        st_file *f = rp_realloc(st->files, cap * sizeof *f, "safetensors file table");
        if (!f) return NULL;
        st->files = f;
        st->cap_files = cap;
    }
    st_file *f = &st->files[st->n_files];
    memset(f, 0, sizeof *f);
    f->path = rp_strdup(path);
    if (!f->path) return NULL;
    st->n_files++;
    return f;
}

void rp_st_close(rp_st *st) {
    if (!st) return;
    for (uint32_t i = 0; i < st->n_files; i++) {
        st_file *f = &st->files[i];
        if (f->mapped) {
            munmap((void *)f->base, (size_t)f->size);
            rp_input_remove(f->dev, f->ino);
        }
        json_decref(f->meta);
        free(f->path);
    }
    for (uint64_t i = 0; i < st->n; i++) {
        free((char *)st->tensors[i].name);
        free((char *)st->tensors[i].dtype);
    }
    free(st->files);
    free(st->tensors);
    free(st->slots);
    free(st);
}

/* ---- parsing one file ------------------------------------------------------ */

typedef struct span {
    uint64_t begin, end;
    uint64_t tensor;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static bool json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static rp_status parse_tensor(rp_st *st, uint32_t fi, uint64_t hlen, const char *name,
                              const json_t *e) {
    st_file *f = &st->files[fi];
    /* the key's offset is looked up only for a message */
#define TFAIL(...) st_fail(f, name, key_offset(f, hlen, name), __VA_ARGS__)
    if (!name[0]) return st_fail(f, NULL, 8, "a tensor has an empty name");
    if (!json_is_object(e)) return TFAIL("the entry is not an object");
    const json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
                 *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd)) return TFAIL("\"dtype\" is missing or not a string");
    const char *dt = json_string_value(jd);
    int di = -1;
    for (size_t k = 0; k < RP_ARRAY_LEN(g_dtypes); k++)
        if (strcmp(g_dtypes[k].name, dt) == 0) di = (int)k;
    if (di < 0) return TFAIL("unknown dtype '%.40s'", dt);
    if (!json_is_array(js)) return TFAIL("\"shape\" is missing or not an array");
    size_t nd = json_array_size(js);
    if (nd > RP_ST_MAX_DIMS) return TFAIL("%zu dimensions (at most %d)", nd, RP_ST_MAX_DIMS);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return TFAIL("\"data_offsets\" is missing or not a pair");
    uint64_t begin, end;
    if (!json_u64(json_array_get(jo, 0), &begin) || !json_u64(json_array_get(jo, 1), &end))
        return TFAIL("\"data_offsets\" must be two non-negative integers");
    if (end < begin)
        return TFAIL("data_offsets [%" PRIu64 ", %" PRIu64 ") end before they begin", begin, end);
    rp_st_tensor *t = push_tensor(st);
    if (!t) return RP_ERR_NOMEM;
    t->n_dims = (uint32_t)nd;
    uint64_t n_elem = 1;
    for (size_t d = 0; d < nd; d++) {
        uint64_t x;
        if (!json_u64(json_array_get(js, d), &x) || x > (uint64_t)INT64_MAX)
            return TFAIL("shape[%zu] is not a non-negative integer", d);
        if (!rp_mul_u64(n_elem, x, &n_elem) || n_elem > (uint64_t)INT64_MAX)
            return TFAIL("shape[%zu] = %" PRIu64 " overflows the element count", d, x);
        t->shape[d] = (int64_t)x;
    }
    uint64_t bits;
    if (!rp_mul_u64(n_elem, g_dtypes[di].bits, &bits))
        return TFAIL("%" PRIu64 " elements of %s overflow the byte count", n_elem, dt);
    if (bits % 8)
        return TFAIL("%" PRIu64 " elements of %s are not a whole number of bytes", n_elem, dt);
    uint64_t need = bits / 8, data_start = 8 + hlen, data_size = f->size - data_start;
    if (end - begin != need)
        return TFAIL("data_offsets [%" PRIu64 ", %" PRIu64 ") hold %" PRIu64
                     " bytes, but %s with %" PRIu64 " elements needs %" PRIu64,
                     begin, end, end - begin, dt, n_elem, need);
    if (end > data_size)
        return TFAIL("data [%" PRIu64 ", %" PRIu64
                     ") lies beyond the end of the file (the data section at byte %" PRIu64
                     " has %" PRIu64 " bytes)",
                     begin, end, data_start, data_size);
    t->name = rp_strdup(name);
    t->dtype = rp_strdup(dt);
    if (!t->name || !t->dtype) {
        free((char *)t->name);
        free((char *)t->dtype);
        return RP_ERR_NOMEM;
    }
    t->type = g_dtypes[di].type;
    t->n_elem = n_elem;
    t->nbytes = need;
    t->offset = data_start + begin;
    t->data = f->base + data_start + begin;
    t->file = f->path;
    st->n++;
    return index_add(st, st->n - 1);
#undef TFAIL
}

/* Tensors of one file must tile its data section: sorted by offset, each one
 * starts where the previous one ended, and the last ends at the end of the
 * file. Overlaps (two names for the same bytes) and holes are both refused. */
static rp_status check_coverage(rp_st *st, uint32_t fi, uint64_t first, uint64_t hlen) {
    st_file *f = &st->files[fi];
    uint64_t n = st->n - first, data_start = 8 + hlen, data_size = f->size - data_start;
    span *s = rp_calloc((size_t)(n ? n : 1), sizeof *s, "safetensors offsets");
    if (!s) return RP_ERR_NOMEM;
    for (uint64_t i = 0; i < n; i++) {
        const rp_st_tensor *t = &st->tensors[first + i];
        s[i] = (span){t->offset - data_start, t->offset - data_start + t->nbytes, first + i};
    }
    qsort(s, (size_t)n, sizeof *s, cmp_span);
    uint64_t pos = 0;
    rp_status rc = RP_OK;
    for (uint64_t i = 0; i < n && !rc; i++) {
        const rp_st_tensor *t = &st->tensors[s[i].tensor];
        if (s[i].begin < pos)
            rc = st_fail(f, t->name, key_offset(f, hlen, t->name),
                         "data [%" PRIu64 ", %" PRIu64 ") overlaps '%.200s' (which ends at %" PRIu64
                         ")",
                         s[i].begin, s[i].end, st->tensors[s[i - 1].tensor].name, pos);
        else if (s[i].begin > pos)
            rc = st_fail(f, NULL, data_start + pos,
                         "bytes [%" PRIu64 ", %" PRIu64 ") of the data section belong to no tensor",
                         pos, s[i].begin);
        pos = s[i].end;
    }
    if (!rc && pos != data_size)
        rc = st_fail(f, NULL, data_start + pos,
                     "bytes [%" PRIu64 ", %" PRIu64 ") of the data section belong to no tensor",
                     pos, data_size);
    free(s);
    return rc;
}

static rp_status parse_file(rp_st *st, uint32_t fi) {
    st_file *f = &st->files[fi];
    if (f->size < 8)
        return st_fail(f, NULL, 0,
                       "truncated: the header length needs 8 bytes, the file has %" PRIu64,
                       f->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->base[i];
    if (hlen > f->size - 8)
        return st_fail(f, NULL, 0,
                       "header length %" PRIu64 " exceeds the %" PRIu64 " bytes after it", hlen,
                       f->size - 8);
    if (hlen > RP_ST_MAX_HEADER)
        return st_fail(f, NULL, 0, "header length %" PRIu64 " exceeds the limit of %u bytes", hlen,
                       RP_ST_MAX_HEADER);
    if (hlen < 2 || f->base[8] != '{')
        return st_fail(f, NULL, 8, "the JSON header does not start with '{'");
    json_error_t err;
    json_t *root =
        json_loadb((const char *)f->base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return st_fail(f, NULL, 8 + (uint64_t)(err.position > 0 ? err.position : 0),
                       "header JSON: %s", err.text);
    rp_status rc = RP_OK;
    uint64_t first = st->n;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            uint64_t at = key_offset(f, hlen, key);
            if (!json_is_object(val)) {
                rc = st_fail(f, NULL, at, "\"__metadata__\" is not an object");
                break;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    rc =
                        st_fail(f, NULL, at, "\"__metadata__\" value '%.100s' is not a string", mk);
                    break;
                }
            }
            if (rc) break;
            f->meta = json_incref(val);
            continue;
        }
        if ((rc = parse_tensor(st, fi, hlen, key, val))) break;
    }
    json_decref(root);
    if (rc) return rc;
    return check_coverage(st, fi, first, hlen);
}

static rp_status map_file(rp_st *st, const char *path) {
    struct stat sb;
    int fd = rp_open_regular(path, &sb);
    if (fd < 0) return RP_ERR_IO;
    st_file *f = push_file(st, path);
    if (!f) {
        close(fd);
        return RP_ERR_NOMEM;
    }
    f->size = (uint64_t)sb.st_size;
    if (f->size > 0) {
        void *p = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return rp_fail(RP_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
        }
        f->base = p;
        f->mapped = true;
        f->dev = (uint64_t)sb.st_dev;
        f->ino = (uint64_t)sb.st_ino;
        rp_input_add(f->dev, f->ino);
    } else {
        f->base = (const uint8_t *)"";
    }
    close(fd);
    return parse_file(st, st->n_files - 1);
}

static rp_st *new_set(void) {
    return rp_calloc(1, sizeof(rp_st), "safetensors set");
}

rp_status rp_st_open(const char *path, rp_st **out) {
    *out = NULL;
    rp_st *st = new_set();
    if (!st) return RP_ERR_NOMEM;
    rp_status s = map_file(st, path);
    if (s) {
        rp_st_close(st);
        return s;
    }
    *out = st;
    return RP_OK;
}

rp_status rp_st_open_mem(const void *data, size_t size, rp_st **out) {
    *out = NULL;
    rp_st *st = new_set();
    if (!st) return RP_ERR_NOMEM;
    st_file *f = push_file(st, "");
    if (!f) {
        rp_st_close(st);
        return RP_ERR_NOMEM;
    }
    f->base = size ? data : (const uint8_t *)"";
    f->size = size;
    rp_status s = parse_file(st, 0);
    if (s) {
        rp_st_close(st);
        return s;
    }
    *out = st;
    return RP_OK;
}

/* ---- directories ----------------------------------------------------------- */

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = rp_malloc(n, "path");
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A shard name from the index must be a plain file name in the directory. */
static bool plain_name(const char *s) {
    return s[0] && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !strchr(s, '/');
}

static rp_status open_index(rp_st *st, const char *dir, const char *ipath) {
    json_error_t err;
    json_t *root = json_load_file(ipath, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        if (err.line < 0 && !is_file(ipath)) return rp_fail(RP_ERR_IO, "cannot read '%s'", ipath);
        return rp_fail(RP_ERR_FORMAT, "%s at byte offset %d (line %d): %s", ipath, err.position,
                       err.line, err.text);
    }
    rp_status rc = RP_OK;
    char **names = NULL;
    size_t n_names = 0;
    const json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        rc = rp_fail(RP_ERR_FORMAT, "%s: \"weight_map\" is missing or not an object", ipath);
        goto done;
    }
    names = rp_calloc(json_object_size(wm) + 1, sizeof *names, "shard names");
    if (!names) {
        rc = RP_ERR_NOMEM;
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)wm, key, val) {
        if (!json_is_string(val) || !plain_name(json_string_value(val))) {
            rc = rp_fail(RP_ERR_FORMAT,
                         "%s: weight_map entry '%.200s' must name a file in the same directory",
                         ipath, key);
            goto done;
        }
        const char *fn = json_string_value(val);
        bool seen = false;
        for (size_t i = 0; i < n_names && !seen; i++) seen = strcmp(names[i], fn) == 0;
        if (!seen) names[n_names++] = (char *)fn;
    }
    if (!n_names) {
        rc = rp_fail(RP_ERR_FORMAT, "%s: the weight map is empty", ipath);
        goto done;
    }
    qsort(names, n_names, sizeof *names, cmp_str);
    for (size_t i = 0; i < n_names && !rc; i++) {
        char *p = join(dir, names[i]);
        rc = p ? map_file(st, p) : RP_ERR_NOMEM;
        free(p);
    }
    if (rc) goto done;
    /* the map and the shards must agree, both ways */
    json_object_foreach((json_t *)wm, key, val) {
        int64_t i = index_get(st, key);
        if (i < 0) {
            rc = rp_fail(
                RP_ERR_FORMAT,
                "%s: tensor '%.200s' is in the weight map but in no shard (expected in '%s')",
                ipath, key, json_string_value(val));
            goto done;
        }
        const char *f = st->tensors[i].file, *base = strrchr(f, '/');
        if (strcmp(base ? base + 1 : f, json_string_value(val)) != 0) {
            rc = rp_fail(RP_ERR_FORMAT,
                         "%s: the weight map puts tensor '%.200s' in '%s', but it is in '%s'",
                         ipath, key, json_string_value(val), f);
            goto done;
        }
    }
    for (uint64_t i = 0; i < st->n; i++)
        if (!json_object_get(wm, st->tensors[i].name)) {
            rc = rp_fail(RP_ERR_FORMAT, "%s: tensor '%.200s' is not in the weight map of '%s'",
                         st->tensors[i].file, st->tensors[i].name, ipath);
            goto done;
        }
done:
    free(names);
    json_decref(root);
    return rc;
}

static rp_status open_glob(rp_st *st, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return rp_fail(RP_ERR_IO, "cannot open directory '%s': %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    rp_status rc = RP_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "model", 5) != 0 || l < 17 ||
            strcmp(e->d_name + l - 12, ".safetensors") != 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **p = rp_realloc(names, cap * sizeof *p, "file list");
            if (!p) {
                rc = RP_ERR_NOMEM;
                break;
            }
            names = p;
        }
        if (!(names[n] = rp_strdup(e->d_name))) {
            rc = RP_ERR_NOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (!rc && !n)
        rc = rp_fail(RP_ERR_IO,
                     "%s: no model.safetensors, model.safetensors.index.json or model*.safetensors",
                     dir);
    if (!rc) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && !rc; i++) {
        char *p = join(dir, names[i]);
        rc = p ? map_file(st, p) : RP_ERR_NOMEM;
        free(p);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

rp_status rp_st_open_dir(const char *dir, rp_st **out) {
    *out = NULL;
    rp_st *st = new_set();
    if (!st) return RP_ERR_NOMEM;
    char *ipath = join(dir, "model.safetensors.index.json"),
         *spath = join(dir, "model.safetensors");
    rp_status rc = ipath && spath ? RP_OK : RP_ERR_NOMEM;
    if (!rc) {
        if (is_file(ipath))
            rc = open_index(st, dir, ipath);
        else if (is_file(spath))
            rc = map_file(st, spath);
        else
            rc = open_glob(st, dir);
    }
    free(ipath);
    free(spath);
    if (rc) {
        rp_st_close(st);
        return rc;
    }
    *out = st;
    return RP_OK;
}

/* ---- shape-only sets -------------------------------------------------------- */

rp_st *rp_st_new_shapes(void) {
    return new_set();
}

rp_status rp_st_add_shape(rp_st *st, const char *name, int type, uint32_t n_dims,
                          const int64_t *shape) {
    const char *dt = type == RP_TYPE_F32    ? "F32"
                     : type == RP_TYPE_F16  ? "F16"
                     : type == RP_TYPE_BF16 ? "BF16"
                                            : NULL;
    if (!dt || n_dims > RP_ST_MAX_DIMS || !name || !name[0])
        return rp_fail(RP_ERR_INVALID_ARG, "shape-only tensor '%s': bad type or rank",
                       name ? name : "");
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++)
        if (shape[d] < 0 || !rp_mul_u64(n, (uint64_t)shape[d], &n) || n > (uint64_t)INT64_MAX / 4)
            return rp_fail(RP_ERR_INVALID_ARG, "shape-only tensor '%s': shape overflows", name);
    rp_st_tensor *t = push_tensor(st);
    if (!t) return RP_ERR_NOMEM;
    t->name = rp_strdup(name);
    t->dtype = rp_strdup(dt);
    if (!t->name || !t->dtype) {
        free((char *)t->name);
        free((char *)t->dtype);
        return RP_ERR_NOMEM;
    }
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->shape[d] = shape[d];
    t->n_elem = n;
    t->nbytes = n * (type == RP_TYPE_F32 ? 4 : 2);
    t->file = "";
    st->n++;
    return index_add(st, st->n - 1);
}

/* ---- access ---------------------------------------------------------------- */

uint64_t rp_st_n_tensors(const rp_st *st) {
    return st->n;
}
uint32_t rp_st_n_files(const rp_st *st) {
    return st->n_files;
}

const rp_st_tensor *rp_st_tensor_at(const rp_st *st, uint64_t i) {
    return i < st->n ? &st->tensors[i] : NULL;
}

const rp_st_tensor *rp_st_find(const rp_st *st, const char *name) {
    int64_t i = index_get(st, name);
    return i < 0 ? NULL : &st->tensors[i];
}

const char *rp_st_metadata(const rp_st *st, const char *key) {
    for (uint32_t i = 0; i < st->n_files; i++) {
        const json_t *v = st->files[i].meta ? json_object_get(st->files[i].meta, key) : NULL;
        if (json_is_string(v)) return json_string_value(v);
    }
    return NULL;
}

rp_status rp_st_read_f32(const rp_st_tensor *t, uint64_t first, uint64_t n, float *dst) {
    if (t->type != RP_TYPE_F32 && t->type != RP_TYPE_F16 && t->type != RP_TYPE_BF16)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "tensor '%s' has dtype %s; reprise converts F32, F16 and BF16 tensors",
                       t->name, t->dtype);
    if (!t->data)
        return rp_fail(RP_ERR_INVALID_ARG, "tensor '%s' has a shape but no data", t->name);
    if (first > t->n_elem || n > t->n_elem - first)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "tensor '%s': elements [%" PRIu64 ", +%" PRIu64
                       ") are out of range (%" PRIu64 ")",
                       t->name, first, n, t->n_elem);
    if (t->type == RP_TYPE_F32) {
        memcpy(dst, (const uint8_t *)t->data + first * 4, (size_t)n * 4);
        return RP_OK;
    }
    /* 16-bit data may sit at any byte offset in the file: copy before reading */
    uint16_t tmp[1024];
    const uint8_t *src = (const uint8_t *)t->data + first * 2;
    while (n) {
        size_t k = n > 1024 ? 1024 : (size_t)n;
        memcpy(tmp, src, k * 2);
        if (t->type == RP_TYPE_F16)
            rp_f16_to_float(tmp, dst, (int64_t)k);
        else
            rp_bf16_to_float(tmp, dst, (int64_t)k);
        src += k * 2;
        dst += k;
        n -= k;
    }
    return RP_OK;
}
