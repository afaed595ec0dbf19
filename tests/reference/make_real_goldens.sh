#!/usr/bin/env bash
# The goldens of tests/cli/real_models.sh, from llama.cpp 0c1e570 built
# natively (GGML_NATIVE=ON, x86 AVX-512) with exact attention (no flash
# attention, F32 KV cache), n_ubatch 512: token ids by llama-tokenize, logits
# of every position and a 64-token greedy continuation by llama_logits.c,
# tokenizer vectors of hard strings by llama-tokenize. Not part of make test
# (ONLY_PLAN=1: only the plan-vs-merged-file goldens).
#   LLAMA=/work/peer/build-native/bin tests/reference/make_real_goldens.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA=${LLAMA:-/work/peer/build-native/bin}
SRC=${LLAMA_SRC:-/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp}
MD=${REPRISE_MODELS:-$HOME/.cache/reprise}
G=tests/golden/real
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cc -O2 -I"$SRC/include" -I"$SRC/ggml/include" tests/reference/llama_logits.c -L"$LLAMA" \
    -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA" -o "$T/llama_logits"
ids() { # MODEL TEXT: llama-tokenize's ids, space separated
    "$LLAMA/llama-tokenize" -m "$1" -p "$2" --ids --log-disable 2>/dev/null | tr -d '[],' | tr -s ' '
}
golden() { # NAME MODEL N_VOCAB TEXT
    local name=$1 model=$2 nv=$3 text=$4
    ids "$model" "$text" > "$G/$name.tokens.txt"
    GREEDY=64 "$T/llama_logits" "$model" "$G/$name.tokens.txt" "$T/$name.f32" 512 2 \
        > "$G/$name.greedy.txt" 2>/dev/null
    python3 tests/reference/real_golden.py write "$T/$name.f32" "$nv" "$G/$name"
    echo "$name: $(wc -w < "$G/$name.tokens.txt") tokens"
}
SMOL="$MD/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA="$MD/gemma-3-270m-q4_k_m.gguf"
CHAT=$'<|im_start|>user\nWhat is the capital of France? Answer in one short sentence.<|im_end|>\n<|im_start|>assistant\n'
CODE=$'def fib(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n# fib(10) = 55, fib(20) = 6765, 3.14159 * 2 = 6.28318\nprint([fib(i) for i in range(12)])\n'
PROSE="The history of the city begins in the year 1200, when a small group of traders settled on the bank of the river. Over the next three centuries the settlement grew into a market town of some 4,000 people, famous for its wool, its bridge and its"
# a plan against the merged file: llama.cpp runs the file `reprise merge`
# writes with the repeated layers materialized (reprise runs the plan
# --repeat-layers 10,14 on the original; real_models.sh)
"${BIN:-build/reprise}" merge -m "$SMOL" --repeat-layers 10,14 -o "$T/smol-rys.gguf" > /dev/null 2>&1
golden smollm2-rys-chat "$T/smol-rys.gguf" 49152 "$CHAT"
golden smollm2-rys-code "$T/smol-rys.gguf" 49152 "$CODE"
# the chat prompt and llama.cpp's 64-token greedy continuation as one batch
# (llama.cpp's one-token decodes differ from its batches in the last bits)
G2=$G/smollm2-rys-cont
cat "$G/smollm2-rys-chat.tokens.txt" "$G/smollm2-rys-chat.greedy.txt" | tr -s ' \n' ' ' > "$G2.tokens.txt"
"$T/llama_logits" "$T/smol-rys.gguf" "$G2.tokens.txt" "$T/cont.f32" 512 2 > /dev/null 2>&1
python3 tests/reference/real_golden.py write "$T/cont.f32" 49152 "$G2"
[ "${ONLY_PLAN:-0}" = 1 ] && exit 0
golden smollm2-chat "$SMOL" 49152 "$CHAT"
golden smollm2-code "$SMOL" 49152 "$CODE"
golden gemma3-prose "$GEMMA" 262144 "$PROSE"
golden gemma3-code "$GEMMA" 262144 "$CODE"
# tokenizer vectors: one hard string a line (\n written as \\n), its ids
while IFS= read -r line; do
    s=$(printf '%b' "$line")
    echo "$(ids "$SMOL" "$s")" >> "$T/smol.tok"
    echo "$(ids "$GEMMA" "$s")" >> "$T/gemma.tok"
done < "$G/hard-strings.txt"
mv "$T/smol.tok" "$G/smollm2.hard.ids"
mv "$T/gemma.tok" "$G/gemma3.hard.ids"
