/* Grammar options of run and chat: --grammar, --grammar-file, --json-schema,
 * --json-schema-file (llama.cpp's spellings). The text is read and checked
 * before the model loads; the grammar is bound to the vocabulary after. */
#ifndef RP_GRAMMAR_OPTS_H
#define RP_GRAMMAR_OPTS_H

#include "tools.h"

typedef struct grammar_opts {
    const char *grammar, *grammar_file, *schema, *schema_file;
    char *gbnf; /* the grammar text (grammar_opts_check), or NULL: none */
    rp_grammar_vocab *gv;
    rp_grammar *g;
} grammar_opts;

const arg_opt *grammar_opts_table(grammar_opts *o);
/* Reads the grammar (or converts the schema) and checks it; false after
 * printing why. */
bool grammar_opts_check(const char *cmd, grammar_opts *o);
/* Binds the grammar to m's vocabulary (o->g; nothing without a grammar). */
bool grammar_opts_bind(const char *cmd, grammar_opts *o, const rp_model *m);
void grammar_opts_free(grammar_opts *o);

#endif
