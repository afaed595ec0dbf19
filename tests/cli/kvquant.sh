# Quantized KV caches through the tools: -ctk / -ctv take llama.cpp's cache
# types, the plan's price (--dump-plan) is the smaller cache's, a run and a
# perplexity work with them, and refusals name the type or the layer.
. "$(dirname "$0")/_lib.sh"
Q="$S/models/synth/qwen3-tiny.gguf"
M="$S/models/stories260K.gguf"

# --dump-plan: 10 steps x 8192 positions x 4 KV heads x 32 dims, K and V:
# f16 40 MiB; q8_0 34/64 of it; q4_0 18/64
state_mib() { "$BIN" run -m "$Q" -c 8192 -ctk "$1" -ctv "$2" --repeat-layers 2,4 --dump-plan 2>&1 | sed -n 's/.*state: .*, \([0-9.]*\) MiB for.*/\1/p'; }
f16=$(state_mib f16 f16); q8=$(state_mib q8_0 q8_0); q4=$(state_mib q4_0 q4_0); mix=$(state_mib q8_0 q4_0)
[ "$f16" = "40.00" ] && [ "$q8" = "21.25" ] && [ "$q4" = "11.25" ] && [ "$mix" = "16.25" ] &&
    ok kvq_plan_price || fail kvq_plan_price "f16 $f16, q8_0 $q8, q4_0 $q4, q8_0/q4_0 $mix MiB"

for t in q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl; do
    if "$BIN" run -m "$Q" -p "Once upon a time" -n 6 --temp 0 -ctk "$t" -ctv "$t" -q > "$T/o" 2> "$T/err"; then
        ok "kvq_run_$t"
    else
        fail "kvq_run_$t" "$(tail -1 "$T/err")"
    fi
done
printf 'Once upon a time there was a little girl who liked to play in the park with her friends.\n%.0s' 1 2 3 4 > "$T/t.txt"
"$BIN" perplexity -m "$Q" -f "$T/t.txt" -c 16 -ctk q8_0 -ctv q8_0 > "$T/o" 2> "$T/err" &&
    grep -qi "perplexity\|PPL" "$T/o" "$T/err" && ok kvq_perplexity || fail kvq_perplexity "$(tail -1 "$T/err")"
expect_error kvq_bad_type "q4_K' is not supported" "$BIN" run -m "$Q" -p hi -ctv q4_K
expect_error kvq_bad_head "layer 0 has heads of 8" "$BIN" run -m "$M" -p hi -ctk q8_0
