#!/usr/bin/env bash
# Tokenizer throughput: byte-level BPE (Qwen3 vocabulary, qwen2 pre-tokenizer)
# on War and Peace (3.2 MB of English).
#
# `reprise tokenize` is timed on the whole text and on an empty file; the
# difference is the tokenization (plus printing the ids), the empty run is
# loading the vocabulary (151,936 tokens, 151,387 merges). Best of REPS.
#
#   bench/tokenizer.sh            (BIN=build/reprise, REPS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/reprise}
SHARED=${REPRISE_SHARED:-../shared}
REPS=${REPS:-3}
VOCAB="$SHARED/vocab/qwen3/ggml-vocab-qwen3.gguf"
TEXT="$SHARED/text/war-and-peace.txt"
W=$(mktemp -d /tmp/reprise-tokbench.XXXXXX)
trap 'rm -rf "$W"' EXIT
: > "$W/empty.txt"

best() { # FILE -> best wall seconds of REPS runs
    local b=""
    for _ in $(seq "$REPS"); do
        local t0 t1
        t0=$(date +%s.%N)
        "$BIN" tokenize -m "$VOCAB" -f "$1" --no-bos > "$W/ids.txt"
        t1=$(date +%s.%N)
        b=$(python3 -c "import sys; a=float(sys.argv[1]); b=sys.argv[2]; print(a if b=='' or a<float(b) else b)" \
            "$(python3 -c "print($t1-$t0)")" "$b")
    done
    echo "$b"
}

t_load=$(best "$W/empty.txt")
t_all=$(best "$TEXT")
bytes=$(stat -c %s "$TEXT")
tokens=$(wc -w < "$W/ids.txt")
python3 - "$bytes" "$tokens" "$t_all" "$t_load" <<'PY'
import sys
b, n, ta, tl = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
t = max(ta - tl, 1e-9)
print(f"tokenizer (qwen3 BPE): {b} bytes -> {n} tokens ({b / n:.2f} bytes/token)")
print(f"  vocabulary load {tl * 1e3:.0f} ms; tokenize {t * 1e3:.0f} ms = {b / t / 1e6:.2f} MB/s, {n / t / 1e6:.2f} M tokens/s")
PY
