/* libFuzzer target: the Jinja chat-template interpreter. The input is a
 * template; it is compiled and, when it compiles, rendered over a small
 * conversation with tools, under tight limits (steps, memory, output), so a
 * runaway template ends with an error instead of a timeout. */
#include "text/chat_template.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    rp_chat_template *t;
    if (rp_chat_template_new(src, &t) == RP_OK) {
        rp_chat_template_inputs in = {
            .messages_json =
                "[{\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\",\"content\":\"hi "
                "\\u00e9\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":"
                "\"c1\","
                "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},"
                "{\"role\":\"tool\",\"content\":\"42\"}]",
            .tools_json =
                "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]",
            .extra_vars_json = "{\"enable_thinking\":false}",
            .add_generation_prompt = true,
            .bos_token = "<s>",
            .eos_token = "</s>",
        };
        jj_limits lim = {
            .max_steps = 200000, .max_bytes = (size_t)16 << 20, .max_output = (size_t)1 << 20};
        char *out = NULL;
        rp_chat_template_apply_ex(t, &in, 0, &lim, &out);
        free(out);
        rp_chat_template_free(t);
    }
    free(src);
    return 0;
}
