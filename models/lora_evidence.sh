#!/bin/sh
# docs/lora.md's table: deltas on the best plain block of the trained demo
# llama, on the held-out last 5% of War and Peace (models/war-and-peace-heldout.txt):
# base; the block --repeat-layers I,J; the same with the residual scale of its
# second pass swept ('I,J@s=F'); the same with a rank-8 junction LoRA trained
# by train/lora_junction.py (a PEFT layer_replication adapter, converted with
# reprise convert --lora). PPL and KLD against the base (reprise perplexity,
# llama.cpp's method: chunks of 256 tokens, the second half scored), and the
# memory of each: reprise (the base file once + adapter bytes) vs the
# physically merged file (reprise merge; a LoRA merged into the repeated
# layer's copy costs the same file).
#
# usage: models/lora_evidence.sh JUNCTION.gguf [I,J] [SCALES]   (from the repository root)
set -eu
R=${REPRISE:-build/reprise}
TEXT=models/war-and-peace-heldout.txt
M=models/demo-llama.gguf
LORA=$1
B=${2:-5,6}
SCALES=${3:-"0.85 0.707 0.5"}
C=256
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
row() { # label args...
    label=$1
    shift
    "$R" perplexity -q -m "$M" -f "$TEXT" -c $C --kl-divergence-base "$T/base.kld" --kl-divergence "$@" \
        >"$T/out" 2>&1 || { cat "$T/out" >&2; exit 1; }
    awk -v l="$label" '/^Mean PPL\(Q\) / {ppl=$4; e=$6}
         /^Mean    KLD:/ {kld=$3; ke=$5}
         /^Same top p:/ {top=$4; te=$6}
         END {printf "| %s | %s ± %s | %s ± %s | %s ± %s %% |", l, ppl, e, kld, ke, top, te}' "$T/out"
}
"$R" perplexity -q -m "$M" -f "$TEXT" -c $C --kl-divergence-base "$T/base.kld" >"$T/out" 2>&1
base=$(sed -n 's/^Final estimate: PPL = \(.*\)$/\1/p' "$T/out")
"$R" merge -q -m "$M" --repeat-layers "$B" -o "$T/merged.gguf"
mb=$(stat -c %s "$M")
merged=$(stat -c %s "$T/merged.gguf")
lb=$("$R" run -m "$M" --lora "$LORA" --dump-plan | sed -n 's/.*extra weight bytes: \([0-9]*\).*/\1/p')
echo "base (no plan): PPL $base"
echo
echo "| plan | PPL | mean KLD vs base | same top token | weight bytes, reprise | weight bytes, physical merge |"
echo "|---|---:|---:|---:|---:|---:|"
echo "$(row "--repeat-layers $B" --repeat-layers "$B") $mb | $merged |"
for s in $SCALES; do
    echo "$(row "--repeat-layers $B@s=$s" --repeat-layers "$B@s=$s") $mb | $merged |"
done
echo "$(row "--repeat-layers $B + junction LoRA (r 8)" --lora "$LORA") $((mb + lb)) | $merged |"
