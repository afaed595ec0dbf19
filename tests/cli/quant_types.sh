# Every quant type reprise reads, against llama.cpp 0c1e570's CPU logits
# (x86 AVX-512 native build, exact attention, F32 cache; goldens by
# tests/reference/make_type_goldens.sh): qwen3-tiny quantized to the type by
# `reprise quantize` (its tensors are llama-quantize's byte for byte), four
# prompts (chat, code, numbers, 289 tokens of prose), every position's top-32
# logits and the whole last row. Each check prints the first position that
# is not bit for bit llama.cpp's; `reprise compare --trace` against
# llama_logits.c's trace names the first tensor (docs/fidelity.md).
. "$(dirname "$0")/_lib.sh"
G=tests/golden/types
SRC="$S/models/synth/qwen3-tiny.gguf"
# TYPE MAX_NMSE MIN_TOP1: the goal is 1e-6 (all but Q2_K are bit for bit on
# AVX-512: docs/fidelity.md's table; F16 and BF16 at every level, their AVX2
# and scalar kernels reproduce the AVX-512 order exactly); the types not there
# carry about twice their measured worst. Without AVX-512, reprise keeps
# vec_dot's order for Q4_K / Q6_K batches (llama.cpp's packed orders are
# AVX-512 kernels): those files carry the old levels there.
K="1e-6 1"
for f in avx512f avx512bw avx512vl avx512dq avx512_vnni avx512vbmi; do
    grep -qw "$f" /proc/cpuinfo 2> /dev/null || K="3e-3 0.8"
done
BOUNDS="${QT_BOUNDS:-F32 1e-6 1
F16 1e-6 1
BF16 1e-6 1
Q4_0 $K
Q4_1 $K
Q5_0 $K
Q5_1 $K
Q8_0 1e-6 1
Q2_K 3e-3 0.9
Q3_K_M $K
Q4_K_M $K
Q5_K_M $K
Q6_K $K
IQ4_NL $K
IQ4_XS $K}"
# a sanitizer tree (SANITIZED, _lib.sh) runs one prompt per type, the
# prompts in turn (every type and prompt still runs there); the release
# tree runs all four per type
ti=0
while read -r t bound top1; do
    ti=$((ti + 1))
    m="$SRC"
    if [ "$t" != F32 ]; then
        m="$T/$t.gguf"
        "$BIN" quantize "$SRC" "$m" "$t" -t 2 > /dev/null 2> "$T/err" \
            || { fail "type_quantize_$t" "$(head -c 300 "$T/err")"; continue; }
    fi
    pj=0
    for p in "$G"/*.prompt.txt; do
        pj=$((pj + 1))
        [ "$SANITIZED" = 1 ] && [ $(((ti + pj) % 4)) != 0 ] && continue
        n=$(basename "$p" .prompt.txt)
        ids=$(tr -s ' \n' ',' < "$G/$n.tokens.txt" | sed 's/^,//; s/,$//')
        "$BIN" run -m "$m" --tokens "$ids" -ctk f32 -ctv f32 -q --dump-logits "$T/o.f32" > /dev/null 2> "$T/err" \
            || { fail "type_logits_${t}_$n" "$(head -c 300 "$T/err")"; continue; }
        if python3 tests/reference/real_golden.py check "$T/o.f32" 512 "$G/$t.$n" "$bound" "$top1" > "$T/out"; then
            ok "type_logits_${t}_$n ($(cat "$T/out"))"
        else
            fail "type_logits_${t}_$n" "$(cat "$T/out") (bounds: nmse $bound, top-1 $top1)"
        fi
    done
done <<< "$BOUNDS"
