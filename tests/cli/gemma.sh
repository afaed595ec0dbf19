# Gemma 3 (and 2): interleaved sliding-window attention, its plans, and the
# physically merged files that must equal them bit for bit.
. "$(dirname "$0")/_lib.sh"
G="$S/models/synth/gemma3-tiny.gguf"
PF="$S/golden/synth/p1.prompt.txt" # 34 tokens (with BOS): longer than the window of 8

# greedy text of llama.cpp's golden, with an F32 cache; -b 4 makes each local
# layer's KV a ring of 11 cells that the 66 positions wrap several times
for b in 512 4; do
    out=$("$BIN" run -m "$G" -p "$(cat "$PF")" -n 32 --temp 0 -ctk f32 -ctv f32 -b "$b" -q 2>"$T/err")
    [ "$out" = "$(tail -n +2 "$S/golden/synth/gemma3-tiny.p1.greedy.txt")" ] && ok "gemma3_golden_text_b$b" ||
        fail "gemma3_golden_text_b$b" "$(tail -1 "$T/err") $out"
done

# merged file == runtime plan, bit for bit: prompt logits (-c 64 -b 4: the rings
# wrap) and 24 generated tokens
check_merge() { # NAME MODEL FLAG SPEC
    local name=$1 model=$2 flag=$3 spec=$4
    "$BIN" merge -m "$model" $flag "$spec" -o "$T/merged.gguf" -q 2>"$T/err" || { fail "$name" "merge: $(tail -1 "$T/err")"; return; }
    local common=(-p "$(cat "$PF")" -c 64 -b 4 -ctk f32 -ctv f32 -q)
    "$BIN" run -m "$T/merged.gguf" "${common[@]}" --dump-logits "$T/a.f32" 2>"$T/err" || { fail "$name" "run merged: $(tail -1 "$T/err")"; return; }
    "$BIN" run -m "$model" $flag "$spec" "${common[@]}" --dump-logits "$T/b.f32" 2>"$T/err" || { fail "$name" "run plan: $(tail -1 "$T/err")"; return; }
    cmp -s "$T/a.f32" "$T/b.f32" || { fail "$name" "prompt logits differ between the merged file and the runtime plan"; return; }
    local ga gb
    ga=$("$BIN" run -m "$T/merged.gguf" "${common[@]}" -n 24 --temp 0 2>/dev/null)
    gb=$("$BIN" run -m "$model" $flag "$spec" "${common[@]}" -n 24 --temp 0 2>/dev/null)
    [ -n "$ga" ] && [ "$ga" = "$gb" ] && ok "$name" || fail "$name" "generated text differs: '$ga' vs '$gb'"
}
check_merge merge_gemma3_global_and_local "$G" --repeat-layers 3,6 # 0..5 | 3 4 5: locals and the global again
check_merge merge_gemma3_global "$G" --repeat-layers 5,6          # the global layer twice
check_merge merge_gemma3_local "$G" --repeat-layers 1,3           # local layers only
check_merge merge_gemma3_map "$G" --layer-map "0..5,5,0,4"

# the merged file says which of its layers are local (the fixed 5+1 period would
# make merged layer 8, a repeat of global layer 5, local)
"$BIN" merge -m "$G" --repeat-layers 3,6 -o "$T/m.gguf" -q 2>/dev/null
"$BIN" inspect "$T/m.gguf" | grep -q 'gemma3.attention.sliding_window_pattern *arr\[bool,9\] *\[true, true, true, true, true, false, true, true, \.\.\. 1 more\]' &&
    ok merged_pattern_key || fail merged_pattern_key "$("$BIN" inspect "$T/m.gguf" | grep sliding_window_pattern)"
"$BIN" run -m "$T/m.gguf" --dump-plan 2>&1 | grep -q "steps (eff:src type): 0:0 swa, 1:1 swa, 2:2 swa, 3:3 swa, 4:4 swa, 5:5 attn, 6:6 swa, 7:7 swa, 8:8 attn" &&
    ok merged_layer_types || fail merged_layer_types "$("$BIN" run -m "$T/m.gguf" --dump-plan 2>&1 | grep steps)"

# --dump-plan: each step's type, what the types are, what the rings save
"$BIN" run -m "$G" --repeat-layers 3,6 -c 4096 --dump-plan >"$T/plan" 2>&1
grep -q "steps (eff:src type): 0:0 swa, 1:1 swa, 2:2 swa, 3:3 swa, 4:4 swa, 5:5 attn | 6:3 swa, 7:4 swa, 8:5 attn" "$T/plan" &&
    grep -q "swa  = sliding window of 8, rope base 10000, KV ring of 519 cells per sequence" "$T/plan" &&
    grep -q "attn = full causal attention, rope base 1e+06, KV 4096 cells per sequence" "$T/plan" &&
    grep -q "sliding-window rings: 5.77 MiB of state instead of 18.00 MiB" "$T/plan" &&
    ok dump_plan_types || fail dump_plan_types "$(cat "$T/plan")"

# gemma2 and a synthesized gemma3: both load, run, and merge bit for bit
"$BIN" synth --arch gemma2 --n-embd 64 --n-layer 6 --n-head 4 --n-head-kv 2 --n-ff 128 --window 6 --vocab "$S/models/stories260K.gguf" -o "$T/g2.gguf" 2>/dev/null
check_merge merge_gemma2 "$T/g2.gguf" --repeat-layers 2,5
"$BIN" synth --arch gemma3 --n-embd 64 --n-layer 8 --n-head 4 --n-head-kv 1 --head-dim 32 --n-ff 128 --window 5 --type q8_0 --vocab "$S/models/stories260K.gguf" -o "$T/g3.gguf" 2>/dev/null
check_merge merge_gemma3_synth_q8 "$T/g3.gguf" --repeat-layers "4,7;1,2"

