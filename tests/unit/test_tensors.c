/* Tensor tables (src/arch/tensors.h): every tensor a synthetic model of each
 * architecture carries is a row of its table; the quantization category the
 * table gives agrees, for every tensor the quantizer converts (2-D .weight),
 * with the name rules tools/quantize.c used before the tables existed (kept
 * here as the reference, so a table edit that would change a mixture shows);
 * names outside a table, and unknown architectures, answer UNKNOWN. */
#include "arch/arch.h"
#include "arch/tensors.h"
#include "convert/synth.h"
#include "format/gguf.h"
#include "test.h"

#include <string.h>

/* tools/quantize.c's category() as it was: llama.cpp's substring rules */
static rp_tensor_cat name_rule(const char *name) {
    if (!strcmp(name, "output.weight")) return RP_TCAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight")) return RP_TCAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") ||
        strstr(name, "attn_v.weight"))
        return RP_TCAT_ATTN_V;
    if (strstr(name, "attn_k.weight")) return RP_TCAT_ATTN_K;
    if (strstr(name, "attn_q.weight")) return RP_TCAT_ATTN_Q;
    if (strstr(name, "attn_output.weight")) return RP_TCAT_ATTN_OUTPUT;
    if (strstr(name, "ffn_up")) return RP_TCAT_FFN_UP;
    if (strstr(name, "ffn_gate")) return RP_TCAT_FFN_GATE;
    if (strstr(name, "ffn_down")) return RP_TCAT_FFN_DOWN;
    return RP_TCAT_OTHER;
}

/* A small model of architecture `arch` with every optional part the synth
 * makes (biases, NextN, attention adapters, an untied output). */
static const char *synth_small(const char *arch, int variant) {
    rp_synth_params p = rp_synth_default_params();
    p.arch = arch;
    p.n_embd = 64;
    p.n_layer = 6;
    p.n_head = 4;
    p.n_ff = 96;
    p.n_vocab = 256;
    p.tied = variant == 1;
    if (!strcmp(arch, "zamba2")) {
        p.attn_adapter_rank = variant ? 0 : 4;
        p.adapters_merged = variant == 1;
    }
    char name[96];
    snprintf(name, sizeof name, "tensors-%s-%d.gguf", arch, variant);
    const char *path = test_tmp(name);
    return rp_synth_write(&p, path, NULL, NULL) == RP_OK ? path : NULL;
}

void test_tensor_tables_cover_synth(void) {
    for (int a = 0; rp_arch_at(a); a++) {
        const rp_arch *arch = rp_arch_at(a);
        REQUIRE(arch->tensors, "%s has a tensor table", arch->name);
        for (int variant = 0; variant < 2; variant++) {
            const char *path = synth_small(arch->name, variant);
            REQUIRE(path, "synth %s: %s", arch->name, rp_last_error());
            rp_gguf *g;
            REQUIRE(rp_gguf_open(path, &g) == RP_OK, "%s", rp_last_error());
            int n_quant = 0;
            for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
                const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
                const rp_tensor_def *r = rp_tensor_find(arch->tensors, t->name);
                CHECK(r, "%s: tensor '%s' is in no row of its table", arch->name, t->name);
                if (!r) continue;
                const rp_tensor_cat c = rp_arch_tensor_category(arch->name, t->name);
                const size_t len = strlen(t->name);
                if (t->n_dims < 2 || len < 7 || strcmp(t->name + len - 7, ".weight")) continue;
                n_quant++;
                CHECK(c == name_rule(t->name), "%s: '%s' is %s in the table, %s by name",
                      arch->name, t->name, rp_tensor_cat_name(c),
                      rp_tensor_cat_name(name_rule(t->name)));
                CHECK(r->ne1 != RP_DIM_NONE, "%s: '%s' is 2-D but its row is 1-D", arch->name,
                      t->name);
            }
            CHECK(n_quant > 0, "%s: no matrices", arch->name);
            rp_gguf_close(g);
        }
    }
}

/* The same over the shared models (llama.cpp's and numpy's files, not reprise's). */
void test_tensor_tables_cover_shared_models(void) {
    static const char *const files[] = {"models/stories260K.gguf", "models/synth/qwen3-tiny.gguf",
                                        "models/synth/gemma3-tiny.gguf",
                                        "models/synth/qwen35-tiny.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        rp_gguf *g;
        REQUIRE(rp_gguf_open(test_shared(files[f]), &g) == RP_OK, "%s", rp_last_error());
        const char *arch = NULL;
        bool found = false;
        REQUIRE(rp_gguf_get_str(g, "general.architecture", &arch, &found) == RP_OK && found,
                "%s: no architecture", files[f]);
        const rp_arch *a = rp_arch_find(arch);
        REQUIRE(a, "%s: architecture %s", files[f], arch);
        for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
            CHECK(rp_tensor_find(a->tensors, t->name), "%s: '%s' is in no row", files[f], t->name);
            const size_t len = strlen(t->name);
            if (t->n_dims < 2 || len < 7 || strcmp(t->name + len - 7, ".weight")) continue;
            const rp_tensor_cat c = rp_arch_tensor_category(arch, t->name);
            CHECK(c == name_rule(t->name), "%s: '%s' is %s in the table, %s by name", files[f],
                  t->name, rp_tensor_cat_name(c), rp_tensor_cat_name(name_rule(t->name)));
        }
        rp_gguf_close(g);
    }
}

void test_tensor_category_lookup(void) {
    CHECK(rp_arch_tensor_category("llama", "blk.3.attn_v.weight") == RP_TCAT_ATTN_V, "llama v");
    CHECK(rp_arch_tensor_category("llama", "token_embd.weight") == RP_TCAT_TOKEN_EMBD, "embd");
    CHECK(rp_arch_tensor_category("gemma3", "output.weight") == RP_TCAT_OUTPUT, "output");
    CHECK(rp_arch_tensor_category("qwen35", "blk.0.attn_qkv.weight") == RP_TCAT_ATTN_V,
          "a fused q|k|v gets attn_v's bits");
    CHECK(rp_arch_tensor_category("qwen3", "blk.1.attn_q_norm.weight") == RP_TCAT_NORM, "q norm");
    CHECK(rp_arch_tensor_category("zamba2", "blk.2.ffn_down.weight") == RP_TCAT_FFN_DOWN, "down");
    CHECK(rp_arch_tensor_category("llama", "blk.3.ssm_in.weight") == RP_TCAT_UNKNOWN,
          "not a llama tensor");
    CHECK(rp_arch_tensor_category("llama", "blk.x.attn_v.weight") == RP_TCAT_UNKNOWN, "no layer");
    CHECK(rp_arch_tensor_category("bert", "blk.0.attn_v.weight") == RP_TCAT_UNKNOWN,
          "unknown architecture");
    CHECK(rp_arch_tensor_category(NULL, NULL) == RP_TCAT_UNKNOWN, "nothing");
    CHECK(!strcmp(rp_tensor_cat_name(RP_TCAT_ATTN_OUTPUT), "attn_output"), "names");
    CHECK(!strcmp(rp_tensor_cat_name(RP_TCAT_UNKNOWN), "?"), "unknown name");
}
