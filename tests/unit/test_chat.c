/* Chat templates against strings worked out by hand from the real templates:
 * Qwen3 (vocab/qwen3 GGUF and tokenizer_config.json), Llama 3 and Gemma 3
 * (tokenizer_config.json), Phi-3 (the ggml-vocab-phi-3 GGUF), and the
 * published Llama 2 / Mistral templates quoted below. */
#include "test.h"

#include "text/chat.h"
#include "reprise.h"

#include <jansson.h>
#include <string.h>

static char *config_template(const char *rel) {
    json_error_t err;
    json_t *root = json_load_file(test_shared(rel), JSON_DECODE_INT_AS_REAL, &err);
    if (!root) return NULL;
    const char *t = json_string_value(json_object_get(root, "chat_template"));
    char *copy = t ? strdup(t) : NULL;
    json_decref(root);
    return copy;
}

static char *gguf_template(const char *rel, rp_model **m) {
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    if (rp_model_load(test_shared(rel), &mp, m)) return NULL;
    const char *t = rp_model_meta_str(*m, "tokenizer.chat_template");
    return t ? strdup(t) : NULL;
}

typedef struct chat_case {
    const char *what;
    rp_chat_msg msgs[6];
    size_t n;
    bool add;
    int thinking;
    const char *want; /* NULL: an error is expected, containing `err` */
    const char *err;
} chat_case;

static void run_cases(const char *tmpl, const char *family, const char *bos, const char *eos,
                      const chat_case *cs, size_t n) {
    CHECK(tmpl != NULL, "%s: no template text", family);
    if (!tmpl) return;
    const char *det = rp_chat_detect(tmpl);
    CHECK(det && !strcmp(det, family), "detected '%s', want '%s'", det ? det : "(none)", family);
    for (size_t i = 0; i < n; i++) {
        rp_chat_opts o = {.template_text = tmpl,
                          .bos = bos,
                          .eos = eos,
                          .add_assistant = cs[i].add,
                          .enable_thinking = cs[i].thinking};
        char *out = NULL;
        rp_status s = rp_chat_render(&o, cs[i].msgs, cs[i].n, &out);
        if (cs[i].want) {
            CHECK(s == RP_OK && !strcmp(out, cs[i].want),
                  "%s / %s:\n    want '%s'\n    got  '%s' %s", family, cs[i].what, cs[i].want,
                  out ? out : "", s ? rp_last_error() : "");
        } else {
            CHECK(s != RP_OK && strstr(rp_last_error(), cs[i].err),
                  "%s / %s: want an error with '%s', got %d '%s'", family, cs[i].what, cs[i].err, s,
                  s ? rp_last_error() : out);
        }
        free(out);
    }
}

#define SYS(x)                                                                                     \
    { "system", x }
#define USR(x)                                                                                     \
    { "user", x }
#define AST(x)                                                                                     \
    { "assistant", x }

void test_chat_qwen3(void) {
    rp_model *m = NULL;
    char *t = gguf_template("vocab/qwen3/ggml-vocab-qwen3.gguf", &m);
    char *t2 = config_template("vocab/qwen3/tokenizer_config.json");
    CHECK(t && t2 && !strcmp(t, t2), "the GGUF carries tokenizer_config.json's template");
    static const chat_case cs[] = {
        {"system + two turns, history thinking dropped",
         {SYS("You are terse."), USR("Hi"), AST("<think>\nplan\n</think>\n\nHello!"), USR("Bye")},
         4,
         true,
         -1,
         "<|im_start|>system\nYou are "
         "terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!"
         "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
         NULL},
        {"enable_thinking false",
         {USR("Hi")},
         1,
         true,
         0,
         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
         NULL},
        {"last answer keeps its reasoning",
         {USR("Hi"), AST("<think>\nplan\n</think>\n\nHello!")},
         2,
         false,
         -1,
         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</"
         "think>\n\nHello!<|im_end|>\n",
         NULL},
        {"last answer without reasoning gets an empty think block",
         {USR("Hi"), AST("Hello!")},
         2,
         false,
         -1,
         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</"
         "think>\n\nHello!<|im_end|>\n",
         NULL},
        {"a later system message is a turn",
         {USR("a"), SYS("b")},
         2,
         false,
         -1,
         "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n",
         NULL},
        {"unknown role", {{"narrator", "x"}}, 1, true, -1, NULL, "role 'narrator'"},
    };
    run_cases(t, "qwen3", "", "<|im_end|>", cs, sizeof cs / sizeof cs[0]);
    /* through the model: detected, and the public entry point */
    char *out = NULL;
    rp_chat_msg one = {"user", "Hi"};
    CHECK(rp_chat_apply(m, NULL, &one, 1, true, &out) == RP_OK &&
              !strcmp(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
          "rp_chat_apply: %s", out ? out : rp_last_error());
    free(out);
    out = NULL;
    CHECK(rp_chat_apply(m, "nope", &one, 1, true, &out) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "'nope'") && strstr(rp_last_error(), "chatml"),
          "unknown name: %s", rp_last_error());
    free(out);
    free(t);
    free(t2);
    rp_model_free(m);
}

void test_chat_llama3(void) {
    char *t = config_template("vocab/llama3/tokenizer_config.json");
    /* the base model's template: trims content and always opens the assistant turn */
    static const chat_case cs[] = {
        {"system, user, assistant",
         {SYS("S"), USR("  Hi \n"), AST("Yo")},
         3,
         false,
         -1,
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_"
         "id|>user<|end_header_id|>"
         "\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|><|start_"
         "header_id|>assistant<|"
         "end_header_id|>\n\n",
         NULL},
    };
    run_cases(t, "llama3", "<|begin_of_text|>", "<|end_of_text|>", cs, sizeof cs / sizeof cs[0]);
    free(t);
    /* the instruct template guards the opening with add_generation_prompt */
    const char *instruct = "{% set loop_messages = messages %}{% for message in loop_messages %}{% "
                           "set content = '<|start_header_id|>' + "
                           "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
                           "'<|eot_id|>' %}{% if loop.index0 == 0 "
                           "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% "
                           "endfor %}{% if add_generation_prompt %}{{ "
                           "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
    static const chat_case ci[] = {
        {"no generation prompt",
         {USR("Hi")},
         1,
         false,
         -1,
         "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
         NULL},
    };
    run_cases(instruct, "llama3", "<|begin_of_text|>", "<|eot_id|>", ci, sizeof ci / sizeof ci[0]);
}

void test_chat_gemma(void) {
    char *t = config_template("vocab/gemma3/tokenizer_config.json");
    static const chat_case cs[] = {
        {"system folded into the first user turn",
         {SYS("Be brief."), USR(" Hi "), AST("Hello"), USR("Bye")},
         4,
         true,
         -1,
         "<bos><start_of_turn>user\nBe "
         "brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
         "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n",
         NULL},
        {"no generation prompt",
         {USR("Hi")},
         1,
         false,
         -1,
         "<bos><start_of_turn>user\nHi<end_of_turn>\n",
         NULL},
        {"roles must alternate", {USR("a"), USR("b")}, 2, true, -1, NULL, "alternate"},
    };
    run_cases(t, "gemma", "<bos>", "<end_of_turn>", cs, sizeof cs / sizeof cs[0]);
    free(t);
    /* Gemma 2 raises on a system message */
    const char *g2 =
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
        "not "
        "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') "
        "!= "
        "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') "
        "%}{% set "
        "role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
        "'<start_of_turn>' + role "
        "+ '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if "
        "add_generation_prompt "
        "%}{{'<start_of_turn>model\n'}}{% endif %}";
    static const chat_case c2[] = {
        {"system refused",
         {SYS("x"), USR("Hi")},
         2,
         true,
         -1,
         NULL,
         "no place for a system message"},
        {"plain",
         {USR("Hi")},
         1,
         true,
         -1,
         "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
         NULL},
    };
    run_cases(g2, "gemma", "<bos>", "<eos>", c2, sizeof c2 / sizeof c2[0]);
}

void test_chat_phi3(void) {
    rp_model *m = NULL;
    char *t = gguf_template("vocab/llama.cpp/ggml-vocab-phi-3.gguf", &m);
    /* Phi-3-mini: the assistant opening follows every user turn; no system role */
    static const chat_case cs[] = {
        {"two turns",
         {USR("Hi"), AST("Yo"), USR("Q")},
         3,
         true,
         -1,
         "<s><|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|>\n<|user|>\nQ<|end|>\n<|assistant|>\n",
         NULL},
        {"system would be dropped",
         {SYS("x"), USR("Hi")},
         2,
         true,
         -1,
         NULL,
         "no place for a system message"},
    };
    run_cases(t, "phi3", "<s>", "<|endoftext|>", cs, sizeof cs / sizeof cs[0]);
    free(t);
    rp_model_free(m);
    /* Phi-3-small / 3.5: one header per role */
    const char *small =
        "{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + "
        "message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ "
        "'<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";
    static const chat_case c2[] = {
        {"system",
         {SYS("S"), USR("Hi")},
         2,
         true,
         -1,
         "<s><|system|>\nS<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n",
         NULL},
        {"no generation prompt ends with eos",
         {USR("Hi")},
         1,
         false,
         -1,
         "<s><|user|>\nHi<|end|>\n<|endoftext|>",
         NULL},
    };
    run_cases(small, "phi3", "<s>", "<|endoftext|>", c2, sizeof c2 / sizeof c2[0]);
}

void test_chat_llama2(void) {
    /* meta-llama/Llama-2-7b-chat-hf */
    const char *t = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] "
                    "%}{% set system_message = "
                    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
                    "system_message = false %}{% endif "
                    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != "
                    "(loop.index0 % 2 == 0) %}{{ "
                    "raise_exception('Conversation roles must alternate "
                    "user/assistant/user/assistant/...') }}{% endif %}{% if "
                    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' "
                    "+ system_message + "
                    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
                    "message['content'] %}{% endif %}{% if "
                    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' "
                    "[/INST]' }}{% elif "
                    "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token "
                    "}}{% endif %}{% endfor %}";
    static const chat_case cs[] = {
        {"system in the first turn",
         {SYS("Be kind."), USR("Hi "), AST(" Hello "), USR("Bye")},
         4,
         true,
         -1,
         "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]",
         NULL},
        {"assistant first", {AST("x")}, 1, true, -1, NULL, "alternate"},
    };
    run_cases(t, "llama2", "<s>", "</s>", cs, sizeof cs / sizeof cs[0]);
}

void test_chat_mistral(void) {
    /* mistralai/Mistral-7B-Instruct-v0.2 (original) */
    const char *v0 =
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
        "(loop.index0 % "
        "2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        "user/assistant/user/assistant/...') "
        "}}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' "
        "[/INST]' }}{% "
        "elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ "
        "raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";
    static const chat_case c0[] = {
        {"two turns",
         {USR("Hi"), AST("Yo"), USR("Q")},
         3,
         true,
         -1,
         "<s>[INST] Hi [/INST]Yo</s>[INST] Q [/INST]",
         NULL},
        {"system refused", {SYS("x"), USR("Hi")}, 2, true, -1, NULL, "system message"},
    };
    run_cases(v0, "mistral", "<s>", "</s>", c0, sizeof c0 / sizeof c0[0]);
    /* mistral 'v1' with a system prompt (leading-space [INST]) */
    const char *v1 =
        "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = "
        "messages[0]['content'] "
        "%}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = "
        "messages %}\n{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    "
        "{%- if "
        "message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined "
        "%}\n       "
        "     {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n    "
        "    {%- "
        "else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- "
        "endif %}\n "
        "   {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + "
        "eos_token}}\n    {%- endif %}\n{%- endfor %}\n";
    static const chat_case c1[] = {
        {"system in the first turn",
         {SYS("S"), USR("Hi"), AST("Yo"), USR("Q")},
         4,
         true,
         -1,
         "<s> [INST] S\n\nHi [/INST] Yo</s> [INST] Q [/INST]",
         NULL},
    };
    run_cases(v1, "mistral-v1", "<s>", "</s>", c1, sizeof c1 / sizeof c1[0]);
    /* mistral 'v3' (Mistral-7B-Instruct-v0.3, Large): system in the last user turn */
    const char *v3 =
        "{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if message[\"role\"] == "
        "\"user\" "
        "%}\n        {%- if loop.last and system_message is defined %}\n            {{- \"[INST] "
        "\" + "
        "system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n        {%- else "
        "%}\n       "
        "     {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n    "
        "{%- elif "
        "message[\"role\"] == \"assistant\" %}\n        {{- \" \" + message[\"content\"]|trim + "
        "eos_token}}\n    {%- endif %}\n{%- endfor %}\n";
    static const chat_case c3[] = {
        {"system in the last turn",
         {SYS("S"), USR("Hi"), AST(" Yo "), USR("Q")},
         4,
         true,
         -1,
         "<s>[INST] Hi[/INST] Yo</s>[INST] S\n\nQ[/INST]",
         NULL},
    };
    run_cases(v3, "mistral-v3", "<s>", "</s>", c3, sizeof c3 / sizeof c3[0]);
    const char *v3t = "{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if "
                      "message[\"role\"] == \"user\" "
                      "%}\n        {%- if loop.last and system_message is defined %}\n            "
                      "{{- \"[INST]\" + "
                      "system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n       "
                      " {%- else %}\n      "
                      "      {{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}\n        {%- "
                      "endif %}\n    {%- elif "
                      "message[\"role\"] == \"assistant\" %}\n        {{- message[\"content\"] + "
                      "eos_token}}\n    {%- "
                      "endif %}\n{%- endfor %}\n";
    static const chat_case ct[] = {
        {"tekken",
         {USR("Hi"), AST("Yo"), USR("Q")},
         3,
         true,
         -1,
         "<s>[INST]Hi[/INST]Yo</s>[INST]Q[/INST]",
         NULL},
    };
    run_cases(v3t, "mistral-v3-tekken", "<s>", "</s>", ct, sizeof ct / sizeof ct[0]);
}

void test_chat_detect_errors(void) {
    CHECK(rp_chat_detect(NULL) == NULL && rp_chat_detect("") == NULL, "no template, no family");
    CHECK(rp_chat_detect("{{ messages[0]['content'] }}<|weird|>") == NULL, "unknown template");
    rp_chat_opts o = {.template_text = "{% for m in messages %}<|weird|>{% endfor %}",
                      .add_assistant = true};
    rp_chat_msg one = {"user", "hi"};
    char *out = NULL;
    CHECK(rp_chat_render(&o, &one, 1, &out) == RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "--chat-template"),
          "unknown template names the flag: %s", rp_last_error());
    o.template_text = NULL;
    CHECK(rp_chat_render(&o, &one, 1, &out) == RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "no chat template"),
          "missing template: %s", rp_last_error());
    /* a name overrides detection and renders without the template */
    o.name = "chatml";
    CHECK(rp_chat_render(&o, &one, 1, &out) == RP_OK &&
              !strcmp(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
          "chatml by name");
    free(out);
    /* Qwen2.5's default system prompt comes from its template text */
    const char *q25 =
        "{%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + "
        "messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n        {{- "
        "'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\\n' }}\n    {%- endif %}";
    rp_chat_opts q = {.template_text = q25, .add_assistant = true};
    out = NULL;
    CHECK(rp_chat_render(&q, &one, 1, &out) == RP_OK &&
              !strcmp(
                  out,
                  "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                  "assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
          "default system: %s", out ? out : rp_last_error());
    free(out);
}
