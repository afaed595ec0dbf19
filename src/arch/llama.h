/* llama's tensor table: the dense block's (arch/dense.h) and its own rows,
 * shared by its loader (llama.c) and its converter (llama_convert.c). */
#ifndef RP_ARCH_LLAMA_H
#define RP_ARCH_LLAMA_H

#include "arch/dense.h"

enum {
    RP_LLAMA_ROPE_FREQS, /* [n_rot / 2] per-frequency divisors (Llama 3.1 scaling); optional */
    RP_LLAMA_N_ROWS,
};
extern const rp_tensor_def rp_llama_rows[RP_LLAMA_N_ROWS];
extern const rp_tensor_table rp_llama_tensors;

#endif
