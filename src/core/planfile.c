#include "core/planfile.h"
#include "base/json_util.h"
#include "core/plan.h"
#include "base/util.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- content hash ---------------------------------------------------------- */

/* Both hashes start with this tag, so a change of definition is a change of
 * every hash rather than a silent collision with the old one. */
static const char g_hash_tag[] = "reprise-content-hash-v1";

/* One tensor as the hash sees it. */
typedef struct hash_rec {
    const char *name;
    uint32_t type, n_dims;
    int64_t ne[RP_GGUF_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
    uint8_t digest[16]; /* XXH3-128 of the bytes, canonical (big-endian) form */
} hash_rec;

static void digest_bytes(const void *p, uint64_t n, uint8_t out[16]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(p, (size_t)n));
    memcpy(out, c.digest, 16);
}

static int rec_cmp(const void *a, const void *b) {
    return strcmp(((const hash_rec *)a)->name, ((const hash_rec *)b)->name);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The record of one tensor's table entry: name, NUL, type, n_dims, ne[]. */
static size_t table_record(const hash_rec *r, uint8_t *buf, size_t cap) {
    size_t nl = strlen(r->name), n = nl + 1 + 8 + 8 * (size_t)r->n_dims;
    if (n > cap) return 0;
    memcpy(buf, r->name, nl + 1);
    put_le(buf + nl + 1, r->type, 4);
    put_le(buf + nl + 5, r->n_dims, 4);
    for (uint32_t d = 0; d < r->n_dims; d++) put_le(buf + nl + 9 + 8 * d, (uint64_t)r->ne[d], 8);
    return n;
}

static void hex(const uint8_t *p, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = 0;
}

/* Sorts recs by name and combines them. with_data: recs' digests are set and
 * the content hash is wanted as well as the table hash. */
static rp_status combine(hash_rec *recs, size_t n, bool with_data, char *content, char *table) {
    qsort(recs, n, sizeof *recs, rec_cmp);
    XXH3_state_t *sc = XXH3_createState(), *st = XXH3_createState();
    rp_status s = RP_OK;
    if (!sc || !st) {
        s = rp_fail(RP_ERR_NOMEM, "out of memory (hash state)");
        goto done;
    }
    XXH3_128bits_reset(sc);
    XXH3_64bits_reset(st);
    XXH3_128bits_update(sc, g_hash_tag, sizeof g_hash_tag);
    XXH3_64bits_update(st, g_hash_tag, sizeof g_hash_tag);
    uint8_t buf[4096];
    for (size_t i = 0; i < n; i++) {
        size_t k = table_record(&recs[i], buf, sizeof buf);
        if (!k) {
            s = rp_fail(RP_ERR_FORMAT, "tensor name '%.64s...' is too long to hash", recs[i].name);
            goto done;
        }
        XXH3_128bits_update(sc, buf, k);
        XXH3_64bits_update(st, buf, k);
        if (with_data) XXH3_128bits_update(sc, recs[i].digest, 16);
    }
    if (with_data) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits_digest(sc));
        memcpy(content, "xxh3-128:", 9);
        hex(c.digest, 16, content + 9);
    }
    XXH64_canonical_t t;
    XXH64_canonicalFromHash(&t, XXH3_64bits_digest(st));
    memcpy(table, "xxh3-64:", 8);
    hex(t.digest, 8, table + 8);
done:
    XXH3_freeState(sc);
    XXH3_freeState(st);
    return s;
}

static hash_rec *gguf_records(const rp_gguf *g, size_t *n) {
    *n = (size_t)rp_gguf_n_tensors(g);
    hash_rec *r = rp_calloc(*n ? *n : 1, sizeof *r, "content hash");
    for (size_t i = 0; r && i < *n; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        r[i].name = t->name;
        r[i].type = t->type;
        r[i].n_dims = t->n_dims;
        memcpy(r[i].ne, t->ne, sizeof r[i].ne);
        r[i].data = t->data;
        r[i].nbytes = t->nbytes;
    }
    return r;
}

void rp_content_hash_table(const rp_gguf *g, char out[RP_TABLE_HASH_LEN + 1]) {
    size_t n;
    hash_rec *r = gguf_records(g, &n);
    if (!r || combine(r, n, false, NULL, out)) out[0] = 0; /* never equal to a real table hash */
    free(r);
}

/* Digesting the tensors of a mapping, several threads taking tensors in turn. */
typedef struct hash_job {
    hash_rec *recs;
    size_t n;
    atomic_size_t next;
    atomic_uint_fast64_t done_bytes;
    atomic_bool cancel;
} hash_job;

static void hash_some(hash_job *j, uint64_t total, rp_progress_fn progress, void *user) {
    for (;;) {
        if (atomic_load(&j->cancel)) return;
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n) return;
        digest_bytes(j->recs[i].data, j->recs[i].nbytes, j->recs[i].digest);
        uint64_t d = atomic_fetch_add(&j->done_bytes, j->recs[i].nbytes) + j->recs[i].nbytes;
        if (progress && !progress(total ? (float)((double)d / (double)total) : 1.0f, user))
            atomic_store(&j->cancel, true);
    }
}

static void *hash_worker(void *arg) {
    hash_some(arg, 0, NULL, NULL);
    return NULL;
}

rp_status rp_content_hash_compute(const rp_gguf *g, int n_threads, rp_progress_fn progress,
                                  void *user, rp_content_hash *out) {
    memset(out, 0, sizeof *out);
    out->source = RP_HASH_COMPUTED;
    size_t n;
    hash_rec *recs = gguf_records(g, &n);
    if (!recs) return RP_ERR_NOMEM;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += recs[i].nbytes;
    /* a mapping is read at disk speed: a few threads keep a fast disk busy */
    if (n_threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = total < (64u << 20) ? 1 : (int)RP_MIN(cpus > 0 ? cpus : 1, 4);
    }
    n_threads = RP_MIN(RP_MAX(n_threads, 1), 16);
    hash_job j = {.recs = recs, .n = n};
    atomic_init(&j.next, 0);
    atomic_init(&j.done_bytes, 0);
    atomic_init(&j.cancel, false);
    pthread_t th[16];
    int started = 0;
    for (int t = 1; t < n_threads; t++)
        if (!pthread_create(&th[started], NULL, hash_worker, &j)) started++;
    hash_some(&j, total, progress, user); /* this thread reports progress */
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    rp_status s;
    if (atomic_load(&j.cancel))
        s = rp_fail(RP_ERR_CANCELLED, "content hash cancelled");
    else
        s = combine(recs, n, true, out->hash, out->table);
    free(recs);
    return s;
}

bool rp_content_hash_valid(const char *s) {
    if (!s || strncmp(s, "xxh3-128:", 9) != 0 || strlen(s) != RP_CONTENT_HASH_LEN) return false;
    for (const char *c = s + 9; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
    return true;
}

const char *rp_hash_source_name(rp_hash_source s) {
    return s == RP_HASH_METADATA ? "metadata" : s == RP_HASH_CACHE ? "cache" : "computed";
}

/* The identity of a file on disk the cache is valid for. */
typedef struct file_id {
    uint64_t size, inode;
    int64_t mtime_ns;
} file_id;

static bool file_id_of(const char *path, file_id *id) {
    struct stat st;
    if (stat(path, &st) != 0) return false;
    id->size = (uint64_t)st.st_size;
    id->inode = (uint64_t)st.st_ino;
    id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return true;
}

static const char *json_str_field(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The cached hash when it is valid for this file; why not in *why otherwise. */
static bool cache_read(const char *cache, const file_id *id, const char *table, char *hash,
                       char *why, size_t why_n) {
    char *text = NULL;
    size_t len = 0;
    struct stat cst;
    if (stat(cache, &cst) != 0) {
        snprintf(why, why_n, "no cache file");
        return false;
    }
    /* a FIFO, a device or an endless file is no cache (a cache line is < 1 KiB) */
    if (rp_read_file_max(cache, 65536, &text, &len)) {
        snprintf(why, why_n, "%s", rp_last_error());
        rp_clear_error();
        return false;
    }
    json_error_t err;
    json_t *o = len < 65536 ? json_loadb(text, len, 0, &err) : NULL;
    free(text);
    bool ok = false;
    json_t *size = json_object_get(o, "size"), *mt = json_object_get(o, "mtime_ns"),
           *ino = json_object_get(o, "inode");
    const char *fmt = json_str_field(o, "format"), *h = json_str_field(o, "content_hash"),
               *t = json_str_field(o, "tensors");
    if (!o || !fmt || strcmp(fmt, "reprise-content-hash") || !rp_content_hash_valid(h) || !t ||
        !json_is_integer(size) || !json_is_integer(mt) || !json_is_integer(ino))
        snprintf(why, why_n, "the cache file is malformed");
    else if ((uint64_t)json_integer_value(size) != id->size ||
             (int64_t)json_integer_value(mt) != id->mtime_ns ||
             (uint64_t)json_integer_value(ino) != id->inode)
        snprintf(why, why_n,
                 "the model file changed since the cache was written (size, mtime or inode)");
    else if (strcmp(t, table))
        snprintf(why, why_n, "the cache was written for another tensor table");
    else {
        memcpy(hash, h, RP_CONTENT_HASH_LEN + 1);
        ok = true;
    }
    json_decref(o);
    return ok;
}

/* A folder nobody may write to stays untouched, even by root (who could):
 * shared, read-only model stores are common. */
static rp_status check_folder(const char *cache) {
    const char *slash = strrchr(cache, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - cache) + (slash == cache) : 1,
             slash ? cache : ".");
    struct stat st;
    if (stat(dir, &st) != 0)
        return rp_fail(RP_ERR_IO, "cannot stat '%s': %s", dir, strerror(errno));
    if (!(st.st_mode & 0222)) return rp_fail(RP_ERR_IO, "the folder '%s' is read-only", dir);
    return RP_OK;
}

static rp_status cache_write(const char *cache, const char *model_path, const file_id *id,
                             const rp_content_hash *h) {
    rp_status s = check_folder(cache);
    if (s) return s;
    const char *base = strrchr(model_path, '/');
    json_t *o = json_pack("{s:s,s:i,s:s,s:I,s:I,s:I,s:s,s:s}", "format", "reprise-content-hash",
                          "version", 1, "file", base ? base + 1 : model_path, "size",
                          (json_int_t)id->size, "mtime_ns", (json_int_t)id->mtime_ns, "inode",
                          (json_int_t)id->inode, "tensors", h->table, "content_hash", h->hash);
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    const size_t n = text ? strlen(text) : 0;
    char *line = text ? realloc(text, n + 2) : NULL; /* the text and a newline */
    if (!line) {
        free(text);
        return rp_fail(RP_ERR_NOMEM, "out of memory (hash cache)");
    }
    memcpy(line + n, "\n", 2);
    s = rp_atomic_write_file(cache, line, n + 1);
    free(line);
    return s;
}

rp_status rp_content_hash_get(const rp_gguf *g, rp_progress_fn progress, void *user,
                              rp_content_hash *out) {
    memset(out, 0, sizeof *out);
    char table[RP_TABLE_HASH_LEN + 1];
    rp_content_hash_table(g, table);
    if (!table[0]) return RP_ERR_NOMEM;
    /* 1. the file's own metadata, if it describes this tensor table */
    const char *h = NULL, *t = NULL;
    bool fh = false, ft = false;
    if (!rp_gguf_get_str(g, RP_CONTENT_HASH_KEY, &h, &fh) &&
        !rp_gguf_get_str(g, RP_CONTENT_HASH_TABLE_KEY, &t, &ft) && fh && ft &&
        rp_content_hash_valid(h) && !strcmp(t, table)) {
        memcpy(out->hash, h, RP_CONTENT_HASH_LEN + 1);
        memcpy(out->table, table, sizeof table);
        out->source = RP_HASH_METADATA;
        return RP_OK;
    }
    rp_clear_error();
    if (fh)
        rp_log(RP_LOG_INFO,
               "%s: its %s was written for another tensor table (re-written by another tool?); "
               "not used",
               rp_gguf_path(g), RP_CONTENT_HASH_KEY);
    /* 2. the cache file beside the model */
    const char *path = rp_gguf_path(g);
    file_id id0 = {0};
    bool on_disk = path && *path && file_id_of(path, &id0) && id0.size == rp_gguf_file_size(g);
    char why[160] = "";
    if (on_disk) {
        int k = snprintf(out->cache_path, sizeof out->cache_path, "%s%s", path,
                         RP_CONTENT_HASH_CACHE_EXT);
        if (k < 0 || (size_t)k >= sizeof out->cache_path) {
            on_disk = false;
            out->cache_path[0] = 0;
        }
    }
    if (on_disk && cache_read(out->cache_path, &id0, table, out->hash, why, sizeof why)) {
        memcpy(out->table, table, sizeof table);
        out->source = RP_HASH_CACHE;
        return RP_OK;
    }
    /* 3. every byte, then the cache for next time */
    char cache_path[sizeof out->cache_path];
    memcpy(cache_path, out->cache_path, sizeof cache_path);
    rp_status s = rp_content_hash_compute(g, 0, progress, user, out);
    if (s) return s;
    memcpy(out->cache_path, cache_path, sizeof cache_path);
    file_id id1;
    if (!on_disk)
        snprintf(out->cache_note, sizeof out->cache_note, "the model is not a file on disk");
    else if (!file_id_of(path, &id1) || id1.size != id0.size || id1.mtime_ns != id0.mtime_ns ||
             id1.inode != id0.inode)
        snprintf(out->cache_note, sizeof out->cache_note,
                 "the model file changed while it was hashed");
    else if ((s = cache_write(out->cache_path, path, &id0, out)))
        snprintf(out->cache_note, sizeof out->cache_note, "%s", rp_last_error());
    else
        out->cached = true;
    if (!out->cached) rp_clear_error();
    return RP_OK;
}

/* Stamping a writer: digests collected while the tensors are written. */
typedef struct stamp {
    hash_rec *recs;
    char **names;
    size_t n, cap;
    char table[RP_TABLE_HASH_LEN + 1]; /* of the tensors when stamped */
} stamp;

static rp_status stamp_tensor(void *user, const rp_gguf_tensor *t) {
    stamp *st = user;
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 64;
        hash_rec *r = rp_realloc(st->recs, cap * sizeof *r, "content hash");
        if (!r) return RP_ERR_NOMEM;
        st->recs = r;
        char **nm = rp_realloc(st->names, cap * sizeof *nm, "content hash");
        if (!nm) return RP_ERR_NOMEM;
        st->names = nm;
        st->cap = cap;
    }
    hash_rec *r = &st->recs[st->n];
    memset(r, 0, sizeof *r);
    if (!(st->names[st->n] = rp_strdup(t->name))) return RP_ERR_NOMEM;
    r->name = st->names[st->n];
    r->type = t->type;
    r->n_dims = t->n_dims;
    memcpy(r->ne, t->ne, sizeof r->ne);
    r->nbytes = t->nbytes;
    digest_bytes(t->data, t->nbytes, r->digest);
    st->n++;
    return RP_OK;
}

static rp_status stamp_finish(void *user, char *value) {
    stamp *st = user;
    char content[RP_CONTENT_HASH_LEN + 1], table[RP_TABLE_HASH_LEN + 1];
    rp_status s = combine(st->recs, st->n, true, content, table);
    if (s) return s;
    if (strcmp(table, st->table))
        return rp_fail(RP_ERR_INTERNAL,
                       "content hash stamped before every tensor was added to the writer");
    memcpy(value, content, RP_CONTENT_HASH_LEN);
    return RP_OK;
}

static void stamp_free(void *user) {
    stamp *st = user;
    for (size_t i = 0; i < st->n; i++) free(st->names[i]);
    free(st->names);
    free(st->recs);
    free(st);
}

rp_status rp_content_hash_stamp(rp_gguf_writer *w) {
    stamp *st = rp_calloc(1, sizeof *st, "content hash");
    if (!st) return RP_ERR_NOMEM;
    size_t n = (size_t)rp_gguf_w_n_tensors(w);
    hash_rec *r = rp_calloc(n ? n : 1, sizeof *r, "content hash");
    if (!r) {
        free(st);
        return RP_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        rp_gguf_tensor t;
        rp_gguf_w_tensor_info(w, i, &t);
        r[i].name = t.name;
        r[i].type = t.type;
        r[i].n_dims = t.n_dims;
        memcpy(r[i].ne, t.ne, sizeof r[i].ne);
    }
    rp_status s = combine(r, n, false, NULL, st->table);
    free(r);
    if (!s) s = rp_gguf_w_set_str(w, RP_CONTENT_HASH_TABLE_KEY, st->table);
    if (s) {
        free(st);
        return s;
    }
    rp_gguf_w_late late = {
        .tensor = stamp_tensor, .finish = stamp_finish, .free_user = stamp_free, .user = st};
    s = rp_gguf_w_set_late_str(w, RP_CONTENT_HASH_KEY, RP_CONTENT_HASH_LEN, &late);
    if (s) stamp_free(st);
    return s;
}

/* ---- plan files -------------------------------------------------------------- */

bool rp_planfile_name_valid(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > RP_PLAN_NAME_MAX) return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              strchr("._:+/-", *c)))
            return false;
    return true;
}

void rp_planfile_free(rp_planfile *pf) {
    if (!pf) return;
    free(pf->name);
    free(pf->description);
    free(pf->spec);
    free(pf->arch);
    free(pf->content_hash);
    free(pf->base_name);
    free(pf->base_file);
    free(pf->created_by);
    free(pf);
}

static rp_status build_plan(int kind, const char *spec, int n_trunk, int n_total, rp_plan **p) {
    return kind == RP_PLAN_REPEAT ? rp_plan_repeat(spec, n_trunk, n_total, p)
                                  : rp_plan_map(spec, n_trunk, n_total, p);
}

static const char *kind_field(int kind) {
    return kind == RP_PLAN_REPEAT ? "repeat_layers" : "layer_map";
}

rp_status rp_planfile_new(const rp_model *m, const char *hash, const char *name,
                          const char *description, int kind, const char *spec, rp_planfile **out) {
    *out = NULL;
    if (!rp_planfile_name_valid(name))
        return rp_fail(
            RP_ERR_INVALID_ARG,
            "plan name '%.80s' is not usable: 1..%d characters of A-Z a-z 0-9 and . _ : + / -",
            name ? name : "", RP_PLAN_NAME_MAX);
    if (kind != RP_PLAN_REPEAT && kind != RP_PLAN_MAP)
        return rp_fail(RP_ERR_INVALID_ARG, "a plan file holds a repeat_layers or a layer_map spec");
    if (!rp_content_hash_valid(hash))
        return rp_fail(RP_ERR_INVALID_ARG, "content hash '%.60s' is malformed", hash);
    rp_plan *p;
    rp_status s = build_plan(kind, spec, m->hp.n_trunk, m->hp.n_layer, &p);
    if (s) return s;
    rp_planfile *pf = rp_calloc(1, sizeof *pf, "plan file");
    if (!pf) {
        rp_plan_free(p);
        return RP_ERR_NOMEM;
    }
    const char *file = m->path ? strrchr(m->path, '/') : NULL;
    pf->name = rp_strdup(name);
    pf->description = rp_strdup(description ? description : "");
    pf->kind = kind;
    pf->spec = rp_strdup(spec);
    pf->n_eff = p->n_eff;
    pf->arch = rp_strdup(rp_model_arch(m));
    pf->n_layer = m->hp.n_trunk;
    pf->content_hash = rp_strdup(hash);
    pf->base_name = rp_strdup(rp_model_name(m));
    pf->base_file = m->path ? rp_strdup(file ? file + 1 : m->path) : NULL;
    pf->created_by = rp_strdup("reprise " RP_VERSION);
    rp_plan_free(p);
    if (!pf->name || !pf->description || !pf->spec || !pf->arch || !pf->content_hash ||
        !pf->base_name || (m->path && !pf->base_file) || !pf->created_by) {
        rp_planfile_free(pf);
        return RP_ERR_NOMEM;
    }
    *out = pf;
    return RP_OK;
}

char *rp_planfile_to_json(const rp_planfile *pf) {
    json_t *base = json_pack("{s:s,s:i,s:s}", "architecture", pf->arch, "n_layer", pf->n_layer,
                             "content_hash", pf->content_hash);
    if (base && pf->base_name) json_object_set_new(base, "name", json_string(pf->base_name));
    if (base && pf->base_file) json_object_set_new(base, "file", json_string(pf->base_file));
    json_t *o =
        base ? json_pack("{s:s,s:i,s:s,s:s,s:s,s:i,s:o}", "format", RP_PLANFILE_FORMAT, "version",
                         RP_PLANFILE_VERSION, "name", pf->name, "description", pf->description,
                         kind_field(pf->kind), pf->spec, "n_eff", pf->n_eff, "base_model", base)
             : NULL;
    if (o && pf->created_by) json_object_set_new(o, "created_by", json_string(pf->created_by));
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *t2 = realloc(text, n + 2);
    if (!t2) {
        free(text);
        return NULL;
    }
    memcpy(t2 + n, "\n", 2);
    return t2;
}

rp_status rp_planfile_write(const rp_planfile *pf, const char *path) {
    char *text = rp_planfile_to_json(pf);
    if (!text) return rp_fail(RP_ERR_NOMEM, "out of memory (plan file)");
    rp_status s = rp_atomic_write_file(path, text, strlen(text));
    free(text);
    return s;
}

/* ---- reading ----------------------------------------------------------------- */

/* The fields a version-1 file may hold; anything else is refused by name (a
 * misspelt field must not be silently ignored). */
static const char *const g_top_fields[] = {"format",      "version",       "name",
                                           "description", "repeat_layers", "layer_map",
                                           "n_eff",       "base_model",    "created_by"};
static const char *const g_base_fields[] = {"architecture", "n_layer", "content_hash", "name",
                                            "file"};

static rp_status unknown_fields(json_t *o, const char *const *known, size_t n_known,
                                const char *what, const char *prefix) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        bool found = false;
        for (size_t i = 0; i < n_known && !found; i++) found = !strcmp(key, known[i]);
        if (!found)
            return rp_fail(
                RP_ERR_FORMAT,
                "plan file %s: unknown field '%s%.80s' (a misspelling? see docs/plan-files.md)",
                what, prefix, key);
    }
    return RP_OK;
}

/* A string field: required or not; *out NULL when absent. */
static rp_status get_str(json_t *o, const char *field, const char *shown, bool required,
                         const char *what, const char **out) {
    json_t *v = json_object_get(o, field);
    *out = NULL;
    if (!v)
        return required ? rp_fail(RP_ERR_FORMAT, "plan file %s: missing field '%s'", what, shown)
                        : RP_OK;
    if (!json_is_string(v))
        return rp_fail(RP_ERR_FORMAT, "plan file %s: field '%s' must be a string, got %s", what,
                       shown, rp_json_kind(v));
    if (strlen(json_string_value(v)) != json_string_length(v))
        return rp_fail(RP_ERR_FORMAT, "plan file %s: field '%s' contains a NUL character", what,
                       shown);
    *out = json_string_value(v);
    return RP_OK;
}

static rp_status get_int(json_t *o, const char *field, const char *shown, bool required, long lo,
                         long hi, const char *what, long *out, bool *found) {
    json_t *v = json_object_get(o, field);
    *found = v != NULL;
    if (!v)
        return required ? rp_fail(RP_ERR_FORMAT, "plan file %s: missing field '%s'", what, shown)
                        : RP_OK;
    if (!json_is_integer(v))
        return rp_fail(RP_ERR_FORMAT, "plan file %s: field '%s' must be an integer, got %s", what,
                       shown, rp_json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return rp_fail(RP_ERR_FORMAT, "plan file %s: field '%s' is %lld, outside %ld..%ld", what,
                       shown, (long long)x, lo, hi);
    *out = (long)x;
    return RP_OK;
}

static rp_status parse_obj(json_t *o, const char *what, rp_planfile *pf) {
    rp_status s;
    if (!json_is_object(o))
        return rp_fail(RP_ERR_FORMAT, "plan file %s: expected a JSON object, got %s", what,
                       rp_json_kind(o));
    const char *fmt;
    if ((s = get_str(o, "format", "format", true, what, &fmt))) return s;
    if (strcmp(fmt, RP_PLANFILE_FORMAT))
        return rp_fail(RP_ERR_FORMAT, "plan file %s: field 'format' is '%.60s', not '%s'", what,
                       fmt, RP_PLANFILE_FORMAT);
    long version;
    bool found;
    if ((s = get_int(o, "version", "version", true, 1, INT32_MAX, what, &version, &found)))
        return s;
    if (version > RP_PLANFILE_VERSION)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "plan file %s: field 'version' is %ld; this reprise reads version %d", what,
                       version, RP_PLANFILE_VERSION);
    if ((s = unknown_fields(o, g_top_fields, RP_ARRAY_LEN(g_top_fields), what, ""))) return s;
    const char *name, *desc, *rep, *map, *created;
    if ((s = get_str(o, "name", "name", true, what, &name))) return s;
    if (!rp_planfile_name_valid(name))
        return rp_fail(RP_ERR_FORMAT,
                       "plan file %s: field 'name' '%.80s' is not usable: 1..%d characters of A-Z "
                       "a-z 0-9 and . _ : + / -",
                       what, name, RP_PLAN_NAME_MAX);
    if ((s = get_str(o, "description", "description", false, what, &desc))) return s;
    if ((s = get_str(o, "repeat_layers", "repeat_layers", false, what, &rep))) return s;
    if ((s = get_str(o, "layer_map", "layer_map", false, what, &map))) return s;
    if ((s = get_str(o, "created_by", "created_by", false, what, &created))) return s;
    if (rep && map)
        return rp_fail(
            RP_ERR_FORMAT,
            "plan file %s: fields 'repeat_layers' and 'layer_map' are alternatives; give one",
            what);
    if (!rep && !map)
        return rp_fail(
            RP_ERR_FORMAT,
            "plan file %s: missing field 'repeat_layers' (or 'layer_map'): the plan's spec", what);
    json_t *base = json_object_get(o, "base_model");
    if (!base) return rp_fail(RP_ERR_FORMAT, "plan file %s: missing field 'base_model'", what);
    if (!json_is_object(base))
        return rp_fail(RP_ERR_FORMAT, "plan file %s: field 'base_model' must be an object, got %s",
                       what, rp_json_kind(base));
    if ((s = unknown_fields(base, g_base_fields, RP_ARRAY_LEN(g_base_fields), what, "base_model.")))
        return s;
    const char *arch, *hash, *bname, *bfile;
    long n_layer, n_eff = 0;
    if ((s = get_str(base, "architecture", "base_model.architecture", true, what, &arch))) return s;
    if (!*arch || strlen(arch) > 64)
        return rp_fail(RP_ERR_FORMAT,
                       "plan file %s: field 'base_model.architecture' must be 1..64 characters",
                       what);
    if ((s = get_int(base, "n_layer", "base_model.n_layer", true, 1, RP_MAX_LAYERS, what, &n_layer,
                     &found)))
        return s;
    if ((s = get_str(base, "content_hash", "base_model.content_hash", true, what, &hash))) return s;
    if (!rp_content_hash_valid(hash))
        return rp_fail(RP_ERR_FORMAT,
                       "plan file %s: field 'base_model.content_hash' '%.60s' is malformed "
                       "(expected 'xxh3-128:' and 32 lowercase hex digits)",
                       what, hash);
    if ((s = get_str(base, "name", "base_model.name", false, what, &bname))) return s;
    if ((s = get_str(base, "file", "base_model.file", false, what, &bfile))) return s;
    bool has_n_eff;
    if ((s = get_int(o, "n_eff", "n_eff", false, 1, INT32_MAX, what, &n_eff, &has_n_eff))) return s;
    /* the spec must build on the base model it names */
    int kind = rep ? RP_PLAN_REPEAT : RP_PLAN_MAP;
    rp_plan *p;
    if ((s = build_plan(kind, rep ? rep : map, (int)n_layer, (int)n_layer, &p)))
        return rp_fail_prefix(s, "plan file %s: field '%s' on the base model's %ld layers", what,
                              kind_field(kind), n_layer);
    int got = p->n_eff;
    rp_plan_free(p);
    if (has_n_eff && n_eff != got)
        return rp_fail(
            RP_ERR_FORMAT,
            "plan file %s: field 'n_eff' is %ld, but the spec builds %d steps on %ld layers", what,
            n_eff, got, n_layer);
    pf->name = rp_strdup(name);
    pf->description = rp_strdup(desc ? desc : "");
    pf->kind = kind;
    pf->spec = rp_strdup(rep ? rep : map);
    pf->n_eff = got;
    pf->arch = rp_strdup(arch);
    pf->n_layer = (int)n_layer;
    pf->content_hash = rp_strdup(hash);
    if (bname) pf->base_name = rp_strdup(bname);
    if (bfile) pf->base_file = rp_strdup(bfile);
    if (created) pf->created_by = rp_strdup(created);
    if (!pf->name || !pf->description || !pf->spec || !pf->arch || !pf->content_hash ||
        (bname && !pf->base_name) || (bfile && !pf->base_file) || (created && !pf->created_by))
        return rp_fail(RP_ERR_NOMEM, "out of memory (plan file)");
    return RP_OK;
}

rp_status rp_planfile_parse(const char *text, size_t len, const char *what, rp_planfile **out) {
    *out = NULL;
    if (len > RP_PLANFILE_MAX_BYTES)
        return rp_fail(RP_ERR_FORMAT, "plan file %s: %zu bytes; a plan file is at most %u", what,
                       len, RP_PLANFILE_MAX_BYTES);
    json_error_t err;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!o)
        return rp_fail(RP_ERR_FORMAT, "plan file %s: malformed JSON at line %d, column %d: %s",
                       what, err.line, err.column, err.text);
    rp_planfile *pf = rp_calloc(1, sizeof *pf, "plan file");
    rp_status s = pf ? parse_obj(o, what, pf) : RP_ERR_NOMEM;
    json_decref(o);
    if (s) {
        rp_planfile_free(pf);
        return s;
    }
    *out = pf;
    return RP_OK;
}

rp_status rp_planfile_read(const char *path, rp_planfile **out) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return rp_fail(RP_ERR_IO, "cannot open plan file '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return rp_fail(RP_ERR_IO, "plan file '%s' is not a regular file", path);
    char what[600];
    snprintf(what, sizeof what, "'%.560s'", path);
    if ((uint64_t)st.st_size > RP_PLANFILE_MAX_BYTES)
        return rp_fail(RP_ERR_FORMAT, "plan file %s: %lld bytes; a plan file is at most %u", what,
                       (long long)st.st_size, RP_PLANFILE_MAX_BYTES);
    char *text;
    size_t len;
    rp_status s = rp_read_file_max(path, RP_PLANFILE_MAX_BYTES, &text, &len);
    if (s) return s;
    s = rp_planfile_parse(text, len, what, out);
    free(text);
    return s;
}

rp_status rp_planfile_check(const rp_planfile *pf, const rp_model *m, const char *hash, bool force,
                            bool *forced) {
    *forced = false;
    const char *file = m->path ? m->path : rp_model_name(m);
    if (strcmp(pf->arch, rp_model_arch(m)))
        return rp_fail(RP_ERR_PLAN,
                       "plan '%s' was made for a %s model; %s is %s: the architecture differs "
                       "(--plan-force does not apply)",
                       pf->name, pf->arch, file, rp_model_arch(m));
    if (pf->n_layer != m->hp.n_trunk)
        return rp_fail(
            RP_ERR_PLAN,
            "plan '%s' was made for a model with %d layers; %s has %d: the layer count differs "
            "(--plan-force does not apply)",
            pf->name, pf->n_layer, file, m->hp.n_trunk);
    if (strcmp(pf->content_hash, hash)) {
        if (!force)
            return rp_fail(RP_ERR_PLAN,
                           "plan '%s' was made for the weights %s%s%s%s; %s holds %s: the content "
                           "hash differs (another quantization, fine-tune or model). Architecture "
                           "(%s) and layer count (%d) match: --plan-force applies it anyway",
                           pf->name, pf->content_hash, pf->base_file ? " (" : "",
                           pf->base_file ? pf->base_file : "", pf->base_file ? ")" : "", file, hash,
                           pf->arch, pf->n_layer);
        *forced = true;
    }
    rp_plan *p;
    rp_status s = build_plan(pf->kind, pf->spec, m->hp.n_trunk, m->hp.n_layer, &p);
    if (s) return rp_fail_prefix(s, "plan '%s' on %s", pf->name, file);
    rp_plan_free(p);
    return RP_OK;
}

int rp_planfile_steps(const rp_planfile *pf, char *buf, size_t size) {
    rp_plan *p = NULL;
    rp_status s = pf->kind == RP_PLAN_REPEAT
                      ? rp_plan_repeat(pf->spec, pf->n_layer, pf->n_layer, &p)
                      : rp_plan_map(pf->spec, pf->n_layer, pf->n_layer, &p);
    if (s) {
        if (size) buf[0] = 0;
        return -1;
    }
    const int n = rp_plan_format(p, buf, size);
    rp_plan_free(p);
    return n;
}
