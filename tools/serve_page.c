/* reprise serve: the chat page at / (tools/web/chat.html: one static HTML
 * file, no framework, no build step), assembled into the binary as the demo
 * model is (the Makefile makes this object depend on the file). */
#include "serve.h"

#include <string.h>

__asm__(".section .rodata\n"
        ".globl rp_chat_page\n"
        "rp_chat_page:\n"
        ".incbin \"tools/web/chat.html\"\n"
        ".globl rp_chat_page_end\n"
        "rp_chat_page_end:\n"
        ".byte 0\n"
        ".previous\n");

extern const char rp_chat_page[], rp_chat_page_end[];

enum MHD_Result api_page(srv_req *r, json_t *body) {
    (void)body;
    return srv_reply_text(r, 200, "text/html; charset=utf-8", rp_chat_page,
                          (size_t)(rp_chat_page_end - rp_chat_page));
}
