#!/usr/bin/env bash
# Memory and time of a layer plan against the physically merged file.
#
# A 24-layer synthetic llama model at Q8_0 is run three ways: no plan, a +8
# layer plan (--repeat-layers 8,16) and the merged file that plan produces
# (reprise merge). For each: weight bytes in the file, peak RSS, KV bytes,
# generation tokens/s. Expected: the plan adds exactly its KV bytes and costs
# about n_eff/n_layer in time; the merged file adds the repeated layers'
# weights as well.
#
#   bench/plan_memory.sh            (BIN=build/reprise, THREADS=2, N=64)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/reprise}
SHARED=${REPRISE_SHARED:-../shared}
THREADS=${THREADS:-2}
N=${N:-64}
REPS=${REPS:-3}
W=$(mktemp -d /tmp/reprise-planbench.XXXXXX)
trap 'rm -rf "$W"' EXIT

echo "synthesizing a 24-layer llama (n_embd 1024, n_ff 2816) at Q8_0 ..." >&2
"$BIN" synth --arch llama --n-embd 1024 --n-layer 24 --n-head 16 --n-ff 2816 \
    --vocab "$SHARED/models/stories260K.gguf" --type q8_0 -o "$W/base.gguf" 2>/dev/null
"$BIN" merge -m "$W/base.gguf" --repeat-layers 8,16 -o "$W/merged.gguf" -q 2>/dev/null
PROMPT="Once upon a time, there was a little girl named Lily. She loved to play outside in the park."

weights() { "$BIN" inspect --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["bytes"])'; }

measure() { # LABEL MODEL [SPEC]
    local label=$1 model=$2 spec=${3:-}
    local best_tps=0 rss=0 kv=""
    for r in $(seq "$REPS"); do
        /usr/bin/time -v "$BIN" run -m "$model" ${spec:+--repeat-layers "$spec"} -p "$PROMPT" -n "$N" --temp 0 \
            -c 512 -t "$THREADS" > /dev/null 2> "$W/err"
        local tps r_kb
        tps=$(sed -n 's/.*generation [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) t\/s).*/\1/p' "$W/err")
        r_kb=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\).*/\1/p' "$W/err")
        kv=$(sed -n 's/.*state: [0-9]* slots ([^)]*), \([0-9.]*\) MiB.*/\1/p' "$W/err")
        best_tps=$(python3 -c "print(max($best_tps, $tps))")
        [ "$r_kb" -gt "$rss" ] && rss=$r_kb
    done
    printf "| %-22s | %10.1f | %10.1f | %8.2f | %8.2f |\n" "$label" \
        "$(python3 -c "print($(weights "$model")/1048576)")" "$(python3 -c "print($rss/1024)")" "$kv" "$best_tps"
    echo "$label $best_tps" >> "$W/tps"
}

echo
echo "threads $THREADS, $N generated tokens, best of $REPS, n_ctx 512"
echo "| run                    | weights MiB | peak RSS MiB | KV MiB | gen t/s |"
echo "|---|---:|---:|---:|---:|"
measure "no plan (24 layers)" "$W/base.gguf"
measure "plan 8,16 (32 steps)" "$W/base.gguf" 8,16
measure "merged file (32 layers)" "$W/merged.gguf"
python3 - "$W/tps" <<'PY'
import sys
t = dict(l.rsplit(' ', 1) for l in open(sys.argv[1]).read().splitlines())
t = {k: float(v) for k, v in t.items()}
base = t["no plan (24 layers)"]
print(f"\ntime ratio plan/no-plan: {base / t['plan 8,16 (32 steps)']:.3f} (n_eff/n_layer = {32/24:.3f}); "
      f"merged/no-plan: {base / t['merged file (32 layers)']:.3f}")
PY
