#!/usr/bin/env bash
# Cycles among library files (src/), from the include lines, or from which
# file's functions a file uses.
#
#   includes (default)  A node is a module: src/core/kv.c and src/core/kv.h are
#            one node, "core/kv". An edge A -> B is an `#include "B.h"` in A.c
#            or A.h (quoted includes of src/ headers; public and system headers
#            are leaves).
#   --calls  A node is a .c file. An edge A -> B when A names a function that
#            B defines (a non-static definition in column 0, clang-formatted;
#            names in comments do not count):
#            catches the cycles a shared header hides (two files that call each
#            other through one header, as vocab.c and vocab_bpe.c once did).
#            A *_stub.c file stands in for a module a build leaves out (the
#            Vulkan backend without libvulkan-dev): its definitions repeat that
#            module's, so they are not counted as definitions.
# Every strongly connected component of more than one node is printed on one
# line, its members sorted, then "N cycle(s)"; the exit status is 1 when there
# is any. --edges prints the graph instead.
#   scripts/include-cycles.sh [--calls] [--edges]
set -u
cd "$(dirname "$0")/.."
mode=includes edges_only=0
for a in "$@"; do
    case $a in
        --calls) mode=calls ;;
        --edges) edges_only=1 ;;
        *) echo "usage: $0 [--calls] [--edges]" >&2; exit 2 ;;
    esac
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/include-cycles.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

include_edges() { # "from to": module of the including file, module of the included header
    local f from inc
    for f in $(find src -name '*.[ch]' | sort); do
        from=${f#src/}
        from=${from%.*}
        sed -n 's/^[ \t]*#[ \t]*include[ \t]*"\([^"]*\)\.h".*/\1/p' "$f" | while read -r inc; do
            [ -e "src/$inc.h" ] || continue
            [ "$inc" != "$from" ] && echo "$from $inc"
        done
    done
}

call_edges() { # "from to": a file, a file whose function it names
    local f
    for f in $(find src -name '*.c' -not -name '*_stub.c' | sort); do
        awk -v file="${f#src/}" '
            /^[A-Za-z_]/ && !/^(static|typedef|extern)/ && /\(/ && !/;[ \t]*$/ && !/=/ {
                l = $0; sub(/\(.*/, "", l); n = split(l, w, /[ *]+/)
                if (w[n] ~ /^[A-Za-z_][A-Za-z0-9_]*$/) print w[n], file
            }' "$f"
    done | sort -u > "$tmp/defs"
    for f in $(find src -name '*.c' | sort); do
        # comments name functions without calling them: strip them first
        gcc -fpreprocessed -dD -E -P "$f" 2>/dev/null | grep -oE '\b[A-Za-z_][A-Za-z0-9_]*\b' | sort -u |
            join - "$tmp/defs" | awk -v f="${f#src/}" '$2 != f { print f, $2 }'
    done
}

if [ $mode = calls ]; then call_edges; else include_edges; fi | sort -u > "$tmp/edges"
if [ $edges_only = 1 ]; then
    cat "$tmp/edges"
    exit 0
fi

# Tarjan's strongly connected components
awk '
    { if (!($1 in id)) { id[$1] = ++n; name[n] = $1 }
      if (!($2 in id)) { id[$2] = ++n; name[n] = $2 }
      a = id[$1]; adj[a, ++deg[a]] = id[$2] }
    function visit(v,    i, w, comp, k, line, m, j, t) {
        idx[v] = low[v] = ++counter; stack[++sp] = v; on[v] = 1
        for (i = 1; i <= deg[v]; i++) {
            w = adj[v, i]
            if (!(w in idx)) { visit(w); if (low[w] < low[v]) low[v] = low[w] }
            else if (on[w] && idx[w] < low[v]) low[v] = idx[w]
        }
        if (low[v] == idx[v]) {
            k = 0
            do { w = stack[sp--]; on[w] = 0; comp[++k] = name[w] } while (w != v)
            if (k > 1) {
                for (m = 2; m <= k; m++)          # insertion sort of the members
                    for (j = m; j > 1 && comp[j - 1] > comp[j]; j--) { t = comp[j]; comp[j] = comp[j - 1]; comp[j - 1] = t }
                line = comp[1]
                for (m = 2; m <= k; m++) line = line " <-> " comp[m]
                print line; cycles++
            }
        }
    }
    END {
        for (v = 1; v <= n; v++) if (!(v in idx)) visit(v)
        printf "%d cycle(s)\n", cycles
        exit cycles > 0
    }
' "$tmp/edges"
