/* Plans as artifacts.
 *
 * A plan file is a small JSON document (docs/plan-files.md): a name, a
 * description, the spec in either grammar (repeat_layers or layer_map) and the
 * identity of the base model it was made for: architecture, trunk layer count
 * and the content hash of the model's tensors.
 *
 * The content hash identifies weights, not files: XXH3-128 over the tensor
 * table (name, type, shape) and an XXH3-128 digest of every tensor's bytes,
 * tensors taken in name order, metadata left out. Renaming a model, editing its
 * chat template or re-writing it with tensors in another order keeps the hash;
 * another quantization, another fine-tune or another shape changes it. It is
 * computed once: a file reprise wrote carries it in its metadata
 * (reprise.content_hash, stamped by rp_content_hash_stamp while the tensor data
 * is written); for other files it is cached beside the model in
 * MODEL.gguf.rphash, valid while the file's size, mtime and inode and its
 * tensor table stay the same. */
#ifndef RP_PLANFILE_H
#define RP_PLANFILE_H

#include "format/gguf.h"
#include "core/model.h"
#include "reprise.h"

#include <stdbool.h>
#include <stdint.h>

#define RP_PLANFILE_FORMAT    "reprise-plan"
#define RP_PLANFILE_VERSION   1
#define RP_PLANFILE_MAX_BYTES (1u << 20) /* a plan file is a few hundred bytes */
#define RP_PLAN_NAME_MAX      64

/* ---- content hash ---------------------------------------------------------- */

#define RP_CONTENT_HASH_KEY       "reprise.content_hash"         /* "xxh3-128:<32 hex>" */
#define RP_CONTENT_HASH_TABLE_KEY "reprise.content_hash.tensors" /* "xxh3-64:<16 hex>" */
#define RP_CONTENT_HASH_LEN       41                             /* strlen("xxh3-128:") + 32 */
#define RP_TABLE_HASH_LEN         24                             /* strlen("xxh3-64:") + 16 */
#define RP_CONTENT_HASH_CACHE_EXT ".rphash"

typedef enum rp_hash_source {
    RP_HASH_COMPUTED = 0, /* read every tensor's bytes now */
    RP_HASH_METADATA = 1, /* the file's own reprise.content_hash */
    RP_HASH_CACHE = 2,    /* MODEL.gguf.rphash */
} rp_hash_source;

typedef struct rp_content_hash {
    char hash[RP_CONTENT_HASH_LEN + 1]; /* "xxh3-128:" + 32 lowercase hex digits */
    char table[RP_TABLE_HASH_LEN + 1];  /* the tensor table alone: "xxh3-64:" + 16 hex */
    rp_hash_source source;
    bool cached;          /* RP_HASH_COMPUTED: the result was written to cache_path */
    char cache_note[256]; /* RP_HASH_COMPUTED and not cached: why not */
    char cache_path[4096];
} rp_content_hash;

/* Hashes every tensor of g now (bytes read through the mapping, by up to
 * n_threads threads; 0 = a few). progress may be NULL; returning false cancels. */
rp_status rp_content_hash_compute(const rp_gguf *g, int n_threads, rp_progress_fn progress,
                                  void *user, rp_content_hash *out);
/* The tensor table hash alone (cheap: no tensor data is read). */
void rp_content_hash_table(const rp_gguf *g, char out[RP_TABLE_HASH_LEN + 1]);
/* The hash of g the cheapest way that is still right: its own metadata when the
 * tensor table it was stamped for is the file's, else the cache file beside
 * g's path when size, mtime, inode and tensor table match, else computed (and
 * the cache written; a read-only folder only costs the recomputation next
 * time, which out->cache_note explains). */
rp_status rp_content_hash_get(const rp_gguf *g, rp_progress_fn progress, void *user,
                              rp_content_hash *out);
/* Makes w write reprise.content_hash and reprise.content_hash.tensors for the
 * tensors it writes, digested while they are written (no second pass; works
 * with fill callbacks). Call it when every tensor has been added, right
 * before rp_gguf_w_write. Replaces any content hash copied from another file. */
rp_status rp_content_hash_stamp(rp_gguf_writer *w);
/* "xxh3-128:<32 lowercase hex>"? */
bool rp_content_hash_valid(const char *s);
const char *rp_hash_source_name(rp_hash_source s); /* "metadata", "cache", "computed" */

/* ---- plan files -------------------------------------------------------------- */

typedef struct rp_planfile {
    char *name;         /* [A-Za-z0-9._:+/-], at most RP_PLAN_NAME_MAX bytes */
    char *description;  /* "" when absent */
    int kind;           /* RP_PLAN_REPEAT or RP_PLAN_MAP (plan.h) */
    char *spec;         /* in the grammar of kind */
    int n_eff;          /* steps of the plan on the base model */
    char *arch;         /* base model: general.architecture */
    int n_layer;        /* base model: trunk layers (what plans index) */
    char *content_hash; /* base model: "xxh3-128:..." */
    char *base_name;    /* base model: general.name (informational; may be NULL) */
    char *base_file;    /* base model: file name it was saved from (informational; may be NULL) */
    char *created_by;   /* "reprise 0.1.0" (informational; may be NULL) */
} rp_planfile;

/* A plan file for model m with content hash `hash`; the spec is validated
 * against m (a refusal names the block or item). */
rp_status rp_planfile_new(const rp_model *m, const char *hash, const char *name,
                          const char *description, int kind, const char *spec, rp_planfile **out);
/* Reads and validates a plan file; every refusal names the file and the JSON
 * field. */
rp_status rp_planfile_read(const char *path, rp_planfile **out);
/* The same from text; `what` names it in messages. */
rp_status rp_planfile_parse(const char *text, size_t len, const char *what, rp_planfile **out);
/* The JSON text (malloc'ed, ends with a newline); NULL on out of memory. */
char *rp_planfile_to_json(const rp_planfile *pf);
/* Writes it atomically. */
rp_status rp_planfile_write(const rp_planfile *pf, const char *path);
void rp_planfile_free(rp_planfile *pf);
/* Is `name` usable as a plan name (and so a served model id)? */
bool rp_planfile_name_valid(const char *name);

/* Does pf apply to model m whose content hash is `hash`? RP_OK when it does.
 * A different architecture or layer count is refused (RP_ERR_PLAN); a
 * different content hash is refused too unless force, which accepts it and
 * sets *forced (the caller must say so). The spec is then validated against
 * m. Messages name the plan file, the model and the reason. */
rp_status rp_planfile_check(const rp_planfile *pf, const rp_model *m, const char *hash, bool force,
                            bool *forced);

#endif
