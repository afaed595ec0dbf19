#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_*.c as a libFuzzer binary (clang, ASan+UBSan)
# and runs each for FUZZ_SECONDS (default 60) from its seed corpus. A finding
# (crash, leak, sanitizer report, timeout) or a fuzzer that fails to run makes
# the whole run fail, with the reproducer's path printed; the last lines of
# each fuzzer's log are shown either way.
# FUZZ_TARGETS="plan http_body" picks targets by name (default: all);
# FUZZ_BUILD_ONLY=1 builds the binaries and seed corpora and runs nothing
# (tests/fuzz/long.sh runs them for long).
set -uo pipefail
cd "$(dirname "$0")/../.."
SECS=${FUZZ_SECONDS:-60}
SHARED=${REPRISE_SHARED:-../shared}
export REPRISE_SHARED=$SHARED # fuzz_http_body's vocabulary
B=build-fuzz
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
make --no-print-directory BUILD=$B CC=clang OPT="-O1 -g" EXTRA_CFLAGS="-fsanitize=fuzzer-no-link $SAN" -j"$(nproc)" $B/libreprise.a ||
    { echo "FAIL fuzz: the instrumented library did not build"; exit 1; }
mkdir -p $B/fuzz
# seed corpora: small real files
mkdir -p $B/fuzz/corpus-gguf $B/fuzz/corpus-safetensors
cp "$SHARED/models/stories260K.gguf" $B/fuzz/corpus-gguf/ 2>/dev/null || true
[ -x build/reprise ] && build/reprise synth --arch qwen3 --n-embd 32 --n-layer 1 --n-head 2 --n-ff 64 --n-vocab 300 -o $B/fuzz/corpus-gguf/tiny-qwen3.gguf 2>/dev/null
find tests/fixtures/hf -name '*.safetensors' -size -200k -exec cp {} $B/fuzz/corpus-safetensors/ \; 2>/dev/null
mkdir -p $B/fuzz/corpus-jinja $B/fuzz/corpus-gbnf $B/fuzz/corpus-schema
cp tests/fixtures/templates/*.jinja $B/fuzz/corpus-jinja/
cp tests/fixtures/grammars/*.gbnf $B/fuzz/corpus-gbnf/
cp tests/fixtures/schemas/*.json $B/fuzz/corpus-schema/
# plans, plan files, scan CSVs, KLD base files, HF configs: seeds made here
mkdir -p $B/fuzz/corpus-plan $B/fuzz/corpus-planfile $B/fuzz/corpus-scan_csv $B/fuzz/corpus-kld $B/fuzz/corpus-hf_config
i=0
for spec in '26,34' '2-4;6-7' '0..15,11..31' '0,1,2,2,3' '1,3;5,7' '3-5'; do
    printf ' %s' "$spec" > $B/fuzz/corpus-plan/seed$i; i=$((i + 1)) # ' ': 33 layers
done
if [ -x build/reprise ]; then
    m="$SHARED/models/stories260K.gguf"
    build/reprise plan save -m "$m" --repeat-layers 1,3 --name seed -o $B/fuzz/corpus-planfile/seed.json 2>/dev/null
    printf 'Once upon a time there was a little girl. %.0s' $(seq 40) > $B/fuzz/seed-text.txt
    build/reprise perplexity -m "$m" -f $B/fuzz/seed-text.txt -c 64 --kl-divergence-base $B/fuzz/corpus-kld/seed.bin > /dev/null 2>&1
    build/reprise scan -m "$m" -f $B/fuzz/seed-text.txt -c 64 --chunks 1 --max-extra 1 -o $B/fuzz/corpus-scan_csv/seed.csv > /dev/null 2>&1
    find $B/fuzz/corpus-kld -size +512k -delete
fi
for d in tests/fixtures/hf/*/; do
    [ -f "$d/config.json" ] || continue
    { cat "$d/config.json"; [ -f "$d/tokenizer.json" ] && { printf '\0'; cat "$d/tokenizer.json"; }; } \
        > "$B/fuzz/corpus-hf_config/$(basename "$d")"
done
# HTTP: valid bodies of each endpoint (the first byte picks it), request heads
mkdir -p $B/fuzz/corpus-http_body $B/fuzz/corpus-http_head
i=0
while IFS= read -r line; do
    [ -n "$line" ] && printf '%s' "$line" > $B/fuzz/corpus-http_body/seed$i
    i=$((i + 1))
done < tests/fuzz/http_bodies.txt
i=0
for h in 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' \
    'POST /completion HTTP/1.1\r\nContent-Length: 12\r\nContent-Length: 12\r\n\r\n' \
    'POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n' \
    '\r\nPOST /tokenize HTTP/1.1\r\ncontent-length: 3\r\nTransfer-Encoding: chunked\r\n\r\n' \
    "$(printf '\\r\\n%.0s' $(seq 31))T /x HTTP/1.1\r\n\r\n"; do
    printf "$h" > $B/fuzz/corpus-http_head/seed$i
    i=$((i + 1))
done
failed=0
for src in tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    kind=${name#fuzz_}
    if [ -n "${FUZZ_TARGETS:-}" ] && ! [[ " $FUZZ_TARGETS " == *" $kind "* ]]; then
        continue
    fi
    # a target that drives tool code names its files: "fuzz-tools: serve_api common ..."
    tools=$(sed -n 's/^.*fuzz-tools:\(.*\)$/\1/p' "$src" | head -1 | sed 's/\*\///')
    tool_src=$(for t in $tools; do printf 'tools/%s.c ' "$t"; done)
    if ! clang -std=c11 -O1 -g -D_GNU_SOURCE -Iinclude -Isrc -Itools $SAN -fsanitize=fuzzer "$src" $tool_src $B/libreprise.a \
        $(pkg-config --libs libpcre2-8 libmicrohttpd jansson libxxhash libpng libedit) -lm -pthread -o $B/fuzz/$name; then
        echo "FAIL $name: does not build"
        failed=1
        continue
    fi
    art=$B/fuzz/artifacts-$kind
    mkdir -p $B/fuzz/corpus-$kind $B/fuzz/work-$kind "$art"
    [ -n "${FUZZ_BUILD_ONLY:-}" ] && { echo "built $name"; continue; }
    log=$B/fuzz/$name.log
    echo "== $name: ${SECS}s"
    t0=$(date +%s)
    $B/fuzz/$name -max_total_time="$SECS" -rss_limit_mb=4096 -max_len=2000000 -print_final_stats=1 \
        -artifact_prefix="$art/" $B/fuzz/work-$kind $B/fuzz/corpus-$kind > "$log" 2>&1
    rc=$?
    grep -E "stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY|Done" "$log"
    if [ "$rc" -ne 0 ]; then
        failed=1
        repro=$(grep -oE "Test unit written to [^ ]+" "$log" | sed 's/Test unit written to //' | tail -1)
        echo "FAIL $name: the fuzzer exited $rc after $(($(date +%s) - t0)) s (log: $log)"
        if [ -n "$repro" ]; then
            echo "  reproducer: $repro  (re-run: $B/fuzz/$name $repro)"
        else
            echo "  no reproducer was written; the log ends:"
            tail -15 "$log" | sed 's/^/    /'
        fi
    else
        echo "ok $name ($(($(date +%s) - t0)) s)"
    fi
done
exit $failed
