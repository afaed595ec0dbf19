/* The demo model and its held-out text, embedded in the binary so `make run`
 * needs no file at run time (assembled from models/ at build time; the
 * Makefile makes this object depend on both files). */
__asm__(".section .rodata\n"
        ".balign 64\n"
        ".globl rp_demo_gguf\n"
        "rp_demo_gguf:\n"
        ".incbin \"models/demo-llama.gguf\"\n"
        ".globl rp_demo_gguf_end\n"
        "rp_demo_gguf_end:\n"
        ".balign 64\n"
        ".globl rp_demo_text\n"
        "rp_demo_text:\n"
        ".incbin \"models/war-and-peace-heldout.txt\"\n"
        ".globl rp_demo_text_end\n"
        "rp_demo_text_end:\n"
        ".byte 0\n"
        ".previous\n");
