#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_*.c as a libFuzzer binary (clang, ASan+UBSan)
# and runs each for FUZZ_SECONDS (default 60) from its seed corpus.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${FUZZ_SECONDS:-60}
SHARED=${REPRISE_SHARED:-../shared}
B=build-fuzz
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
make --no-print-directory BUILD=$B CC=clang OPT="-O1 -g" EXTRA_CFLAGS="-fsanitize=fuzzer-no-link $SAN" -j"$(nproc)" $B/libreprise.a
mkdir -p $B/fuzz
# seed corpora: small real files
mkdir -p $B/fuzz/corpus-gguf $B/fuzz/corpus-safetensors
cp "$SHARED/models/stories260K.gguf" $B/fuzz/corpus-gguf/ 2>/dev/null || true
[ -x build/reprise ] && build/reprise synth --arch qwen3 --n-embd 32 --n-layer 1 --n-head 2 --n-ff 64 --n-vocab 300 -o $B/fuzz/corpus-gguf/tiny-qwen3.gguf 2>/dev/null || true
find tests/fixtures/hf -name '*.safetensors' -size -200k -exec cp {} $B/fuzz/corpus-safetensors/ \; 2>/dev/null || true
mkdir -p $B/fuzz/corpus-jinja $B/fuzz/corpus-gbnf $B/fuzz/corpus-schema
cp tests/fixtures/templates/*.jinja $B/fuzz/corpus-jinja/ 2>/dev/null || true
cp tests/fixtures/grammars/*.gbnf $B/fuzz/corpus-gbnf/ 2>/dev/null || true
cp tests/fixtures/schemas/*.json $B/fuzz/corpus-schema/ 2>/dev/null || true
for src in tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    kind=${name#fuzz_}
    clang -std=c11 -O1 -g -D_GNU_SOURCE -Iinclude -Isrc $SAN -fsanitize=fuzzer "$src" $B/libreprise.a \
        $(pkg-config --libs libpcre2-8 libmicrohttpd jansson libxxhash libpng libedit) -lopenblas -lm -pthread -o $B/fuzz/$name
    mkdir -p $B/fuzz/corpus-$kind $B/fuzz/work-$kind
    echo "== $name: ${SECS}s"
    $B/fuzz/$name -max_total_time="$SECS" -rss_limit_mb=4096 -max_len=2000000 -print_final_stats=1 \
        $B/fuzz/work-$kind $B/fuzz/corpus-$kind 2>&1 | grep -E "stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY|crash-|Done" || true
done
