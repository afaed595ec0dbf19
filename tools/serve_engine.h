/* reprise serve: the inference engine (serve_engine.c) and what the HTTP
 * front (serve.c, serve_api.c) hands it.
 *
 * A model entry is (name, context with its plan); its slots are the context's
 * sequences. One engine thread owns every context and runs continuous
 * batching: each step gathers one token from every generating slot and prompt
 * chunks of newly admitted requests into one batch per entry, decodes, samples
 * per slot and publishes text to the waiting connection handlers. Handlers
 * only submit tasks, wait on them and read their published text. */
#ifndef RP_SERVE_ENGINE_H
#define RP_SERVE_ENGINE_H

#include "tools.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define SRV_MAX_STOP     16  /* stop strings per request */
#define SRV_MAX_STOP_LEN 256 /* bytes per stop string */
#define SRV_MAX_PLANS    32  /* --plan entries besides the model itself */
#define SRV_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define SRV_MAX_PROBS    20 /* alternatives per token (top_logprobs, n_probs) */

/* The log-probabilities of one generated token (natural log). */
typedef struct srv_prob {
    int32_t tok;
    float lp;
    int n_top;
    rp_token_logprob top[SRV_MAX_PROBS];
} srv_prob;

/* One servable model: a name clients put in "model", a context with its plan,
 * and the slots (sequences) of that context. Several entries may share one
 * rp_model (the weights are mapped once). */
typedef struct srv_entry {
    char *name;
    rp_context *ctx;
    int n_slot;
    uint32_t n_ctx;
    const char *plan_kind;   /* "identity", "repeat-layers", "layer-map" */
    const char *plan_spec;   /* as given, or "" */
    const char *plan_file;   /* the plan file it came from, or NULL */
    const char *plan_name;   /* that file's plan name, or NULL */
    const char *description; /* that file's description, or "" */
    bool plan_forced;        /* --plan-force accepted weights with another content hash */
    rp_spec *spec;           /* speculative decoding over ctx, or NULL */
    struct srv_slot *slots;  /* engine-private */
} srv_entry;

typedef enum srv_finish {
    SRV_FIN_NONE = 0, /* still running */
    SRV_FIN_EOG,      /* the model ended its text */
    SRV_FIN_WORD,     /* a stop string matched */
    SRV_FIN_LIMIT,    /* max_tokens reached */
    SRV_FIN_CONTEXT,  /* the slot's context is full */
    SRV_FIN_ERROR,    /* failed: err_http / err_msg say why */
} srv_finish;

/* A generation request. The submitter fills the first block and hands the
 * task to srv_submit; from then on the rest is read and written under the
 * engine lock only. Reference counted: the engine holds one while the task is
 * queued or running, the handler one until it lets go (srv_release). */
typedef struct srv_task {
    /* set before submit, immutable afterwards */
    int entry;
    int32_t *prompt; /* [n_prompt] owned */
    int n_prompt;
    rp_sampler_params sp;
    int n_predict;            /* -1: until end of text or full context */
    char *stop[SRV_MAX_STOP]; /* owned */
    int n_stop;
    double t_submit, deadline; /* now_s(); deadline 0 = none */
    /* what rp_sampler_params does not carry (owned by the task) */
    rp_grammar *grammar; /* the output's grammar, or NULL */
    int32_t *bias_tok;   /* logit biases (ignore_eos: -inf on the end tokens) */
    float *bias;
    int n_bias;
    char **breakers; /* DRY sequence breakers (NULL: the defaults) */
    int n_breakers;
    char *samplers;  /* the string sp.samplers points to */
    bool want_probs; /* record srv_prob per token */
    bool post_probs; /* after the sampler's stages (post_sampling_probs), not of the raw logits */
    int n_probs;     /* alternatives per token, 0..SRV_MAX_PROBS */
    /* shared, under the engine lock */
    int refs;
    bool cancel;  /* the handler gave up (client gone, timeout) */
    bool started; /* holds a slot */
    bool done;    /* finish is final; out is complete */
    srv_finish finish;
    int stop_index; /* which stop string matched (SRV_FIN_WORD) */
    int err_http;   /* SRV_FIN_ERROR: HTTP status for the error */
    const char *err_type, *err_code;
    char err_msg[256];
    tbuf out;       /* generated text published so far; always valid UTF-8 */
    tbuf tokens;    /* int32_t ids of the generated tokens (the end-of-text token not included) */
    tbuf marks;     /* size_t: end offset in out of each publish that added text (one per streamed
                         chunk) */
    tbuf mark_toks; /* size_t: generated tokens published up to each mark */
    tbuf probs;     /* srv_prob of each token of `tokens` (want_probs) */
    int n_gen;      /* tokens generated (the end-of-text token not counted) */
    int n_drafted, n_accepted;       /* speculative decoding: drafted tokens verified, and kept */
    double t_start, t_prompt, t_end; /* slot taken, prompt decoded, finished */
    pthread_cond_t cv;               /* broadcast on every change */
    struct srv_task *next;           /* queue link */
} srv_task;

typedef struct srv_engine srv_engine;

/* Creates the engine over entries (not owned; they must outlive it) with a
 * prompt budget of n_batch tokens per step, and starts its thread. NULL on
 * failure, with the reason in err. */
srv_engine *srv_engine_start(srv_entry *entries, int n_entries, int n_batch, char *err,
                             size_t err_size);
/* Stop taking work: queued tasks fail with 503 at once, running ones get
 * until now + grace seconds to finish, then fail with 503. Returns when the
 * engine thread has exited. Then srv_engine_free. */
void srv_engine_stop(srv_engine *e, double grace);
/* The first half of srv_engine_stop, which does not wait: from now on no
 * queued task is admitted (each fails with 503 at the engine's next step). A
 * later srv_engine_stop keeps this grace. */
void srv_engine_drain(srv_engine *e, double grace);
void srv_engine_free(srv_engine *e);
/* Serves entries[0..n_entries) from now on: the entries past the current
 * count are complete (context, n_slot, n_ctx) and the array has room for
 * them. One caller at a time; false when out of memory. */
bool srv_engine_add_entries(srv_engine *e, int n_entries);

/* A task with refs = 1 for the caller (prompt and stop strings are taken over
 * by the task). NULL on allocation failure. */
srv_task *srv_task_new(void);
/* Queues a task; false when the engine is stopping (the task is untouched).
 * On success the engine holds its own reference. */
bool srv_submit(srv_engine *e, srv_task *t);
/* The handler's side is done with t: if it is not finished it is cancelled
 * (its slot is freed at the next step). Drops the caller's reference. */
void srv_release(srv_engine *e, srv_task *t);

void srv_lock(srv_engine *e);
void srv_unlock(srv_engine *e);
/* Under the lock: wait until t has more than `have` bytes of text, is done,
 * or `until` (now_s clock) passes. */
void srv_wait_locked(srv_engine *e, srv_task *t, size_t have, double until);
/* Under the lock: cancel t (client gone or timed out) and wake the engine. */
void srv_cancel_locked(srv_engine *e, srv_task *t);

/* Slots in use and requests waiting, over all entries (takes the lock). */
void srv_engine_counts(srv_engine *e, int *busy, int *queued);

/* Counters since the start, for /metrics (llama-server's names in comments). */
typedef struct srv_metrics {
    uint64_t prompt_tokens;    /* llamacpp:prompt_tokens_total */
    double prompt_seconds;     /* llamacpp:prompt_seconds_total */
    uint64_t tokens_predicted; /* llamacpp:tokens_predicted_total */
    double predicted_seconds;  /* llamacpp:tokens_predicted_seconds_total */
    uint64_t n_decode;         /* llamacpp:n_decode_total */
    uint64_t busy_per_decode;  /* sum over decodes of the slots in them */
    uint64_t requests;         /* requests finished (any way) */
    uint64_t drafted, accepted;
    int busy, queued;
} srv_metrics;
void srv_engine_metrics(srv_engine *e, srv_metrics *m);

/* One slot, for /slots. */
typedef struct srv_slot_info {
    int entry, id;
    bool busy;
    int n_prompt, n_gen, n_predict;
    rp_sampler_params sp;
    double t_start;
} srv_slot_info;
/* Up to max slots (every entry's, in order); returns how many there are. */
int srv_engine_slots(srv_engine *e, srv_slot_info *out, int max);

/* ---- text helpers (serve_engine.c) ---------------------------------------- */

/* Appends s[0..n) to b with every invalid UTF-8 sequence replaced by U+FFFD. */
bool utf8_append_valid(tbuf *b, const char *s, size_t n);
/* Bytes at the end of s[0..n) that start a UTF-8 sequence still missing its
 * continuation bytes (0..3). */
size_t utf8_incomplete_tail(const char *s, size_t n);

#endif
