#!/bin/sh
# The evidence tables of models/README.md, measured on the trained demo models
# with the held-out last 5% of War and Peace (models/war-and-peace-heldout.txt):
#
#   1. layer plans on demo-llama: PPL, KLD and same-top-token rate against the
#      model without a plan, for the identity plan and one- and two-layer
#      repeats at the start, middle and end of the stack;
#   2. quantization of demo-llama: Q8_0, Q6_K, Q5_K_M, Q4_K_M against F16;
#   3. demo-zamba2, adapter form (shared blocks stored once) against the merged
#      form (each visit's adapter baked into its own full matrices): tensors,
#      bytes, PPL, KLD, same top token, greedy text. Needs the HF checkpoint
#      (train/out/zamba2, see models/README.md) to write the merged form.
#
# usage: models/evidence.sh [ZAMBA2_HF_DIR]      (from the repository root)
# Every number comes from `reprise perplexity` (llama.cpp's method: chunks of
# 256 tokens, the second half of each scored). Takes a few minutes on 2 cores.
set -eu
R=${REPRISE:-build/reprise}
TEXT=models/war-and-peace-heldout.txt
LLAMA=models/demo-llama.gguf
ZAMBA=models/demo-zamba2.gguf
ZHF=${1:-train/out/zamba2}
C=256
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# "PPL KLD same-top" of one model/plan against a base file
row() { # base.kld model args...
    base=$1 model=$2
    shift 2
    "$R" perplexity -q -m "$model" -f "$TEXT" --kl-divergence-base "$base" --kl-divergence "$@" \
        >"$T/out" 2>&1 || { cat "$T/out" >&2; exit 1; }
    awk '/^Mean PPL\(Q\) / {ppl=$4; e=$6}
         /^Mean    KLD:/ {kld=$3; ke=$5}
         /^99.0%   KLD:/ {k99=$3}
         /^Same top p:/ {top=$4; te=$6}
         END {printf "%s ± %s | %s ± %s | %s | %s ± %s %%", ppl, e, kld, ke, k99, top, te}' "$T/out"
}
base() { # model out.kld args...
    model=$1 out=$2
    shift 2
    "$R" perplexity -q -m "$model" -f "$TEXT" -c $C --kl-divergence-base "$out" "$@" >"$T/out" 2>&1 ||
        { cat "$T/out" >&2; exit 1; }
    sed -n 's/^Final estimate: PPL = \(.*\)$/\1/p' "$T/out"
}

echo "## Layer plans on $LLAMA (F16)"
echo
printf 'base (no plan): PPL %s\n\n' "$(base $LLAMA "$T/llama.kld")"
echo "| plan | layers run | PPL | mean KLD | KLD p99 | same top token |"
echo "|---|---:|---:|---:|---:|---:|"
n=$("$R" inspect "$LLAMA" | awk '$1 == "llama.block_count" {print $3}')
echo "| identity (--layer-map 0..$((n - 1))) | $n | $(row "$T/llama.kld" $LLAMA --layer-map "0..$((n - 1))") |"
for spec in 0,1 1,2 0,2 2,4 5,6 6,7 5,7 4,8 9,11 $((n - 2)),$n $((n - 1)),$n; do
    lo=${spec%,*} hi=${spec#*,}
    echo "| --repeat-layers $spec | $((n + hi - lo)) | $(row "$T/llama.kld" $LLAMA --repeat-layers "$spec") |"
done
echo

echo "## Quantization of $LLAMA against F16"
echo
echo "| type | file MiB | PPL | mean KLD | KLD p99 | same top token |"
echo "|---|---:|---:|---:|---:|---:|"
for q in Q8_0 Q6_K Q5_K_M Q4_K_M; do
    "$R" quantize "$LLAMA" "$T/q.gguf" "$q" >"$T/out" 2>&1 || { cat "$T/out" >&2; exit 1; }
    mib=$(awk -v b="$(stat -c %s "$T/q.gguf")" 'BEGIN {printf "%.2f", b / 1048576}')
    echo "| $q | $mib | $(row "$T/llama.kld" "$T/q.gguf") |"
done
echo "| F16 | $(awk -v b="$(stat -c %s $LLAMA)" 'BEGIN {printf "%.2f", b / 1048576}') | (base) | 0 | 0 | 100 % |"
echo

echo "## $ZAMBA: adapter form against the merged form"
echo
if [ ! -f "$ZHF/config.json" ]; then
    echo "(skipped: no HF checkpoint at $ZHF to write the merged form from)"
    exit 0
fi
"$R" convert -q "$ZHF" -o "$T/merged.gguf" --outtype f16 --zamba2-merged
ppl_a=$(base $ZAMBA "$T/adapter.kld")
ntens() { "$R" inspect "$1" | sed -n 's/^tensors (\([0-9]*\)):$/\1/p'; }
gen() {
    "$R" run -m "$1" -p "Prince Andrew looked at" -n 40 --temp 0 2>/dev/null | tr '\n' ' '
}
echo "| form | tensors | file bytes | PPL | mean KLD vs adapter | same top token |"
echo "|---|---:|---:|---:|---:|---:|"
echo "| adapter (shared blocks once) | $(ntens $ZAMBA) | $(stat -c %s $ZAMBA) | $ppl_a | (base) | 100 % |"
r=$(row "$T/adapter.kld" "$T/merged.gguf")
echo "| merged (--zamba2-merged) | $(ntens "$T/merged.gguf") | $(stat -c %s "$T/merged.gguf") | $(echo "$r" | cut -d'|' -f1) | $(echo "$r" | cut -d'|' -f2) | $(echo "$r" | cut -d'|' -f4) |"
echo
echo "greedy, adapter form: $(gen $ZAMBA)"
echo
echo "greedy, merged form:  $(gen "$T/merged.gguf")"
