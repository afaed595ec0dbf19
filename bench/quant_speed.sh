#!/usr/bin/env bash
# Quantized inference speed on a Qwen3-0.6B-shaped model (28 layers, n_embd 1024,
# 16/8 heads of 128, n_ff 3072, the Qwen3 vocabulary, tied output), F16, Q8_0 and
# Q4_K_M, against llama.cpp's published figures for this shape (../shared/PERF.md:
# b10587, 2 threads). A memory read-bandwidth probe runs in the same script, so
# the generation roofline fraction is measured at the same moment.
#
#   BUILD=build THREADS=2 REPS=3 bench/quant_speed.sh
#   LLAMA_BENCH=/path/to/llama-bench bench/quant_speed.sh
#
# With LLAMA_BENCH, llama.cpp's llama-bench runs on the same files in the same
# script (interleaved with reprise, model by model) and is the baseline; the
# published figures are the baseline otherwise (another machine: compare the
# roofline fractions, not the ratios).
#
# Models are synthesized once into $BENCH_DIR (default /tmp/reprise-bench):
# ~1.2 GB F16 + 0.6 GB Q8_0 + 0.4 GB Q4_K_M (quantized from the F16 one).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN="$BUILD/reprise"
S=${REPRISE_SHARED:-../shared}
OUT=${BENCH_DIR:-/tmp/reprise-bench}
T=${THREADS:-2}
R=${REPS:-3}
[ -x "$BIN" ] || { echo "no $BIN (make BUILD=$BUILD)"; exit 1; }
mkdir -p "$OUT"
shape="--arch qwen3 --n-embd 1024 --n-layer 28 --n-head 16 --n-head-kv 8 --head-dim 128 --n-ff 3072 --tied
       --vocab $S/vocab/qwen3/ggml-vocab-qwen3.gguf"
[ -s "$OUT/f16.gguf" ] || "$BIN" synth $shape --type f16 -o "$OUT/f16.gguf"
[ -s "$OUT/q8_0.gguf" ] || "$BIN" synth $shape --type q8_0 -o "$OUT/q8_0.gguf"
[ -s "$OUT/q4_k_m.gguf" ] || "$BIN" quantize -t "$T" "$OUT/f16.gguf" "$OUT/q4_k_m.gguf" Q4_K_M

echo "== machine"
grep -m1 'model name' /proc/cpuinfo || true
echo "threads: $T   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
bw=$("$BIN" bench --bandwidth -t "$T" | awk '{print $2}')
echo "memory read bandwidth: $bw GB/s ($T threads)"

echo "== reprise bench -p 512 -n 128 -t $T -r $R${LLAMA_BENCH:+, then llama-bench with the same flags}"
for m in f16 q8_0 q4_k_m; do
    "$BIN" bench -m "$OUT/$m.gguf" -p 512 -n 128 -t "$T" -r "$R" -q | tee "$OUT/$m.txt"
    if [ -n "${LLAMA_BENCH:-}" ]; then
        "$LLAMA_BENCH" -m "$OUT/$m.gguf" -p 512 -n 128 -t "$T" -r "$R" -o md 2>/dev/null | grep '^|' \
            | tee "$OUT/$m.llama.txt"
    fi
done

if [ -n "${LLAMA_BENCH:-}" ]; then
    echo "== against llama.cpp ($LLAMA_BENCH, measured above on this machine)"
else
    echo "== against llama.cpp (PERF.md; llama.cpp F16 prompt figure is pp64)"
fi
printf '%-8s %12s %8s %12s %8s %10s %10s\n' type pp512_t/s vs_llama tg128_t/s vs_llama tg_GB/s roofline
for m in f16 q8_0 q4_k_m; do
    case $m in f16) lpp=300 ltg=33 ;; q8_0) lpp=251 ltg=49.3 ;; q4_k_m) lpp=296 ltg=69.4 ;; esac
    if [ -n "${LLAMA_BENCH:-}" ]; then
        lpp=$(awk -F'|' '/pp512/ {split($8, a, " "); print a[1]}' "$OUT/$m.llama.txt")
        ltg=$(awk -F'|' '/tg128/ {split($8, a, " "); print a[1]}' "$OUT/$m.llama.txt")
    fi
    # size (MiB) and the two rows' mean t/s
    mib=$(awk -F'|' '/pp512/ {gsub(/ MiB| /, "", $3); print $3}' "$OUT/$m.txt")
    pp=$(awk -F'|' '/pp512/ {split($11, a, " "); print a[1]}' "$OUT/$m.txt")
    tg=$(awk -F'|' '/tg128/ {split($11, a, " "); print a[1]}' "$OUT/$m.txt")
    awk -v m="$m" -v pp="$pp" -v tg="$tg" -v lpp="$lpp" -v ltg="$ltg" -v mib="$mib" -v bw="$bw" 'BEGIN {
        gbs = tg * mib * 1048576 / 1e9   # every weight byte is read once per generated token
        printf "%-8s %12.2f %7.2fx %12.2f %7.2fx %10.1f %9.0f%%\n", m, pp, pp / lpp, tg, tg / ltg, gbs, 100 * gbs / bw }'
done
echo "targets: generation >= 1.10x and prompt >= 1.25x llama.cpp at Q8_0 and Q4_K_M"
