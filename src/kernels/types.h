/* The tensor type table: one row per ggml/GGUF type id with its block geometry
 * and, where reprise can compute it, its conversion functions. Dispatch on a
 * type is a table lookup, never a switch scattered through the code. */
#ifndef RP_TYPES_H
#define RP_TYPES_H

#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*rp_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*rp_from_float_fn)(const float *src, void *dst, int64_t n);

typedef struct rp_type_traits {
    const char *name; /* llama.cpp's spelling: "f32", "q4_K", ... */
    int blck_size;    /* elements per block */
    size_t type_size; /* bytes per block */
    bool is_quantized;
    rp_to_float_fn to_float;     /* dequantize n elements (n % blck_size == 0); NULL if absent */
    rp_from_float_fn from_float; /* reference quantizer; NULL if reprise cannot write it */
    int vec_dot_type;            /* how activations are encoded for this weight's dot kernels */
    bool compute;                /* reprise has matmul kernels for weights of this type */
} rp_type_traits;

/* NULL for an id that is not a known type (including retired ids 4, 5, 31-33, 36-38). */
const rp_type_traits *rp_type_get(int type);

/* Bytes of one row of ne0 elements; 0 if ne0 is not a multiple of the block size
 * or the type is unknown. */
size_t rp_row_size(int type, int64_t ne0);

/* Whether reprise has kernels to run a 2-D weight of this type (F32, F16,
 * BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS). */
bool rp_type_can_compute(int type);

/* general.file_type (llama.cpp's llama_ftype) of a file whose weights are all
 * of this type; -1 if there is none. */
int rp_type_ftype(int type);

#endif
