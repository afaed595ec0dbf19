/* Compute kernels, one table per instruction-set level. Every function has a
 * scalar twin in kernels_ref.c, which is the reference the SIMD versions are
 * tested against: quantized products must return exactly the same floats,
 * float products agree to rounding. Kernels know nothing of models or plans. */
#ifndef RP_KERNELS_H
#define RP_KERNELS_H

#include "base/cpu.h"
#include "reprise.h"

#include <stddef.h>
#include <stdint.h>

/* s = dot(w row of n weights in the weight's type, x row in its vec_dot_type). */
typedef void (*rp_vec_dot_fn)(int n, float *s, const void *w, const void *x);
/* Encode n activations (n % block == 0) in a vec_dot_type. */
typedef void (*rp_act_quant_fn)(const float *x, void *y, int64_t n);

/* One token against nr weight rows (row r at w + r * ldw): y[r] = vec_dot. The
 * activation row x is in the weight's vec_dot_type. */
typedef void (*rp_gemv_fn)(int n, int nr, const void *w, size_t ldw, const void *x, float *y);

/* Many tokens against many rows, for prompt processing. Activations are
 * re-encoded once per product into groups of RP_GEMM_GROUP tokens (the
 * kernel's own layout); the kernel then computes every row of a tile against
 * every token of some groups, each output bit-identical to vec_dot.
 *   group_bytes(n):  bytes of one packed group for rows of n inputs
 *   pack:            packs cnt <= RP_GEMM_GROUP tokens (rows of xq, ldx bytes
 *                    apart, in the vec_dot_type) into one group; missing
 *                    tokens are zero. NULL: run reads the rows as they are
 *                    (xp = first row, ldx bytes apart)
 *   scratch_bytes:   per-thread scratch run needs for rows of n inputs
 *   run:             y[t * ldy + r] for r < nr and t < cnt, the tokens of the
 *                    consecutive groups starting at xp */
#define RP_GEMM_GROUP 16
typedef struct rp_gemm_ops {
    size_t (*group_bytes)(int n);
    void (*pack)(int n, int cnt, const void *xq, size_t ldx, void *group);
    size_t (*scratch_bytes)(int n);
    void (*run)(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx, int cnt,
                float *y, size_t ldy, void *scratch);
} rp_gemm_ops;

/* Weights re-laid out once at load in panels of RP_PANEL rows, so one 512-bit
 * instruction serves 16 rows (the activation broadcast). Rows past the end of
 * the last panel are zero. Every product of a packed tensor runs on the
 * packed copy (the file's bytes are not read again): each output is exactly
 * the float of vec_dot, whatever the token count.
 *   bytes:  size of the packed copy of rows x n weights
 *   pack:   w (rows rows, ldw bytes apart) -> dst
 *   unpack: blocks [b0, b1) of row r back in the file's format (the bytes
 *           pack read), at row (embedding lookups of a tied output)
 *   xbytes, xprep: per-token extras the kernel derives from an activation row
 *           (in the vec_dot_type) once per product
 *   gemm:   y[t * ldy + r] for tokens t < nt (activation row xq + t * ldx,
 *           extras xe + t * lde) and the rows r < rows of panels [p0, p1);
 *           the weights of a panel are read once for all nt tokens */
#define RP_PANEL 16
typedef struct rp_pack_ops {
    size_t (*bytes)(int64_t n, int64_t rows);
    void (*pack)(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst);
    void (*unpack)(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1, void *row);
    size_t (*xbytes)(int n);
    void (*xprep)(int n, const void *xq, void *xe);
    void (*gemm)(int n, int64_t rows, const void *packed, int64_t p0, int64_t p1, int nt,
                 const void *xq, size_t ldx, const void *xe, size_t lde, float *y, size_t ldy);
} rp_pack_ops;
/* the shape of rp_pack_ops.gemm */
typedef void (*rp_pack_gemm_fn)(int n, int64_t rows, const void *packed, int64_t p0, int64_t p1,
                                int nt, const void *xq, size_t ldx, const void *xe, size_t lde,
                                float *y, size_t ldy);

/* Attention over one split of keys: queries i < nq (rows q[i], dk floats)
 * against the keys at positions [k0, k1) of one KV head (position p in cell
 * p % cap; K rows of dk, V rows of dv elements, F32, F16 or a KV block type
 * of rp_kv_type_ok, quantized rows a multiple of 32 elements), query i seeing
 * the positions [beg[i], end[i]) (within the split; may be empty). Scores are
 * scale * q.k, then softcap * tanh(score / softcap) when softcap > 0. Per
 * query: m[i] the largest visible score (-INFINITY if none), l[i] the sum of
 * exp(score - m[i]) and o[i * ldo ..] the sum of exp(score - m[i]) * v, over
 * its visible keys. Keys are taken in tiles of 16 aligned to positions that
 * are multiples of 16 (k0 is one): a query's results do not depend on the
 * other queries of the call. dk, dv <= RP_ATTN_MAXD. */
#define RP_ATTN_MAXQ  8
#define RP_ATTN_MAXD  256
#define RP_ATTN_SPLIT 256 /* k1 - k0 <= RP_ATTN_SPLIT */
typedef struct rp_attn_split {
    int nq;
    const float *q[RP_ATTN_MAXQ];
    int beg[RP_ATTN_MAXQ], end[RP_ATTN_MAXQ];
    int k0, k1;
    const void *k, *v; /* the head's first cell */
    int type_k, type_v;
    int cap, dk, dv;
    float scale, softcap;
} rp_attn_split;
typedef void (*rp_attn_split_fn)(const rp_attn_split *a, float *m, float *l, float *o, size_t ldo);

/* Gated delta-net (src/kernels/ops_delta.c drives them). delta_token: one
 * token of one head, S [d][d] (rows over v, k contiguous), in two sweeps:
 * delta_j = (v_j - decay (S_j . k)) beta;  S_j = decay S_j + delta_j k;
 * o_j = scale (S_j . q); delta is d floats of scratch. conv_token: channels
 * [c0, c1) of one token of the causal conv1d + SiLU (the contract of
 * rp_conv1d_silu, x one row, h one sequence's state). */
typedef void (*rp_delta_token_fn)(float *S, int d, float decay, float beta, const float *q,
                                  const float *k, const float *v, float scale, float *o,
                                  float *delta);
typedef void (*rp_conv_token_fn)(float *x, float *h, const float *w, int k, int channels, long c0,
                                 long c1);

typedef struct rp_kernels {
    rp_isa isa;
    rp_vec_dot_fn vec_dot[RP_TYPE_COUNT]; /* by weight type */
    /* optional, by weight type: the float order of llama.cpp's x86 prompt
     * path where it differs from its vec_dot's (which one-token decodes and
     * small batches take). A product runs it on the tokens
     * rp_matmul_batch_tokens names, on packed weights (pack_gemm_batch);
     * other paths keep vec_dot's order, so a batch is then not
     * its tokens one at a time, as in llama.cpp:
     *   Q4_K: the repacked 4-row gemm (ggml_gemm_q4_K_8x8_q8_K) on the tokens
     *     of whole groups of 4: per 64 elements (groups 2c, 2c+1) acc =
     *     fma(sum, dw*dx, acc), accm = fma(min sum, dmin*dx, accm);
     *   Q6_K: the tiled K-quant matmul (ggml-cpu/tiled, VNNI) of 8 or more
     *     tokens: per super-block the exact sum S (values minus 32),
     *     acc = fma((float)S * dw, dx, acc). */
    rp_vec_dot_fn vec_dot_batch[RP_TYPE_COUNT];
    /* optional, by weight type: rp_pack_ops.gemm in vec_dot_batch's order */
    rp_pack_gemm_fn pack_gemm_batch[RP_TYPE_COUNT];
    rp_act_quant_fn act_quant[RP_TYPE_COUNT]; /* by vec_dot_type; NULL for F32 */
    rp_gemv_fn gemv[RP_TYPE_COUNT];           /* optional, by weight type */
    const rp_gemm_ops *gemm[RP_TYPE_COUNT];   /* optional, by weight type */
    const rp_pack_ops *pack[RP_TYPE_COUNT];   /* optional, by weight type */
    float (*dot_f32)(int n, const float *a, const float *b);
    /* y += a * x */
    void (*axpy_f32)(int n, float a, const float *x, float *y);
    /* f16 rows (KV cache) */
    float (*dot_f16_f32)(int n, const uint16_t *a, const float *b);
    void (*axpy_f16)(int n, float a, const uint16_t *x, float *y);
    void (*f32_to_f16)(const float *x, uint16_t *y, int n);
    /* gate[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x) with e^-x from
     * the polynomial exp of llama.cpp's AVX-512 build (ggml_v_expf: 2^n times a
     * degree-5 polynomial of the reduced argument, Arm's optimized-routines
     * constants) for every element. ggml takes a row's n % 16 tail with the C
     * library's expf; the rows of n_ff % 16 != 0 models (stories260K) differ
     * from llama.cpp there, so a flat call over many rows is row-free (batch =
     * tokens one at a time). The ref is the same arithmetic per element
     * (AVX2 tables use it too: ggml's AVX2 build rounds its exp differently,
     * k + k * p instead of scalef(1 + p)). */
    void (*silu_mul)(float *gate, const float *up, int n);
    /* llama.cpp's exact (non-flash) attention on an F32 cache, as its AVX-512
     * build orders it (rp_attention's F32 path):
     *   dot_f32_ggml: ggml_vec_dot_f32: 4 accumulators of 16 lanes over steps
     *     of 64, reduced (a0 + a2) + (a1 + a3) then across lanes as GCC's
     *     _mm512_reduce_add_ps (halves 8, 4, then pairs); then the n % 64
     *     tail one by one, each product rounded before it is added (not
     *     fused);
     *   exp_sum_ggml: softmax numerators of n (a multiple of 16) scores in
     *     place, x = e^(x - max) (rp_expf_ggml512), and their sum in double,
     *     one lane-reduced float per block of 16 (ggml_vec_soft_max_f32);
     *   fma_f32: y[i] = fma(x[i], a, y[i]) (one lane of tinyBLAS / vec_dot
     *     accumulating weighted V). */
    float (*dot_f32_ggml)(int n, const float *x, const float *y);
    double (*exp_sum_ggml)(int n, float *x, float max);
    void (*fma_f32)(int n, float a, const float *x, float *y);
    /* quantized KV cache rows (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) to n
     * floats, n % 32 == 0: exactly the floats of the type's dequantizer */
    void (*kv_to_f32[RP_TYPE_COUNT])(const void *row, float *y, int n);
    /* optional: attention over a split of keys (see rp_attn_split) */
    rp_attn_split_fn attn_split;
    /* gate[i] = GELU(gate[i]) * up[i] as ggml's CPU backend computes it
     * (GGML_GELU_FP16): 0 at or below -10, x from 10 up, between them
     * tab[x rounded to fp16] (rp_gelu_f16_table) */
    void (*geglu_f16)(float *gate, const float *up, int n, const float *tab);
    /* gated delta-net: the delta rule and the conv, per token */
    rp_delta_token_fn delta_token;
    rp_conv_token_fn conv_token;
} rp_kernels;

/* The table for the running CPU (rp_cpu_isa()), built once. */
const rp_kernels *rp_kern(void);
/* The table for a given level (must be supported by the CPU to be called). */
const rp_kernels *rp_kern_for(rp_isa isa);

void rp_kernels_fill_ref(rp_kernels *k);
/* The scalar twins a SIMD kernel hands what it does not cover (a tail of
 * channels, a head width it has no path for). */
void rp_delta_token_ref(float *S, int d, float decay, float beta, const float *q, const float *k,
                        const float *v, float scale, float *o, float *delta);
void rp_conv_token_ref(float *x, float *h, const float *w, int k, int channels, long c0, long c1);
/* one lane of the AVX-512 silu (see rp_kernels.silu_mul) */
float rp_expf_ggml512(float x);
/* the rows [r, r + nr) of a weight (ldw bytes apart) towards L2: a gemm asks
 * for the rows it reads next while the tiles of the rows before them run */
static inline void rp_prefetch_rows(const void *w, size_t ldw, int r, int nr) {
    const char *p = (const char *)w + (size_t)r * ldw;
    for (size_t o = 0; o < (size_t)nr * ldw; o += 64) __builtin_prefetch(p + o, 0, 2);
}
/* GCC's _mm512_reduce_add_ps order over 16 floats */
float rp_reduce16(const float *v);
void rp_silu_mul_ref(float *gate, const float *up, int n);
void rp_kernels_fill_avx2(rp_kernels *k);
void rp_kernels_fill_avx512(rp_kernels *k);
/* the AVX512_BF16 BF16 kernels (kernels_avx512_bf16.c), over the AVX-512 table
 * where rp_cpu_has_avx512bf16 */
void rp_kernels_fill_avx512_bf16(rp_kernels *k);
/* AVX512_BF16: whether vdpbf16ps issues fast enough for the BF16 gemm to use
 * it (measured); the two BF16 gemms, for the tests (both give the same
 * floats) */
bool rp_bf16_dp_fast(void);
void rp_kernels_bf16_gemms(const rp_gemm_ops **dp, const rp_gemm_ops **fma);
/* The encoding the CPU kernels take a weight type's activations in: the
 * type's vec_dot_type, but BF16 / F16 for BF16 / F16 weights (llama.cpp's CPU
 * rounds the activations of those matmuls so; the F32 of vec_dot_type is
 * what the other backends take). */
int rp_kern_act_type(int type);
/* the Q2_K / Q3_K / Q5_K row panels (packk_avx512.c) */
void rp_packk_fill_avx512(rp_kernels *k);
/* The attention and KV-cache entries (attn_*.c), filled after the above. */
void rp_attn_fill_ref(rp_kernels *k);
void rp_attn_fill_avx2(rp_kernels *k);
void rp_attn_fill_avx512(rp_kernels *k);
/* The table-read activations (act_*.c), and their table: GELU of each fp16
 * value, rounded to fp16 and widened back (65536 floats, built once). */
void rp_act_fill_ref(rp_kernels *k);
void rp_act_fill_avx2(rp_kernels *k);
void rp_act_fill_avx512(rp_kernels *k);
/* the AVX2 Q4_1 / Q5_1 multi-token gemm (gemm_q41_avx2.c) */
void rp_gemm_q41_fill_avx2(rp_kernels *k);
const float *rp_gelu_f16_table(void);

#endif
