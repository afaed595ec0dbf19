#!/usr/bin/env bash
# House rules that a grep can check (docs/HACKING.md):
#   fn-length      no function over 150 lines outside src/kernels/, in src/ and
#                  tools/ (clang-formatted code: a definition opens with '{' at
#                  the end of a line starting in column 0 and closes with '}' in
#                  column 0)
#   fn-length-src  the same in src/ only (the library)
#   arch-names     no architecture name in library code outside src/arch/
#   tool-includes  tools/ include public headers (include/) and their own only
# Prints one line per violation and exits 1 when there is any.
# Usage: scripts/check-layout.sh [fn-length|fn-length-src|arch-names|tool-includes]... [PATH]...
# A PATH (an existing file or folder, e.g. tools) limits fn-length to the C
# files under it; without one it looks at src/ and tools/.
set -u
cd "$(dirname "$0")/.."
MAX_LINES=${MAX_LINES:-150}
bad=0

fn_length() { # [DIR...] (default: src tools)
    local f dirs=("$@")
    [ ${#dirs[@]} -gt 0 ] || dirs=(src tools)
    for f in $(find "${dirs[@]}" -name '*.c' -not -path 'src/kernels/*' | sort); do
        awk -v max="$MAX_LINES" -v file="$f" '
            # a definition starts in column 0 with a name and "(", may wrap, and ends its
            # signature with "{"; a ";" first makes it a declaration
            !infn && /^[A-Za-z_]/ && /\(/ && !/=/ { cand = NR; name = $0; sub(/\(.*/, "", name); n = split(name, w, /[ *]+/); name = w[n] }
            !infn && cand && /;[ \t]*$/ { cand = 0 }
            !infn && cand && /\{$/ { infn = 1; start = cand; cand = 0; next }
            infn && /^\}/ { len = NR - start + 1; if (len > max) printf "%s:%d: function %s is %d lines (max %d)\n", file, start, name, len, max; infn = 0 }
        ' "$f"
    done
}

arch_names() {
    # The architectures' names (rp_arch.name): `.name = "x"` in an rp_arch, the
    # name argument of a macro that defines several (DENSE_ARCH(var, "x", ...)),
    # and the registry's rp_arch_<name> variables.
    local names
    names=$({ grep -ho '\.name = "[a-z0-9_]*"' src/arch/*.c | sed 's/.*"\(.*\)"/\1/'
              grep -hoE '^[A-Z_]+_ARCH\(rp_arch_[a-z0-9_]+, "[a-z0-9_]+"' src/arch/*.c | sed 's/.*"\(.*\)"/\1/'
              grep -hoE '\brp_arch_[a-z0-9_]+\b' src/arch/registry.c | sed 's/^rp_arch_//' |
                  grep -vxE 'find|find_hf|at|list|hf_list'; } | sort -u | tr '\n' '|' | sed 's/|$//')
    [ -n "$names" ] || return 0
    # Quoted names: src/text/ and the converter's tokenizer part
    # (src/convert/convert_vocab.c) are left out: tokenizer pre-types are named
    # after models ("qwen2", "qwen35" there are vocabularies, not
    # architectures); the tokenizer model names themselves ("llama" = SPM) are
    # RP_VOCAB_MODEL_* in src/text/vocab_table.h. Identifiers and arch headers
    # are checked everywhere.
    { grep -nE "\"($names)\"" $(find src -name '*.[ch]' -not -path 'src/arch/*' -not -path 'src/text/*' \
                                  -not -path 'src/convert/convert_vocab.c' | sort)
      grep -nE "\brp_($names)_|arch/($names)\\.h" $(find src -name '*.[ch]' -not -path 'src/arch/*' | sort); } 2>/dev/null |
        sed 's/$/  (architecture name outside src\/arch\/)/'
}

tool_includes() {
    grep -nE '#include "' tools/*.c tools/*.h | grep -vE '#include "(reprise[a-z_]*\.h|[a-z_]+\.h)"' |
        sed 's/$/  (tools include public headers only)/'
    # a bare name must be a tools/ header or a public one
    grep -noE '#include "[a-z_]+\.h"' tools/*.c tools/*.h | while IFS=: read -r file line inc; do
        h=${inc#*\"}; h=${h%\"}
        [ -e "tools/$h" ] || [ -e "include/$h" ] || echo "$file:$line: $h is not public (tools include public headers only)"
    done
}

checks=()
paths=()
for a in "$@"; do
    case $a in
        fn-length | fn-length-src | arch-names | tool-includes) checks+=("$a") ;;
        *) if [ -e "$a" ]; then paths+=("${a%/}"); else echo "unknown check or path $a"; exit 2; fi ;;
    esac
done
[ ${#checks[@]} -gt 0 ] || checks=(fn-length arch-names tool-includes)
for c in "${checks[@]}"; do
    case $c in
        fn-length) out=$(fn_length ${paths[@]+"${paths[@]}"}) ;;
        fn-length-src) out=$(fn_length src) ;;
        arch-names) out=$(arch_names) ;;
        tool-includes) out=$(tool_includes) ;;
    esac
    if [ -n "$out" ]; then echo "$out"; bad=1; fi
done
exit $bad
