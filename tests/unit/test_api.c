/* The public API as an embedder uses it (reprise.h, reprise_tools.h and
 * nothing else): input embeddings, the abort callback, sequence removal and
 * copy, one sequence's state saved and restored bit for bit, metadata
 * iteration, the thread safety of rp_arch_list and rp_log_set, and the plan
 * and state queries. */
#include "reprise.h"
#include "reprise_tools.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define STORIES "models/stories260K.gguf"
#define QWEN35  "models/synth/qwen35-tiny.gguf"
#define GEMMA3  "models/synth/gemma3-tiny.gguf"

static const int32_t k_prompt[] = {1, 403, 407, 261, 378, 69, 259, 397, 269, 101, 306, 278};
#define N_PROMPT ((int)(sizeof k_prompt / sizeof k_prompt[0]))

static rp_model *load(const char *rel) {
    rp_model *m = NULL;
    if (rp_model_load(test_shared(rel), NULL, &m)) fprintf(stderr, "  %s\n", rp_last_error());
    return m;
}

/* A context with n_seq sequences, F32 caches (bit-exact comparisons need no
 * F16 rounding of their own, but either works), one thread. */
static rp_context *context(const rp_model *m, int n_seq, int n_batch, const char *repeat) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.repeat_layers = repeat;
    rp_context *c = NULL;
    if (rp_context_new(m, &cp, &c)) fprintf(stderr, "  %s\n", rp_last_error());
    return c;
}

/* Tokens t[0..n) of sequence seq, logits for the last; false on an error. */
static bool decode_seq(rp_context *c, const int32_t *t, int n, int seq) {
    int32_t *s = malloc((size_t)n * sizeof *s);
    for (int i = 0; i < n; i++) s[i] = seq;
    rp_batch b = {.n_tokens = n, .token = t, .seq_id = s};
    rp_status st = rp_decode(c, &b);
    free(s);
    if (st) fprintf(stderr, "  decode: %s\n", rp_last_error());
    return st == RP_OK;
}

/* The logits of the last decode's row i, copied. */
static float *logits_copy(const rp_context *c, int i) {
    const float *l = rp_get_logits(c, i);
    if (!l) return NULL;
    float *out = malloc((size_t)rp_n_vocab(c) * sizeof *out);
    memcpy(out, l, (size_t)rp_n_vocab(c) * sizeof *out);
    return out;
}

static bool same_logits(const float *a, const rp_context *c, int i) {
    const float *b = rp_get_logits(c, i);
    return a && b && !memcmp(a, b, (size_t)rp_n_vocab(c) * sizeof *a);
}

/* The embedding-table rows of stories260K (an F32 token_embd.weight). */
static float *embedding_rows(const int32_t *t, int n, int *n_embd) {
    rp_gguf *g;
    if (rp_gguf_open(test_shared(STORIES), &g)) return NULL;
    const rp_gguf_tensor *te = rp_gguf_find_tensor(g, "token_embd.weight");
    float *out = NULL;
    if (te && te->type == RP_TYPE_F32) {
        *n_embd = (int)te->ne[0];
        out = malloc((size_t)n * (size_t)*n_embd * sizeof *out);
        for (int i = 0; i < n; i++)
            memcpy(out + (size_t)i * (size_t)*n_embd,
                   (const float *)te->data + (size_t)t[i] * (size_t)*n_embd,
                   (size_t)*n_embd * sizeof *out);
    }
    rp_gguf_close(g);
    return out;
}

/* A batch of input embeddings gives the logits its tokens give, bit for bit;
 * a batch with both or neither is refused. */
void test_api_embd_batch(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "load");
    rp_context *c = context(m, 1, 512, NULL);
    int n_embd = 0;
    float *e = embedding_rows(k_prompt, N_PROMPT, &n_embd);
    REQUIRE(c && e && n_embd == rp_model_n_embd(m), "setup");
    int8_t want[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) want[i] = 1;
    rp_batch bt = {.n_tokens = N_PROMPT, .token = k_prompt, .logits = want};
    REQUIRE(!rp_decode(c, &bt), "%s", rp_last_error());
    float *ref[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) ref[i] = logits_copy(c, i);
    rp_kv_clear(c);
    rp_batch be = {.n_tokens = N_PROMPT, .embd = e, .logits = want};
    REQUIRE(!rp_decode(c, &be), "%s", rp_last_error());
    int bad = 0;
    for (int i = 0; i < N_PROMPT; i++) bad += !same_logits(ref[i], c, i);
    CHECK(!bad, "%d of %d rows differ between tokens and their embeddings", bad, N_PROMPT);
    /* and the next token after embeddings continues as after tokens */
    CHECK(rp_kv_seq_len(c, 0) == N_PROMPT, "length %d", rp_kv_seq_len(c, 0));
    rp_batch both = {.n_tokens = 1, .token = k_prompt, .embd = e};
    rp_batch none = {.n_tokens = 1};
    CHECK(rp_decode(c, &both) == RP_ERR_INVALID_ARG, "tokens and embeddings accepted");
    CHECK(rp_decode(c, &none) == RP_ERR_INVALID_ARG, "an empty batch accepted");
    CHECK(rp_kv_seq_len(c, 0) == N_PROMPT, "a refused batch changed the cache");
    for (int i = 0; i < N_PROMPT; i++) free(ref[i]);
    free(e);
    rp_context_free(c);
    rp_model_free(m);
}

typedef struct abort_state {
    atomic_int calls;
    int stop_at; /* the call that returns true (1-based) */
} abort_state;

static bool abort_cb(void *user) {
    abort_state *a = user;
    return atomic_fetch_add(&a->calls, 1) + 1 >= a->stop_at;
}

/* The abort callback is asked before each pass of n_batch tokens; the passes
 * run stay in the cache, no logits are readable, and decoding goes on once
 * it lets go. */
void test_api_abort(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "load");
    rp_context *c = context(m, 1, 4, NULL);
    REQUIRE(c, "context");
    abort_state a = {.stop_at = 2};
    rp_context_set_abort(c, abort_cb, &a);
    rp_batch b = {.n_tokens = N_PROMPT, .token = k_prompt};
    CHECK(rp_decode(c, &b) == RP_ERR_CANCELLED, "not cancelled: %s", rp_last_error());
    CHECK(atomic_load(&a.calls) == 2, "asked %d times", atomic_load(&a.calls));
    CHECK(rp_kv_seq_len(c, 0) == 4, "the first pass of 4 tokens stays: %d", rp_kv_seq_len(c, 0));
    CHECK(!rp_get_logits(c, N_PROMPT - 1) && !rp_get_logits(c, 0), "logits after a cancel");
    CHECK(strstr(rp_last_error(), "aborted after 4 of 12 tokens"), "message: %s", rp_last_error());
    /* cancelled before anything ran */
    rp_kv_clear(c);
    a = (abort_state){.stop_at = 1};
    CHECK(rp_decode(c, &b) == RP_ERR_CANCELLED && rp_kv_seq_len(c, 0) == 0, "cancel at once");
    /* removed: the whole batch decodes, and continues the 4 positions cut back to */
    rp_context_set_abort(c, NULL, NULL);
    rp_kv_clear(c);
    CHECK(!rp_decode(c, &b) && rp_kv_seq_len(c, 0) == N_PROMPT && rp_get_logits(c, N_PROMPT - 1),
          "after removing the callback: %s", rp_last_error());
    rp_context_free(c);
    rp_model_free(m);
}

/* Removal takes a sequence's end (or all of it); a copy continues exactly as
 * its source would, whole or a prefix. */
void test_api_seq_rm_cp(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "load");
    rp_context *c = context(m, 3, 512, "1,3");
    REQUIRE(c, "context");
    int8_t want[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) want[i] = 1;
    rp_batch all = {.n_tokens = N_PROMPT, .token = k_prompt, .logits = want};
    REQUIRE(!rp_decode(c, &all), "%s", rp_last_error());
    float *row6 = logits_copy(c, 6); /* predicts after k_prompt[0..6] */
    /* seq 1: a whole copy; the next token decodes as in seq 0 */
    REQUIRE(!rp_kv_seq_cp(c, 0, 1, 0, -1), "%s", rp_last_error());
    CHECK(rp_kv_seq_len(c, 1) == N_PROMPT, "copied length %d", rp_kv_seq_len(c, 1));
    const int32_t next = 300;
    REQUIRE(decode_seq(c, &next, 1, 0), "seq 0");
    float *a = logits_copy(c, 0);
    REQUIRE(decode_seq(c, &next, 1, 1), "seq 1");
    CHECK(same_logits(a, c, 0), "the copy decodes differently from its source");
    /* seq 2: a prefix of 6 positions, then the prompt's token 6 */
    REQUIRE(!rp_kv_seq_cp(c, 0, 2, 0, 6), "%s", rp_last_error());
    REQUIRE(decode_seq(c, &k_prompt[6], 1, 2), "seq 2");
    CHECK(same_logits(row6, c, 0), "a prefix copy decodes differently from the batch row");
    CHECK(rp_kv_seq_cp(c, 0, 2, 2, 6) == RP_ERR_INVALID_ARG, "a copy from position 2 accepted");
    CHECK(rp_kv_seq_cp(c, 0, 2, 0, 99) == RP_ERR_INVALID_ARG, "a copy past the end accepted");
    CHECK(rp_kv_seq_cp(c, 0, 7, 0, -1) == RP_ERR_INVALID_ARG, "sequence 7 accepted");
    /* removal: the end goes, a hole is refused, [0, end) clears */
    CHECK(!rp_kv_seq_rm(c, 1, 5, -1) && rp_kv_seq_len(c, 1) == 5, "rm end: %d",
          rp_kv_seq_len(c, 1));
    CHECK(rp_kv_seq_rm(c, 1, 1, 2) == RP_ERR_UNSUPPORTED && rp_kv_seq_len(c, 1) == 5,
          "a hole accepted");
    CHECK(!rp_kv_seq_rm(c, 1, 9, -1) && rp_kv_seq_len(c, 1) == 5, "an empty range changed it");
    CHECK(!rp_kv_seq_rm(c, 1, -1, -1) && rp_kv_seq_len(c, 1) == 0, "rm all");
    CHECK(rp_kv_seq_rm(c, -1, 2, -1) == RP_ERR_UNSUPPORTED, "a range of every sequence accepted");
    CHECK(!rp_kv_seq_rm(c, -1, -1, -1) && rp_kv_seq_len(c, 0) == 0 && rp_kv_seq_len(c, 2) == 0,
          "rm every sequence");
    free(a);
    free(row6);
    rp_context_free(c);
    rp_model_free(m);
}

/* With recurrent state a sequence copies whole, never a prefix. */
void test_api_seq_cp_recurrent(void) {
    rp_model *m = load(QWEN35);
    REQUIRE(m, "load");
    rp_context *c = context(m, 2, 512, NULL);
    REQUIRE(c && rp_context_has_recurrent(c), "a recurrent context");
    REQUIRE(decode_seq(c, k_prompt, 8, 0), "prompt");
    CHECK(rp_kv_seq_cp(c, 0, 1, 0, 5) == RP_ERR_UNSUPPORTED && rp_kv_seq_len(c, 1) == 0,
          "a prefix of recurrent state accepted");
    REQUIRE(!rp_kv_seq_cp(c, 0, 1, 0, -1), "%s", rp_last_error());
    REQUIRE(decode_seq(c, &k_prompt[8], 1, 0), "seq 0");
    float *a = logits_copy(c, 0);
    REQUIRE(decode_seq(c, &k_prompt[8], 1, 1), "seq 1");
    CHECK(same_logits(a, c, 0), "the recurrent copy decodes differently");
    free(a);
    rp_context_free(c);
    rp_model_free(m);
}

/* Saves seq 0 after a prompt, decodes one more token; restores the image into
 * a sequence of `to` and decodes the same token there: the logits must be the
 * same bytes. */
static void state_roundtrip(const char *rel, const char *repeat, int batch_to, bool file) {
    rp_model *m = load(rel);
    REQUIRE(m, "load %s", rel);
    rp_context *c = context(m, 2, 512, repeat), *to = context(m, 3, batch_to, repeat);
    REQUIRE(c && to, "contexts");
    REQUIRE(decode_seq(c, k_prompt, N_PROMPT - 1, 0), "prompt");
    const size_t n = rp_seq_state_size(c, 0);
    void *img = malloc(n);
    size_t written = 0;
    const char *path = test_tmp("seq.state");
    REQUIRE(n > 0 && !rp_seq_state_save(c, 0, img, n, &written) && written == n, "save: %s",
            rp_last_error());
    CHECK(rp_seq_state_save(c, 0, img, n - 1, NULL) == RP_ERR_INVALID_ARG, "a short buffer");
    if (file) REQUIRE(!rp_seq_state_save_file(c, 0, path), "save file: %s", rp_last_error());
    REQUIRE(decode_seq(c, &k_prompt[N_PROMPT - 1], 1, 0), "next");
    float *a = logits_copy(c, 0);
    REQUIRE(decode_seq(to, k_prompt, 3, 2), "other content in the target");
    rp_status s = file ? rp_seq_state_load_file(to, 2, path) : rp_seq_state_load(to, 2, img, n);
    REQUIRE(!s, "load: %s", rp_last_error());
    CHECK(rp_kv_seq_len(to, 2) == N_PROMPT - 1, "restored length %d", rp_kv_seq_len(to, 2));
    REQUIRE(decode_seq(to, &k_prompt[N_PROMPT - 1], 1, 2), "next after restore");
    CHECK(same_logits(a, to, 0), "%s %s: the restored sequence decodes differently", rel,
          repeat ? repeat : "");
    /* refusals: damaged, truncated, another plan; nothing changes */
    ((char *)img)[0] ^= 1;
    CHECK(rp_seq_state_load(to, 1, img, n) == RP_ERR_FORMAT, "a damaged magic");
    ((char *)img)[0] ^= 1;
    CHECK(rp_seq_state_load(to, 1, img, n - 3) == RP_ERR_FORMAT, "a truncated image");
    CHECK(rp_kv_seq_len(to, 1) == 0, "a refused image changed the sequence");
    rp_context *other = context(m, 1, 512, repeat ? NULL : "1,2");
    CHECK(other && rp_seq_state_load(other, 0, img, n) == RP_ERR_UNSUPPORTED,
          "an image of another plan accepted");
    rp_context_free(other);
    free(a);
    free(img);
    rp_context_free(to);
    rp_context_free(c);
    rp_model_free(m);
}

void test_api_seq_state_roundtrip(void) {
    state_roundtrip(STORIES, NULL, 512, false);
    state_roundtrip(STORIES, "1,3", 512, true);
    state_roundtrip(QWEN35, NULL, 512, true); /* recurrent state and attention */
    state_roundtrip(GEMMA3, NULL, 1, false);  /* into sliding-window rings of 8 cells */
    /* a ring's image holds its last cells only: a context keeping every position refuses it */
    rp_model *m = load(GEMMA3);
    REQUIRE(m, "load");
    rp_context *ring = context(m, 1, 1, NULL), *full = context(m, 1, 512, NULL);
    REQUIRE(ring && full && decode_seq(ring, k_prompt, N_PROMPT, 0), "setup");
    const size_t n = rp_seq_state_size(ring, 0);
    void *img = malloc(n);
    REQUIRE(!rp_seq_state_save(ring, 0, img, n, NULL), "save");
    CHECK(rp_seq_state_load(full, 0, img, n) == RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "sliding-window ring"),
          "a ring's image into full caches: %s", rp_last_error());
    free(img);
    rp_context_free(ring);
    rp_context_free(full);
    rp_model_free(m);
}

/* Every key with its type and value as text. */
void test_api_metadata(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "load");
    const int64_t n = rp_model_meta_count(m);
    CHECK(n == 19, "%lld keys", (long long)n);
    int found = 0;
    char buf[256];
    for (int64_t i = 0; i < n; i++) {
        const char *k = rp_model_meta_key(m, i);
        int elem = -2;
        const int t = rp_model_meta_type(m, i, &elem);
        const int len = rp_model_meta_val_str(m, i, buf, sizeof buf);
        REQUIRE(k && t >= 0 && len >= 0, "key %lld", (long long)i);
        if (!strcmp(k, "general.architecture"))
            found += t == RP_GGUF_STRING && elem == -1 && !strcmp(buf, "llama") && len == 5;
        if (!strcmp(k, "llama.block_count")) found += t == RP_GGUF_UINT32 && !strcmp(buf, "5");
        if (!strcmp(k, "llama.attention.layer_norm_rms_epsilon"))
            found += t == RP_GGUF_FLOAT32 && !strncmp(buf, "9.99999975e-06", 14);
        if (!strcmp(k, "tokenizer.ggml.tokens"))
            found += t == RP_GGUF_ARRAY && elem == RP_GGUF_STRING &&
                     !strncmp(buf, "[\"<unk>\", \"<s>\", \"</s>\", \"<0x00>\"", 31) &&
                     len > (int)sizeof buf; /* the whole array, cut to the buffer */
    }
    CHECK(found == 4, "%d of 4 known keys read as expected", found);
    CHECK(!rp_model_meta_key(m, n) && rp_model_meta_type(m, -1, NULL) == -1 &&
              rp_model_meta_val_str(m, n, buf, sizeof buf) == -1 && buf[0] == 0,
          "out of range");
    CHECK(!strcmp(rp_model_meta_str(m, "general.name"), "llama"), "meta_str");
    rp_model_free(m);
}

static void *arch_list_thread(void *arg) {
    (void)arg;
    const char *p = NULL;
    for (int i = 0; i < 1000; i++) {
        const char *q = rp_arch_list();
        if (p && q != p) return NULL;
        p = q;
    }
    return (void *)p;
}

/* rp_arch_list from many threads at once: one static text, filled once. */
void test_api_arch_list_threads(void) {
    pthread_t t[8];
    void *r[8];
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, arch_list_thread, NULL);
    for (int i = 0; i < 8; i++) pthread_join(t[i], &r[i]);
    int same = 0;
    for (int i = 0; i < 8; i++) same += r[i] && r[i] == (void *)rp_arch_list();
    CHECK(same == 8, "%d of 8 threads saw the one list", same);
    CHECK(strstr(rp_arch_list(), "llama") && strstr(rp_arch_list(), "zamba2"), "list: %s",
          rp_arch_list());
}

typedef struct log_pair {
    atomic_int calls, mismatched;
} log_pair;

static log_pair g_log_a, g_log_b;

static void log_a(rp_log_level l, const char *msg, void *user) {
    (void)l;
    (void)msg;
    atomic_fetch_add(&g_log_a.calls, 1);
    if (user != &g_log_a) atomic_fetch_add(&g_log_a.mismatched, 1);
}

static void log_b(rp_log_level l, const char *msg, void *user) {
    (void)l;
    (void)msg;
    atomic_fetch_add(&g_log_b.calls, 1);
    if (user != &g_log_b) atomic_fetch_add(&g_log_b.mismatched, 1);
}

static atomic_bool g_log_stop;

static void *log_setter(void *arg) {
    (void)arg;
    for (unsigned i = 0; !atomic_load(&g_log_stop); i++)
        rp_log_set(i & 1 ? log_a : log_b, i & 1 ? (void *)&g_log_a : (void *)&g_log_b);
    return NULL;
}

/* rp_log_set swapped from two threads while the library logs (a Zamba2 load
 * logs its shape): every message reaches a callback with its own user. */
void test_api_log_set_threads(void) {
    const char *path = test_tmp("z.gguf");
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = "zamba2";
    sp.n_embd = 64;
    sp.n_layer = 6;
    sp.n_head = 4;
    sp.n_ff = 256;
    REQUIRE(!rp_synth_write(&sp, path, NULL, NULL), "synth: %s", rp_last_error());
    atomic_store(&g_log_stop, false);
    rp_log_set(log_a, &g_log_a); /* a callback from the first load on */
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, log_setter, NULL);
    int loaded = 0;
    for (int i = 0; i < 40; i++) {
        rp_model *m = NULL;
        loaded += rp_model_load(path, NULL, &m) == RP_OK;
        rp_model_free(m);
    }
    atomic_store(&g_log_stop, true);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    rp_log_set(NULL, NULL);
    CHECK(loaded == 40, "%d of 40 loads", loaded);
    CHECK(atomic_load(&g_log_a.calls) + atomic_load(&g_log_b.calls) == 40, "%d + %d messages",
          atomic_load(&g_log_a.calls), atomic_load(&g_log_b.calls));
    CHECK(!atomic_load(&g_log_a.mismatched) && !atomic_load(&g_log_b.mismatched),
          "a callback got the other's user pointer");
}

/* The plan and state queries: seams, the compact list, the boundary band,
 * the state accounting against the byte total. */
void test_api_plan_state_queries(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "load");
    rp_context *c = context(m, 2, 512, "1,3");
    REQUIRE(c, "context");
    char buf[64];
    CHECK(rp_context_plan_format(c, buf, sizeof buf) > 0 && !strcmp(buf, "0..2 | 1..4"),
          "format '%s'", buf);
    int seams = 0;
    for (int e = -1; e <= rp_context_n_eff(c); e++) seams += rp_context_step_seam(c, e);
    CHECK(seams == 1 && rp_context_step_seam(c, 3), "%d seams", seams);
    int band = 0;
    CHECK(rp_context_boundary_repeats(c, &band) == 2 && band == 3, "boundary %d", band);
    rp_state_info si;
    rp_context_state_info(c, &si);
    CHECK(si.n_slots == 7 && si.n_slots_trunk == 5 && si.n_slots_kv == 7 && si.n_slots_rec == 0,
          "slots %d/%d/%d/%d", si.n_slots, si.n_slots_trunk, si.n_slots_kv, si.n_slots_rec);
    CHECK(si.kv_bytes + si.rec_bytes == rp_context_state_bytes(c) && si.n_seq == 2 &&
              si.n_ctx == 64,
          "bytes %llu", (unsigned long long)si.kv_bytes);
    bool mixed = true;
    CHECK(rp_model_weight_type(m, &mixed) == RP_TYPE_F32 && !mixed, "weight type");
    CHECK(!strcmp(rp_model_path(m), test_shared(STORIES)), "path %s", rp_model_path(m));
    rp_type_info ti;
    CHECK(rp_type_get_info(RP_TYPE_Q4_K, &ti) && ti.block_size == 256 && ti.quantized &&
              ti.can_compute && ti.can_write && rp_type_row_bytes(RP_TYPE_Q4_K, 512) == 288,
          "q4_K info");
    CHECK(!rp_type_get_info(4, &ti) && !ti.name, "a retired id");
    CHECK(rp_default_threads() >= 1, "threads");
    rp_context_free(c);
    rp_model_free(m);
}

/* A model from memory runs as the same file does. */
void test_api_model_load_mem(void) {
    size_t n;
    void *img = test_read(test_shared(STORIES), &n);
    REQUIRE(img, "read");
    rp_model *a = load(STORIES), *b = NULL;
    REQUIRE(a && !rp_model_load_mem(img, n, "stories (memory)", NULL, &b), "%s", rp_last_error());
    CHECK(!strcmp(rp_model_path(b), "stories (memory)"), "name %s", rp_model_path(b));
    rp_context *ca = context(a, 1, 512, NULL), *cb = context(b, 1, 512, NULL);
    REQUIRE(ca && cb && decode_seq(ca, k_prompt, N_PROMPT, 0) &&
                decode_seq(cb, k_prompt, N_PROMPT, 0),
            "decode");
    CHECK(same_logits(rp_get_logits(ca, N_PROMPT - 1), cb, N_PROMPT - 1), "memory != file");
    rp_model *c = (rp_model *)img;
    CHECK(rp_model_load_mem(img, 100, "short", NULL, &c) == RP_ERR_FORMAT && !c, "a short image");
    rp_context_free(ca);
    rp_context_free(cb);
    rp_model_free(a);
    rp_model_free(b);
    free(img);
}
