#include "kernels/types.h"
#include "kernels/quant.h"

#include <ctype.h>
#include <string.h>

/* Geometry of every type id found in GGUF files today. Retired ids (4, 5,
 * 31-33, 36-38) have no row and are refused by readers. */
static const rp_type_traits g_types[RP_TYPE_COUNT] = {
    [RP_TYPE_F32] = {"f32", 1, 4, false, rp_f32_to_float, rp_float_to_f32, RP_TYPE_F32, true},
    [RP_TYPE_F16] = {"f16", 1, 2, false, rp_f16_to_float, rp_float_to_f16, RP_TYPE_F32, true},
    [RP_TYPE_BF16] = {"bf16", 1, 2, false, rp_bf16_to_float, rp_float_to_bf16, RP_TYPE_F32, true},
    [RP_TYPE_Q4_0] = {"q4_0", 32, 18, true, rp_dequant_q4_0, rp_quant_q4_0, RP_TYPE_Q8_0, true},
    [RP_TYPE_Q4_1] = {"q4_1", 32, 20, true, rp_dequant_q4_1, rp_quant_q4_1, RP_TYPE_Q8_1, true},
    [RP_TYPE_Q5_0] = {"q5_0", 32, 22, true, rp_dequant_q5_0, rp_quant_q5_0, RP_TYPE_Q8_0, true},
    [RP_TYPE_Q5_1] = {"q5_1", 32, 24, true, rp_dequant_q5_1, rp_quant_q5_1, RP_TYPE_Q8_1, true},
    [RP_TYPE_Q8_0] = {"q8_0", 32, 34, true, rp_dequant_q8_0, rp_quant_q8_0, RP_TYPE_Q8_0, true},
    [RP_TYPE_Q8_1] = {"q8_1", 32, 36, true, rp_dequant_q8_1, rp_quant_q8_1, RP_TYPE_Q8_1, false},
    [RP_TYPE_Q2_K] = {"q2_K", 256, 84, true, rp_dequant_q2_K, rp_quant_q2_K, RP_TYPE_Q8_K, true},
    [RP_TYPE_Q3_K] = {"q3_K", 256, 110, true, rp_dequant_q3_K, rp_quant_q3_K, RP_TYPE_Q8_K, true},
    [RP_TYPE_Q4_K] = {"q4_K", 256, 144, true, rp_dequant_q4_K, rp_quant_q4_K, RP_TYPE_Q8_K, true},
    [RP_TYPE_Q5_K] = {"q5_K", 256, 176, true, rp_dequant_q5_K, rp_quant_q5_K, RP_TYPE_Q8_K, true},
    [RP_TYPE_Q6_K] = {"q6_K", 256, 210, true, rp_dequant_q6_K, rp_quant_q6_K, RP_TYPE_Q8_K, true},
    [RP_TYPE_Q8_K] = {"q8_K", 256, 292, true, rp_dequant_q8_K, rp_quant_q8_K, RP_TYPE_Q8_K, false},
    [RP_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, true, NULL, NULL, RP_TYPE_Q8_K, false},
    [RP_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, true, NULL, NULL, RP_TYPE_Q8_K, false},
    [RP_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, true, NULL, NULL, RP_TYPE_Q8_K, false},
    [RP_TYPE_IQ1_S] = {"iq1_s", 256, 50, true, NULL, NULL, RP_TYPE_Q8_K, false},
    [RP_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, true, rp_dequant_iq4_nl, rp_quant_iq4_nl, RP_TYPE_Q8_0,
                        true},
    [RP_TYPE_IQ3_S] = {"iq3_s", 256, 110, true, NULL, NULL, RP_TYPE_Q8_K, false},
    [RP_TYPE_IQ2_S] = {"iq2_s", 256, 82, true, NULL, NULL, RP_TYPE_Q8_K, false},
    [RP_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, true, rp_dequant_iq4_xs, rp_quant_iq4_xs, RP_TYPE_Q8_K,
                        true},
    [RP_TYPE_I8] = {"i8", 1, 1, false, NULL, NULL, RP_TYPE_I8, false},
    [RP_TYPE_I16] = {"i16", 1, 2, false, NULL, NULL, RP_TYPE_I16, false},
    [RP_TYPE_I32] = {"i32", 1, 4, false, NULL, NULL, RP_TYPE_I32, false},
    [RP_TYPE_I64] = {"i64", 1, 8, false, NULL, NULL, RP_TYPE_I64, false},
    [RP_TYPE_F64] = {"f64", 1, 8, false, NULL, NULL, RP_TYPE_F64, false},
    [RP_TYPE_IQ1_M] = {"iq1_m", 256, 56, true, NULL, NULL, RP_TYPE_Q8_K, false},
    [RP_TYPE_TQ1_0] = {"tq1_0", 256, 54, true, NULL, NULL, RP_TYPE_Q8_K, false},
    [RP_TYPE_TQ2_0] = {"tq2_0", 256, 66, true, NULL, NULL, RP_TYPE_Q8_K, false},
    [RP_TYPE_MXFP4] = {"mxfp4", 32, 17, true, NULL, NULL, RP_TYPE_Q8_0, false},
};

const rp_type_traits *rp_type_get(int type) {
    if (type < 0 || type >= RP_TYPE_COUNT || !g_types[type].name) return NULL;
    return &g_types[type];
}

const char *rp_type_name(int type) {
    const rp_type_traits *t = rp_type_get(type);
    return t ? t->name : NULL;
}

int rp_type_from_name(const char *name) {
    for (int i = 0; i < RP_TYPE_COUNT; i++) {
        if (!g_types[i].name) continue;
        const char *a = g_types[i].name, *b = name;
        while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return i;
    }
    return -1;
}

size_t rp_row_size(int type, int64_t ne0) {
    const rp_type_traits *t = rp_type_get(type);
    if (!t || ne0 < 0 || ne0 % t->blck_size) return 0;
    return (size_t)(ne0 / t->blck_size) * t->type_size;
}

bool rp_type_can_compute(int type) {
    const rp_type_traits *t = rp_type_get(type);
    return t && t->compute;
}

/* llama.cpp's llama_ftype for a file whose weights are mostly one type (the
 * value of general.file_type). -1 where llama.cpp has no such file type. */
int rp_type_ftype(int type) {
    static const struct {
        int type, ftype;
    } map[] = {
        {RP_TYPE_F32, 0},     {RP_TYPE_F16, 1},     {RP_TYPE_Q4_0, 2},  {RP_TYPE_Q4_1, 3},
        {RP_TYPE_Q8_0, 7},    {RP_TYPE_Q5_0, 8},    {RP_TYPE_Q5_1, 9},  {RP_TYPE_Q2_K, 10},
        {RP_TYPE_Q3_K, 12},   {RP_TYPE_Q4_K, 15},   {RP_TYPE_Q5_K, 17}, {RP_TYPE_Q6_K, 18},
        {RP_TYPE_IQ4_NL, 25}, {RP_TYPE_IQ4_XS, 30}, {RP_TYPE_BF16, 32},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].type == type) return map[i].ftype;
    return -1;
}
