#!/usr/bin/env bash
# The goldens of tests/cli/quant_types.sh: llama.cpp 0c1e570 built natively
# (GGML_NATIVE=ON, x86 AVX-512 with VNNI), exact attention (no flash
# attention, F32 KV cache), n_ubatch 512, 2 threads, on qwen3-tiny quantized
# to each type. The files are written by `reprise quantize` (their tensors
# are byte for byte llama-quantize's: checked below when CHECK_QUANTIZE=1),
# so the test regenerates the same files without llama.cpp. Per type and
# prompt: token ids by llama-tokenize, the top-32 logits of every position
# and the whole last row (real_golden.py write, K 32). Not part of make test.
#   LLAMA=/work/peer/build-native/bin tests/reference/make_type_goldens.sh [TYPE...]
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA=${LLAMA:-/work/peer/build-native/bin}
SRC=${LLAMA_SRC:-/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp}
BIN=${BIN:-build/reprise}
SRCM=${REPRISE_SHARED:-../shared}/models/synth/qwen3-tiny.gguf
G=tests/golden/types
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cc -O2 -I"$SRC/include" -I"$SRC/ggml/include" tests/reference/llama_logits.c -L"$LLAMA" \
    -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA" -o "$T/llama_logits"
TYPES=("$@")
[ ${#TYPES[@]} -gt 0 ] || TYPES=(F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K IQ4_NL IQ4_XS)
for p in tests/golden/types/*.prompt.txt; do
    n=$(basename "$p" .prompt.txt)
    "$LLAMA/llama-tokenize" -m "$SRCM" -f "$p" --ids --log-disable 2>/dev/null \
        | tr -d '[],' | tr -s ' ' > "$G/$n.tokens.txt"
done
for t in "${TYPES[@]}"; do
    m="$SRCM"
    if [ "$t" != F32 ]; then
        m="$T/$t.gguf"
        "$BIN" quantize "$SRCM" "$m" "$t" -t 2 > /dev/null
        if [ "${CHECK_QUANTIZE:-0}" = 1 ]; then
            "$LLAMA/llama-quantize" "$SRCM" "$T/l.gguf" "$t" 2 > /dev/null 2>&1
            "${PY:-/work/pyref/bin/python}" tests/reference/gguf_tensors_equal.py "$m" "$T/l.gguf"
        fi
    fi
    for p in tests/golden/types/*.prompt.txt; do
        n=$(basename "$p" .prompt.txt)
        "$T/llama_logits" "$m" "$G/$n.tokens.txt" "$T/o.f32" 512 2 > /dev/null 2>&1
        python3 tests/reference/real_golden.py write "$T/o.f32" 512 "$G/$t.$n" 32
    done
    echo "$t: done"
done
