#!/usr/bin/env bash
# Grammar microbenchmark: what constraining one generation step costs (the
# token mask over a whole vocabulary, and the single-token check the sampler
# tries first), on SmolLM2's 49,152-token vocabulary and Gemma 3's 262,144
# when their GGUFs are in ~/.cache/reprise (or VOCABS="a.gguf b.gguf").
#
# bench/grammar_bench.c is built against $BUILD/libreprise.a; each vocabulary
# walks a 252-byte JSON document through json.gbnf (GRAMMAR=... for another),
# timing every step (best of 5 for the repeated passes: the machine is shared).
# Then each model generates N_GEN tokens without a grammar, with a JSON-schema
# grammar the llama.cpp way and with grammar_first: CPU time per token of the
# forward pass and of sampling, on one thread (other jobs do not count).
#
#   bench/grammar.sh            (BUILD=build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
GRAMMAR=${GRAMMAR:-tests/fixtures/grammars/json.gbnf}
VOCABS=${VOCABS:-"$HOME/.cache/reprise/SmolLM2-135M-Instruct.Q4_1.gguf $HOME/.cache/reprise/gemma-3-270m-q4_k_m.gguf"}
W=$(mktemp -d /tmp/reprise-grammarbench.XXXXXX)
trap 'rm -rf "$W"' EXIT
make --no-print-directory BUILD="$BUILD" "$BUILD/libreprise.a" >/dev/null
cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/grammar_bench.c "$BUILD/libreprise.a" \
    $(pkg-config --libs libpcre2-8 libmicrohttpd jansson libxxhash libpng libedit) -lopenblas -lm -pthread -o "$W/grammar_bench"
ran=0
for v in $VOCABS; do
    [ -f "$v" ] || { echo "skip $v (not found)"; continue; }
    "$W/grammar_bench" "$v" "$GRAMMAR"
    echo
    ran=1
done
[ "$ran" = 1 ] || { echo "no vocabulary found (set VOCABS)"; exit 1; }
# generation with and without a grammar (one thread, CPU time): MODELS="a.gguf ..." (default: the same files)
for mdl in ${MODELS:-$VOCABS}; do
    [ -f "$mdl" ] || continue
    "$W/grammar_bench" --generate "$mdl" "${N_GEN:-64}"
    echo
done
