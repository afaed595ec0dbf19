#!/usr/bin/env bash
# reprise on a Vulkan device against llama.cpp's Vulkan backend, on the same
# files, in one script (issue 23):
#
#   pp512 and tg128 at Q4_K_M, Q8_0 and F16 of a Qwen3-0.6B shape (28 layers,
#   n_embd 1024, 16/8 heads of 128, n_ff 3072, synthesized) and of the real
#   models of the fidelity issue (SmolLM2-135M-Instruct Q4_1, Gemma 3 270M
#   Q4_K_M, when present in ~/.cache/reprise);
#   the plan cost: --repeat-layers 10,18 on the 28-layer shape (n_eff 36):
#   time ratio against n_eff / n_layer = 1.2857, device memory growth (KV only,
#   0 extra weight bytes) from reprise's boot log.
#
# Targets: tg >= 1.0x llama.cpp Vulkan, pp >= 0.8x, plan time ratio within 3 %
# of n_eff / n_layer, 0 extra weight bytes.
#
#   DEVICE=vulkan0 REPS=3 LLAMA_BENCH=/path/to/llama-bench bench/gpu.sh
#
# LLAMA_BENCH must be a llama-bench built with -DGGML_VULKAN=ON (llama-cpp-
# python's vendored tree: cmake -B build-vk -DGGML_VULKAN=ON && cmake --build
# build-vk --target llama-bench); without it only reprise's figures print.
# Build both engines before taking the GPU so its time goes to measuring.
# The device reprise uses is DEVICE (vulkan0); llama.cpp takes -dev
# Vulkan0 and -ngl 99. Models are synthesized once into $BENCH_DIR
# (default /tmp/reprise-bench, shared with quant_speed.sh).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN="$BUILD/reprise"
S=${REPRISE_SHARED:-../shared}
OUT=${BENCH_DIR:-/tmp/reprise-bench}
R=${REPS:-3}
DEV=${DEVICE:-vulkan0}
LDEV=${LLAMA_DEVICE:-Vulkan0}
[ -x "$BIN" ] || { echo "no $BIN (make BUILD=$BUILD)"; exit 1; }
mkdir -p "$OUT"
shape="--arch qwen3 --n-embd 1024 --n-layer 28 --n-head 16 --n-head-kv 8 --head-dim 128 --n-ff 3072 --tied
       --vocab $S/vocab/qwen3/ggml-vocab-qwen3.gguf"
[ -s "$OUT/f16.gguf" ] || "$BIN" synth $shape --type f16 -o "$OUT/f16.gguf"
[ -s "$OUT/q8_0.gguf" ] || "$BIN" synth $shape --type q8_0 -o "$OUT/q8_0.gguf"
[ -s "$OUT/q4_k_m.gguf" ] || "$BIN" quantize "$OUT/f16.gguf" "$OUT/q4_k_m.gguf" Q4_K_M

models="$OUT/q4_k_m.gguf $OUT/q8_0.gguf $OUT/f16.gguf"
for f in "$HOME/.cache/reprise/SmolLM2-135M-Instruct.Q4_1.gguf" "$HOME/.cache/reprise/gemma-3-270m-q4_k_m.gguf"; do
    [ -s "$f" ] && models="$models $f"
done

echo "== devices"
"$BIN" bench --list-devices
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# t/s of test $2 (pp512 / tg128) in a markdown table file $1
tps() { awk -F'|' -v t="$2" '$0 ~ t {split($(NF-1), a, " "); print a[1]; exit}' "$1"; }

echo "== reprise bench -p 512 -n 128 -r $R -dev $DEV${LLAMA_BENCH:+, then llama-bench -ngl 99 -dev $LDEV}"
for m in $models; do
    b=$(basename "$m" .gguf)
    "$BIN" bench -m "$m" -p 512 -n 128 -r "$R" -dev "$DEV" 2> "$OUT/$b.gpu.err" | tee "$OUT/$b.gpu.txt"
    grep -E "^device:|on the device:" "$OUT/$b.gpu.err" || true
    if [ -n "${LLAMA_BENCH:-}" ]; then
        "$LLAMA_BENCH" -m "$m" -p 512 -n 128 -r "$R" -ngl 99 -dev "$LDEV" -o md 2>/dev/null | grep '^|' \
            | tee "$OUT/$b.gpu.llama.txt"
    fi
done

echo "== against llama.cpp's Vulkan backend"
printf '%-36s %12s %8s %12s %8s\n' model pp512_t/s vs_llama tg128_t/s vs_llama
for m in $models; do
    b=$(basename "$m" .gguf)
    pp=$(tps "$OUT/$b.gpu.txt" pp512) tg=$(tps "$OUT/$b.gpu.txt" tg128)
    lpp=- ltg=- rpp=- rtg=-
    if [ -n "${LLAMA_BENCH:-}" ] && [ -s "$OUT/$b.gpu.llama.txt" ]; then
        lpp=$(tps "$OUT/$b.gpu.llama.txt" pp512) ltg=$(tps "$OUT/$b.gpu.llama.txt" tg128)
        rpp=$(awk -v a="$pp" -v b="$lpp" 'BEGIN { printf "%.2fx", a / b }')
        rtg=$(awk -v a="$tg" -v b="$ltg" 'BEGIN { printf "%.2fx", a / b }')
    fi
    printf '%-36s %12s %8s %12s %8s\n' "$b" "$pp" "$rpp" "$tg" "$rtg"
done
echo "(targets: pp >= 0.80x, tg >= 1.00x)"

echo "== plan cost: --repeat-layers 10,18 on 28 layers (n_eff 36: 36/28 = 1.2857)"
m="$OUT/q4_k_m.gguf"
for tag in id rys; do
    plan=""
    [ $tag = rys ] && plan="--repeat-layers 10,18"
    "$BIN" bench -m "$m" -p 512 -n 128 -r "$R" -dev "$DEV" $plan > "$OUT/plan-$tag.txt" 2> "$OUT/plan.err"
    grep "on the device:" "$OUT/plan.err" | sed "s/^/$tag: /"
done
python3 - "$OUT" <<'PY'
import re, sys
d = sys.argv[1]
def tps(f, t):
    for line in open(f):
        if '|' in line and t in line:
            return float(line.split('|')[-2].split()[0])
for t in ('pp512', 'tg128'):
    a, b = tps(d + '/plan-id.txt', t), tps(d + '/plan-rys.txt', t)
    r = a / b
    print(f"{t}: identity {a:.2f} t/s, rys {b:.2f} t/s: time ratio {r:.4f} "
          f"({100 * (r / (36 / 28) - 1):+.2f} % from n_eff/n_layer; target within 3 %)")
PY
echo "(memory: the two 'on the device' lines above: weights equal, state x 36/28)"
