/* Zamba2's tensor table (the rows are defined in zamba2.c, where the layout
 * and the maths are documented): shared by its loader, synth, merge metadata
 * and its converter (zamba2_convert.c). */
#ifndef RP_ARCH_ZAMBA2_H
#define RP_ARCH_ZAMBA2_H

#include "arch/tensors.h"

/* Rows, in binding order. */
enum {
    /* every layer: the Mamba2 mixer */
    RP_Z2_NORM,
    RP_Z2_SSM_IN,
    RP_Z2_SSM_IN_B,
    RP_Z2_CONV,
    RP_Z2_CONV_B,
    RP_Z2_DT_B,
    RP_Z2_A,
    RP_Z2_D,
    RP_Z2_SSM_NORM,
    RP_Z2_SSM_OUT,
    RP_Z2_SSM_OUT_B,
    /* a shared block, stored at its first hybrid layer (aliased at the others) */
    RP_Z2_SHARED_NORM,
    RP_Z2_ATTN_Q,
    RP_Z2_ATTN_K,
    RP_Z2_ATTN_V,
    RP_Z2_ATTN_OUT,
    RP_Z2_FFN_NORM,
    RP_Z2_FFN_DOWN,
    RP_Z2_FFN_UP_B,
    RP_Z2_FFN_DOWN_B,
    /* the gate|up matrix: the block's (adapter form) or each visit's own (merged form) */
    RP_Z2_FFN_UP,
    /* every hybrid layer: its projection and its adapter pairs */
    RP_Z2_PROJ,
    RP_Z2_GU_A,
    RP_Z2_GU_B,
    RP_Z2_ATTN_Q_A,
    RP_Z2_ATTN_Q_B,
    RP_Z2_ATTN_K_A,
    RP_Z2_ATTN_K_B,
    RP_Z2_ATTN_V_A,
    RP_Z2_ATTN_V_B,
    RP_Z2_N_ROWS,
};
#define RP_Z2_SHARED_FIRST RP_Z2_SHARED_NORM
#define RP_Z2_SHARED_LAST  RP_Z2_FFN_DOWN_B

/* Layer features. OWN_GU: the layer stores an ffn_up (a block's first visit
 * in the adapter form, every hybrid layer in the merged form). */
enum {
    RP_Z2_F_MAMBA = 1,
    RP_Z2_F_HYBRID = 2,
    RP_Z2_F_STORES = 4,
    RP_Z2_F_OWN_GU = 8,
    RP_Z2_F_ADAPTERS = 16,
    RP_Z2_F_ATTN_ADAPTERS = 32,
};

/* Zamba2's own dimensions */
#define RP_DIM_Z2_IN_PROJ  (RP_DIM_ARCH + 0) /* d_inner (z) + conv_dim + heads (dt) */
#define RP_DIM_Z2_CONV_DIM (RP_DIM_ARCH + 1) /* d_inner + 2 groups state: x | B | C */
#define RP_DIM_Z2_CONV     (RP_DIM_ARCH + 2) /* d_conv */
#define RP_DIM_Z2_HEADS    (RP_DIM_ARCH + 3) /* Mamba2 heads */
#define RP_DIM_Z2_INNER    (RP_DIM_ARCH + 4) /* d_inner */
#define RP_DIM_Z2_RANK     (RP_DIM_ARCH + 5) /* MLP adapter rank */
#define RP_DIM_Z2_ARANK    (RP_DIM_ARCH + 6) /* attention adapter rank */

extern const rp_tensor_def rp_zamba2_rows[RP_Z2_N_ROWS];
extern const rp_tensor_table rp_zamba2_tensors;

#endif
