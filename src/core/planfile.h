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
#include "reprise_tools.h"

#include <stdbool.h>
#include <stdint.h>

#define RP_PLANFILE_FORMAT        "reprise-plan"
#define RP_PLANFILE_VERSION       1
#define RP_PLANFILE_MAX_BYTES     (1u << 20)             /* a plan file is a few hundred bytes */
#define RP_CONTENT_HASH_KEY       "reprise.content_hash" /* "xxh3-128:<32 hex>" */
#define RP_CONTENT_HASH_TABLE_KEY "reprise.content_hash.tensors" /* "xxh3-64:<16 hex>" */
#define RP_CONTENT_HASH_CACHE_EXT ".rphash"
/* RP_CONTENT_HASH_LEN, RP_TABLE_HASH_LEN, rp_content_hash and the functions
 * that compute and check it are public (reprise_tools.h). */

/* The tensor table hash alone (cheap: no tensor data is read). */
void rp_content_hash_table(const rp_gguf *g, char out[RP_TABLE_HASH_LEN + 1]);
/* Makes w write reprise.content_hash and reprise.content_hash.tensors for the
 * tensors it writes, digested while they are written (no second pass; works
 * with fill callbacks). Call it when every tensor has been added, right
 * before rp_gguf_w_write. Replaces any content hash copied from another file. */
rp_status rp_content_hash_stamp(rp_gguf_writer *w);

/* ---- plan files: public (reprise_tools.h) ------------------------------- */

#endif
