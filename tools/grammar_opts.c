/* Grammar options of run and chat (grammar_opts.h). */
#include "grammar_opts.h"

#include <stdlib.h>
#include <string.h>

const arg_opt *grammar_opts_table(grammar_opts *o) {
    static arg_opt t[5];
    const arg_opt src[] = {
        {"--grammar", ARG_STR, &o->grammar, "GBNF",
         "constrain the output to a GBNF grammar (llama.cpp's format)"},
        {"--grammar-file", ARG_STR, &o->grammar_file, "FILE", "the GBNF grammar from a file"},
        {"-j|--json-schema", ARG_STR, &o->schema, "SCHEMA",
         "constrain the output to JSON valid for a JSON schema ('{}': any JSON value)"},
        {"-jf|--json-schema-file", ARG_STR, &o->schema_file, "FILE", "the JSON schema from a file"},
        {0},
    };
    memcpy(t, src, sizeof src);
    return t;
}

bool grammar_opts_check(const char *cmd, grammar_opts *o) {
    const int n = (o->grammar != NULL) + (o->grammar_file != NULL) + (o->schema != NULL) +
                  (o->schema_file != NULL);
    if (n == 0) return true;
    if (n > 1) {
        tool_error(cmd, "give one of --grammar, --grammar-file, --json-schema, --json-schema-file");
        return false;
    }
    size_t len = 0;
    char *file = NULL;
    const char *path = o->grammar_file ? o->grammar_file : o->schema_file;
    if (path && !(file = tool_read_text(cmd, path, &len))) return false;
    const char *flag = o->grammar        ? "--grammar"
                       : o->grammar_file ? "--grammar-file"
                       : o->schema       ? "--json-schema"
                                         : "--json-schema-file";
    rp_status s;
    if (o->grammar || o->grammar_file) {
        o->gbnf = strdup(o->grammar ? o->grammar : file);
        s = o->gbnf ? rp_grammar_check(o->gbnf, NULL) : RP_ERR_NOMEM;
    } else {
        const char *schema = o->schema ? o->schema : file;
        /* '{}' (any object, as llama.cpp's -j '{}') */
        s = rp_json_schema_to_grammar(schema, &o->gbnf);
    }
    free(file);
    if (s) {
        tool_error(cmd, "%s: %s", flag, rp_last_error());
        return false;
    }
    return true;
}

bool grammar_opts_bind(const char *cmd, grammar_opts *o, const rp_model *m) {
    if (!o->gbnf) return true;
    rp_status s = rp_grammar_vocab_new(rp_model_vocab(m), &o->gv);
    if (!s) s = rp_grammar_new(o->gv, o->gbnf, NULL, &o->g);
    if (s) return tool_fail(cmd, s), false;
    return true;
}

void grammar_opts_free(grammar_opts *o) {
    rp_grammar_free(o->g);
    rp_grammar_vocab_free(o->gv);
    free(o->gbnf);
    o->g = NULL;
    o->gv = NULL;
    o->gbnf = NULL;
}
