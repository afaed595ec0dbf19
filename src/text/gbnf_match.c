/* The grammar matcher. A stack is a chain of nodes (position in the grammar,
 * parent node); nodes are interned, so two stacks that are the same are the
 * same node id and a set of stacks is a sorted array of ids. A state is an
 * interned set of stack tops, each at a terminal (a character set or a token
 * element), or node 0, the empty stack: the grammar is complete there.
 *
 * Expanding a position pushes nothing for a rule reference in tail position
 * (the continuation would only pop), so right recursion — what repetitions
 * become — keeps stacks short. Transitions are cached per (state, code point),
 * with a direct 128-entry table per state for ASCII. */
#include "text/gbnf.h"

#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE       UINT32_MAX
#define MAX_DEPTH  4000
#define MAX_STACKS (1u << 16) /* stack tops in one state */
#define MAX_BYTES  ((size_t)512 << 20)
#define UNSET      UINT32_MAX

typedef struct gm_node {
    uint32_t pos, parent;
} gm_node;

/* open addressing u64 -> u32; key UINT64_MAX marks an empty slot */
typedef struct map {
    uint64_t *key;
    uint32_t *val;
    size_t cap, n;
} map;

struct gm {
    const rp_gbnf *g;
    gm_node *nodes;
    size_t n_nodes, cap_nodes;
    map node_map; /* (pos, parent) -> node */
    /* states: items[off[s] .. off[s] + len[s]) */
    uint32_t *off, *len;
    uint32_t **ascii;     /* per state: next state for each ASCII code point, or NULL */
    uint64_t (*quiet)[2]; /* per state: ASCII code points that lead back to it */
    uint8_t *quiet_flags; /* per state: 1 computed, 2 every code point >= 0x80 leads back to it */
    size_t n_states, cap_states;
    uint32_t *items;
    size_t n_items, cap_items;
    uint32_t *state_slots; /* content hash -> state id + 1 */
    size_t state_cap;
    map trans; /* (state, code point) -> state; (state, partial key) -> may-take */
    uint32_t *scratch;
    size_t n_scratch, cap_scratch;
    size_t bytes;
    char err[256];
};

/* ---- hashing ------------------------------------------------------------------- */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static void set_err(gm *m, const char *msg) {
    if (!m->err[0]) snprintf(m->err, sizeof m->err, "%s", msg);
}

static bool account(gm *m, size_t n) {
    if (m->bytes + n > MAX_BYTES) {
        set_err(m, "grammar matcher grew past 512 MiB (the grammar is too ambiguous or the output "
                   "too long)");
        return false;
    }
    m->bytes += n;
    return true;
}

static void *grow(gm *m, void *p, size_t elem, size_t *cap, size_t want) {
    if (want <= *cap) return p;
    size_t nc = *cap ? *cap * 2 : 64;
    while (nc < want) nc *= 2;
    if (!account(m, (nc - *cap) * elem)) return NULL;
    void *q = realloc(p, nc * elem);
    if (!q) {
        set_err(m, "grammar matcher: out of memory");
        return NULL;
    }
    *cap = nc;
    return q;
}

static bool map_init(gm *m, map *h, size_t cap) {
    if (!account(m, cap * (sizeof *h->key + sizeof *h->val))) return false;
    h->key = malloc(cap * sizeof *h->key);
    h->val = malloc(cap * sizeof *h->val);
    if (!h->key || !h->val) {
        set_err(m, "grammar matcher: out of memory");
        return false;
    }
    memset(h->key, 0xFF, cap * sizeof *h->key);
    h->cap = cap;
    h->n = 0;
    return true;
}

static uint32_t *map_find(const map *h, uint64_t k) {
    size_t i = mix(k) & (h->cap - 1);
    for (;;) {
        if (h->key[i] == k) return &h->val[i];
        if (h->key[i] == UINT64_MAX) return NULL;
        i = (i + 1) & (h->cap - 1);
    }
}

static bool map_put(gm *m, map *h, uint64_t k, uint32_t v) {
    if ((h->n + 1) * 4 > h->cap * 3) {
        map nh;
        if (!map_init(m, &nh, h->cap * 2)) return false;
        for (size_t i = 0; i < h->cap; i++)
            if (h->key[i] != UINT64_MAX) {
                size_t j = mix(h->key[i]) & (nh.cap - 1);
                while (nh.key[j] != UINT64_MAX) j = (j + 1) & (nh.cap - 1);
                nh.key[j] = h->key[i];
                nh.val[j] = h->val[i];
                nh.n++;
            }
        m->bytes -= h->cap * (sizeof *h->key + sizeof *h->val);
        free(h->key);
        free(h->val);
        *h = nh;
    }
    size_t i = mix(k) & (h->cap - 1);
    while (h->key[i] != UINT64_MAX && h->key[i] != k) i = (i + 1) & (h->cap - 1);
    if (h->key[i] == UINT64_MAX) h->n++;
    h->key[i] = k;
    h->val[i] = v;
    return true;
}

/* ---- nodes and states ------------------------------------------------------------ */

static uint32_t intern_node(gm *m, uint32_t pos, uint32_t parent) {
    uint64_t k = (uint64_t)pos << 32 | parent;
    uint32_t *v = map_find(&m->node_map, k);
    if (v) return *v;
    gm_node *nn = grow(m, m->nodes, sizeof *m->nodes, &m->cap_nodes, m->n_nodes + 1);
    if (!nn) return NONE;
    m->nodes = nn;
    uint32_t id = (uint32_t)m->n_nodes++;
    m->nodes[id] = (gm_node){pos, parent};
    if (!map_put(m, &m->node_map, k, id)) return NONE;
    return id;
}

static uint64_t items_hash(const uint32_t *v, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) h = mix(h ^ v[i]) + i;
    return h;
}

static bool states_rehash(gm *m, size_t cap) {
    if (!account(m, cap * sizeof(uint32_t))) return false;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) {
        set_err(m, "grammar matcher: out of memory");
        return false;
    }
    for (size_t s = 0; s < m->n_states; s++) {
        /* (the dead state has no items: m->items may still be NULL) */
        size_t i = items_hash(m->len[s] ? m->items + m->off[s] : NULL, m->len[s]) & (cap - 1);
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = (uint32_t)s + 1;
    }
    if (m->state_slots) m->bytes -= m->state_cap * sizeof(uint32_t);
    free(m->state_slots);
    m->state_slots = slots;
    m->state_cap = cap;
    return true;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state of v[0..n) (sorted and deduplicated here); NONE on failure. */
static uint32_t intern_state(gm *m, uint32_t *v, size_t n) {
    if (n > 1) {
        qsort(v, n, sizeof *v, cmp_u32);
        size_t k = 1;
        for (size_t i = 1; i < n; i++)
            if (v[i] != v[k - 1]) v[k++] = v[i];
        n = k;
    }
    if (n == 0) return GM_DEAD;
    if (n > MAX_STACKS) {
        set_err(m, "grammar too ambiguous: more than 65536 parses alive at once");
        return NONE;
    }
    if ((m->n_states + 1) * 2 > m->state_cap &&
        !states_rehash(m, m->state_cap ? m->state_cap * 2 : 256))
        return NONE;
    size_t i = items_hash(v, n) & (m->state_cap - 1);
    for (; m->state_slots[i]; i = (i + 1) & (m->state_cap - 1)) {
        uint32_t s = m->state_slots[i] - 1;
        if (m->len[s] == n && !memcmp(m->items + m->off[s], v, n * sizeof *v)) return s;
    }
    size_t cs = m->cap_states;
    uint32_t *off = grow(m, m->off, sizeof *off, &cs, m->n_states + 1);
    if (!off) return NONE;
    m->off = off;
    cs = m->cap_states;
    uint32_t *len = grow(m, m->len, sizeof *len, &cs, m->n_states + 1);
    if (!len) return NONE;
    m->len = len;
    cs = m->cap_states;
    uint64_t(*quiet)[2] = grow(m, m->quiet, sizeof *quiet, &cs, m->n_states + 1);
    if (!quiet) return NONE;
    m->quiet = quiet;
    cs = m->cap_states;
    uint8_t *qf = grow(m, m->quiet_flags, 1, &cs, m->n_states + 1);
    if (!qf) return NONE;
    m->quiet_flags = qf;
    uint32_t **ascii = grow(m, m->ascii, sizeof *ascii, &m->cap_states, m->n_states + 1);
    if (!ascii) return NONE;
    m->ascii = ascii;
    uint32_t *items = grow(m, m->items, sizeof *items, &m->cap_items, m->n_items + n);
    if (!items) return NONE;
    m->items = items;
    uint32_t s = (uint32_t)m->n_states++;
    m->off[s] = (uint32_t)m->n_items;
    m->len[s] = (uint32_t)n;
    m->ascii[s] = NULL;
    m->quiet_flags[s] = 0;
    memcpy(m->items + m->n_items, v, n * sizeof *v);
    m->n_items += n;
    m->state_slots[i] = s + 1;
    return s;
}

static bool push_scratch(gm *m, uint32_t node) {
    uint32_t *s = grow(m, m->scratch, sizeof *s, &m->cap_scratch, m->n_scratch + 1);
    if (!s) return false;
    m->scratch = s;
    m->scratch[m->n_scratch++] = node;
    return true;
}

/* Adds to the scratch list every stack top reachable from (pos, parent)
 * without consuming input. */
static bool expand(gm *m, uint32_t pos, uint32_t parent, int depth) {
    const rp_gbnf *g = m->g;
    if (depth > MAX_DEPTH) {
        set_err(m, "grammar rules nest more than 4000 deep without consuming input");
        return false;
    }
    for (;;) {
        gb_elem e = g->e[pos];
        if (e.type == GB_END) {
            if (parent == NONE) return push_scratch(m, GM_ACCEPT);
            pos = m->nodes[parent].pos;
            parent = m->nodes[parent].parent;
            continue;
        }
        if (e.type == GB_RULE) {
            const gb_rule *r = &g->rules[e.v];
            uint32_t np = parent;
            if (g->e[pos + 1].type != GB_END) {
                np = intern_node(m, pos + 1, parent);
                if (np == NONE) return false;
            }
            if (!r->n_alt) return true;
            for (uint32_t a = 0; a + 1 < r->n_alt; a++)
                if (!expand(m, g->alts[r->alt0 + a], np, depth + 1)) return false;
            pos = g->alts[r->alt0 + r->n_alt - 1];
            parent = np;
            if (++depth > MAX_DEPTH) {
                set_err(m, "grammar rules nest more than 4000 deep without consuming input");
                return false;
            }
            continue;
        }
        uint32_t node = intern_node(m, pos, parent);
        return node != NONE && push_scratch(m, node);
    }
}

/* ---- public ----------------------------------------------------------------------- */

gm *gm_new(const rp_gbnf *g) {
    gm *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g;
    if (!map_init(m, &m->node_map, 1024) || !map_init(m, &m->trans, 4096)) {
        gm_free(m);
        return NULL;
    }
    /* node 0: the empty stack; state 0: dead */
    m->nodes = malloc(64 * sizeof *m->nodes);
    if (!m->nodes) {
        gm_free(m);
        return NULL;
    }
    m->cap_nodes = 64;
    m->nodes[0] = (gm_node){UINT32_MAX, NONE};
    m->n_nodes = 1;
    m->off = malloc(64 * sizeof *m->off);
    m->len = malloc(64 * sizeof *m->len);
    m->ascii = calloc(64, sizeof *m->ascii);
    m->quiet = calloc(64, sizeof *m->quiet);
    m->quiet_flags = calloc(64, 1);
    if (!m->off || !m->len || !m->ascii || !m->quiet || !m->quiet_flags) {
        gm_free(m);
        return NULL;
    }
    m->cap_states = 64;
    m->off[0] = 0;
    m->len[0] = 0;
    m->n_states = 1;
    if (!states_rehash(m, 256)) {
        gm_free(m);
        return NULL;
    }
    return m;
}

void gm_free(gm *m) {
    if (!m) return;
    free(m->nodes);
    free(m->node_map.key);
    free(m->node_map.val);
    free(m->trans.key);
    free(m->trans.val);
    for (size_t s = 0; s < m->n_states; s++) free(m->ascii ? m->ascii[s] : NULL);
    free(m->ascii);
    free(m->quiet);
    free(m->quiet_flags);
    free(m->off);
    free(m->len);
    free(m->items);
    free(m->state_slots);
    free(m->scratch);
    free(m);
}

const char *gm_error(const gm *m) {
    return m->err[0] ? m->err : NULL;
}

size_t gm_bytes(const gm *m) {
    return m->bytes;
}

static uint32_t finish_scratch(gm *m) {
    uint32_t s = intern_state(m, m->scratch, m->n_scratch);
    return s == NONE ? GM_DEAD : s;
}

uint32_t gm_initial(gm *m) {
    if (m->err[0]) return GM_DEAD;
    const gb_rule *r = &m->g->rules[m->g->root];
    m->n_scratch = 0;
    for (uint32_t a = 0; a < r->n_alt; a++)
        if (!expand(m, m->g->alts[r->alt0 + a], NONE, 0)) return GM_DEAD;
    return finish_scratch(m);
}

static uint32_t compute_step(gm *m, uint32_t state, uint32_t c) {
    m->n_scratch = 0;
    const uint32_t *it = m->items + m->off[state];
    for (uint32_t i = 0; i < m->len[state]; i++) {
        uint32_t node = it[i];
        if (node == GM_ACCEPT) continue;
        gm_node nd = m->nodes[node];
        gb_elem e = m->g->e[nd.pos];
        if (e.type == GB_CHARS && gbnf_set_has(m->g, e.v, c) &&
            !expand(m, nd.pos + 1, nd.parent, 0))
            return NONE;
        it = m->items + m->off[state]; /* expansion may have moved the items */
    }
    uint32_t s = intern_state(m, m->scratch, m->n_scratch);
    return s;
}

uint32_t gm_step(gm *m, uint32_t state, uint32_t c) {
    if (state == GM_DEAD || m->err[0]) return GM_DEAD;
    if (c < 128 && m->ascii[state] && m->ascii[state][c] != UNSET) return m->ascii[state][c];
    uint64_t k = (uint64_t)state << 32 | c;
    uint32_t *v = map_find(&m->trans, k);
    if (v) return *v;
    uint32_t s = compute_step(m, state, c);
    if (s == NONE) return GM_DEAD;
    if (c < 128) {
        if (!m->ascii[state]) {
            if (!account(m, 128 * sizeof(uint32_t))) return GM_DEAD;
            m->ascii[state] = malloc(128 * sizeof(uint32_t));
            if (!m->ascii[state]) {
                set_err(m, "grammar matcher: out of memory");
                return GM_DEAD;
            }
            memset(m->ascii[state], 0xFF, 128 * sizeof(uint32_t));
        }
        m->ascii[state][c] = s;
    } else if (!map_put(m, &m->trans, k, s)) {
        return GM_DEAD;
    }
    return s;
}

bool gm_may_take(gm *m, uint32_t state, uint32_t v, int r, uint32_t min) {
    if (state == GM_DEAD || r < 1 || r > 3) return false;
    uint32_t lo = v << (6 * r), hi = lo | ((1u << (6 * r)) - 1);
    if (lo < min) lo = min;
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF))
        return false; /* overlong, too large, surrogate */
    /* cached under keys no code point uses (bit 31 set) */
    uint64_t k = (uint64_t)state << 32 | 0x80000000u | (uint32_t)r << 28 | (min >> 16) << 24 |
                 (min & 0x800 ? 1u << 23 : 0) | v;
    uint32_t *c = map_find(&m->trans, k);
    if (c) return *c;
    bool ok = false;
    const uint32_t *it = m->items + m->off[state];
    for (uint32_t i = 0; i < m->len[state] && !ok; i++) {
        if (it[i] == GM_ACCEPT) continue;
        gb_elem e = m->g->e[m->nodes[it[i]].pos];
        ok = e.type == GB_CHARS && gbnf_set_meets(m->g, e.v, lo, hi);
    }
    map_put(m, &m->trans, k, ok);
    return ok;
}

uint32_t gm_step_token(gm *m, uint32_t state, int32_t token) {
    if (state == GM_DEAD || m->err[0]) return GM_DEAD;
    m->n_scratch = 0;
    for (uint32_t i = 0; i < m->len[state]; i++) {
        uint32_t node = m->items[m->off[state] + i];
        if (node == GM_ACCEPT) continue;
        gm_node nd = m->nodes[node];
        gb_elem e = m->g->e[nd.pos];
        bool match = (e.type == GB_TOKEN && e.v == (uint32_t)token) ||
                     (e.type == GB_TOKEN_NOT && e.v != (uint32_t)token);
        if (match && !expand(m, nd.pos + 1, nd.parent, 0)) return GM_DEAD;
    }
    return finish_scratch(m);
}

uint32_t gm_union(gm *m, uint32_t a, uint32_t b) {
    if (a == GM_DEAD) return b;
    if (b == GM_DEAD || a == b) return a;
    m->n_scratch = 0;
    for (uint32_t i = 0; i < m->len[a]; i++)
        if (!push_scratch(m, m->items[m->off[a] + i])) return GM_DEAD;
    for (uint32_t i = 0; i < m->len[b]; i++)
        if (!push_scratch(m, m->items[m->off[b] + i])) return GM_DEAD;
    return finish_scratch(m);
}

bool gm_can_end(const gm *m, uint32_t state) {
    return state != GM_DEAD && m->len[state] &&
           m->items[m->off[state]] == GM_ACCEPT; /* sorted: 0 first */
}

bool gm_has_token_tops(const gm *m, uint32_t state) {
    for (uint32_t i = 0; state != GM_DEAD && i < m->len[state]; i++) {
        uint32_t node = m->items[m->off[state] + i];
        if (node == GM_ACCEPT) continue;
        uint8_t t = m->g->e[m->nodes[node].pos].type;
        if (t == GB_TOKEN || t == GB_TOKEN_NOT) return true;
    }
    return false;
}

void gm_token_tops(const gm *m, uint32_t state, void (*fn)(void *user, int32_t token, bool negated),
                   void *user) {
    for (uint32_t i = 0; state != GM_DEAD && i < m->len[state]; i++) {
        uint32_t node = m->items[m->off[state] + i];
        if (node == GM_ACCEPT) continue;
        gb_elem e = m->g->e[m->nodes[node].pos];
        if (e.type == GB_TOKEN || e.type == GB_TOKEN_NOT)
            fn(user, (int32_t)e.v, e.type == GB_TOKEN_NOT);
    }
}

bool gm_quiet(gm *m, uint32_t state, uint64_t out[2], bool *high) {
    *high = false;
    if (state == GM_DEAD || m->err[0]) return false;
    if (!m->quiet_flags[state]) {
        uint64_t q[2] = {0, 0};
        for (uint32_t c = 0; c < 128; c++)
            if (gm_step(m, state, c) == state) q[c >> 6] |= 1ull << (c & 63);
        if (m->err[0]) return false;
        /* every top's set holds all of [0x80, 0x10FFFF] or none of it: then all
         * code points >= 0x80 go where 0x80 goes */
        bool uniform = true;
        for (uint32_t i = 0; i < m->len[state] && uniform; i++) {
            uint32_t node = m->items[m->off[state] + i];
            if (node == GM_ACCEPT) continue;
            gb_elem e = m->g->e[m->nodes[node].pos];
            if (e.type != GB_CHARS) continue;
            bool any = gbnf_set_meets(m->g, e.v, 0x80, 0x10FFFF),
                 all = gbnf_set_has(m->g, e.v, 0x80);
            if (all) {
                const gb_cset *cs = &m->g->sets[e.v];
                const uint32_t *r = m->g->ranges + 2 * cs->r0;
                all = false;
                for (uint32_t k = 0; k < cs->nr; k++)
                    if (r[2 * k] <= 0x80 && r[2 * k + 1] >= 0x10FFFF) all = true;
            }
            uniform = all || !any;
        }
        bool hq = uniform && gm_step(m, state, 0x80) == state;
        m->quiet[state][0] = q[0];
        m->quiet[state][1] = q[1];
        m->quiet_flags[state] = (uint8_t)(1 | (hq ? 2 : 0));
    }
    *high = m->quiet_flags[state] & 2;
    out[0] = m->quiet[state][0];
    out[1] = m->quiet[state][1];
    return true;
}
