#!/usr/bin/env bash
# Speed and state of a Qwen3.5-shaped model (gated delta-net + gated attention
# hybrid) with and without a plan.
#
# Synthesizes a Qwen3.5-0.8B-shaped model at Q8_0 (n_embd 1024, 24 layers of
# which every 4th is full attention: 8 heads / 2 kv of 256, rotary 64 in
# sections [11,11,10,0]; delta-net 16 key / 16 value heads of 128, conv 4;
# n_ff 3584; one MTP layer; vocabulary 248320, untied output: 1.03B
# parameters) and runs it with no plan and with --repeat-layers 8,16 (+6
# delta-net and +2 attention steps). For each: prompt and generation tokens/s
# (best of REPS) and the KV + recurrent state bytes for a 4096-token context.
# Expected: time and state grow with the steps (32/24), and the recurrent
# state does not grow with the context.
#
#   bench/qwen35.sh            (BIN=build/reprise, THREADS=2, NP=128, N=32, REPS=2;
#                               MODEL=file.gguf reuses a model this script synthesized)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/reprise}
THREADS=${THREADS:-2}
NP=${NP:-128}
N=${N:-32}
REPS=${REPS:-2}
W=$(mktemp -d /tmp/reprise-q35bench.XXXXXX)
trap 'rm -rf "$W"' EXIT

M=${MODEL:-$W/q35.gguf}
[ -n "${MODEL:-}" ] || echo "synthesizing a Qwen3.5-0.8B-shaped model at Q8_0 (1.1 GB, takes minutes) ..." >&2
[ -n "${MODEL:-}" ] || "$BIN" synth --arch qwen35 --n-embd 1024 --n-layer 24 --n-head 8 --n-head-kv 2 --head-dim 256 --n-ff 3584 \
    --ssm-state 128 --ssm-groups 16 --ssm-heads 16 --ssm-conv 4 --attn-interval 4 --nextn 1 --n-rot 64 \
    --n-vocab 248320 --ctx 262144 --type q8_0 -o "$M" 2>/dev/null
TOK=$(python3 -c "print(','.join(str(300 + i * 7) for i in range($NP)))")

measure() { # LABEL [SPEC]
    local label=$1 spec=${2:-}
    local best_p=0 best_g=0
    for r in $(seq "$REPS"); do
        "$BIN" run -m "$M" ${spec:+--repeat-layers "$spec"} --tokens "$TOK" -n "$N" --temp 0 \
            -c 4096 -t "$THREADS" > /dev/null 2> "$W/err"
        local p g
        p=$(sed -n 's/.*prompt [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) t\/s).*/\1/p' "$W/err")
        g=$(sed -n 's/.*generation [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) t\/s).*/\1/p' "$W/err")
        best_p=$(python3 -c "print(max($best_p, $p))")
        best_g=$(python3 -c "print(max($best_g, $g))")
    done
    local st
    st=$("$BIN" run -m "$M" ${spec:+--repeat-layers "$spec"} -p x -c 4096 --dump-plan 2>&1 |
        sed -n 's/.*state: \([0-9]*\) slots ([^)]*), \([0-9.]*\) MiB.*/\1 steps, \2 MiB/p')
    printf "| %-22s | %8.2f | %8.2f | %s |\n" "$label" "$best_p" "$best_g" "$st"
    echo "$label $best_p $best_g" >> "$W/tps"
}

echo
echo "threads $THREADS, prompt $NP tokens, $N generated, best of $REPS; state for n_ctx 4096 (F16 KV)"
echo "| run                    | prompt t/s | gen t/s | KV + recurrent state |"
echo "|---|---:|---:|---|"
measure "no plan (24 layers)"
measure "plan 8,16 (32 steps)" 8,16
python3 - "$W/tps" <<'PY'
import sys
rows = [l.rsplit(' ', 2) for l in open(sys.argv[1]).read().splitlines()]
(_, p0, g0), (_, p1, g1) = rows
print(f"\ntime ratio plan/no-plan: prompt {float(p0) / float(p1):.3f}, generation {float(g0) / float(g1):.3f} "
      f"(n_eff/n_layer = {32 / 24:.3f})")
PY
