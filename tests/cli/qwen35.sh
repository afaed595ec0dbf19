# qwen35 (Qwen3.5 hybrid): greedy text vs llama.cpp, plans over recurrent and
# attention layers == physically merged files bit for bit, the MTP head in
# --dump-plan, synth.
. "$(dirname "$0")/_lib.sh"
M="$S/models/synth/qwen35-tiny.gguf"
V="$S/models/stories260K.gguf"
P="$(cat "$S/golden/synth/p1.prompt.txt")"

out=$("$BIN" run -m "$M" -p "$P" -n 32 --temp 0 -ctk f32 -ctv f32 2>/dev/null)
[ "$out" = "$(tail -n +2 "$S/golden/synth/qwen35-tiny.p1.greedy.txt")" ] && ok qwen35_greedy_text || fail qwen35_greedy_text "got: $(echo "$out" | head -c 200)"

check_merge() { # NAME SPEC-FLAG SPEC
    local name=$1 flag=$2 spec=$3
    "$BIN" merge -m "$M" $flag "$spec" -o "$T/merged.gguf" -q 2> "$T/err" || { fail "$name" "merge: $(tail -1 "$T/err")"; return; }
    "$BIN" run -m "$T/merged.gguf" -p "$P" --dump-logits "$T/a.f32" -ctk f32 -ctv f32 -q 2> "$T/err" || { fail "$name" "run merged: $(tail -1 "$T/err")"; return; }
    "$BIN" run -m "$M" $flag "$spec" -p "$P" --dump-logits "$T/b.f32" -ctk f32 -ctv f32 -q 2> "$T/err" || { fail "$name" "run plan: $(tail -1 "$T/err")"; return; }
    if cmp -s "$T/a.f32" "$T/b.f32"; then ok "$name"; else fail "$name" "logits differ between the merged file and the runtime plan"; fi
}
check_merge qwen35_merge_recurrent --repeat-layers 1,2   # a delta-net layer
check_merge qwen35_merge_attention --repeat-layers 3,4   # a full-attention layer
check_merge qwen35_merge_both --repeat-layers 2,5        # both kinds
check_merge qwen35_merge_map --layer-map "0..3,3,2,4..7"

# the merged file spells each layer's kind out; the head stays after the trunk
"$BIN" merge -m "$M" --repeat-layers 2,5 -o "$T/m.gguf" -q 2>/dev/null
"$BIN" inspect --json --full "$T/m.gguf" > "$T/m.json" 2>/dev/null
python3 - "$T/m.json" <<'EOF' && ok qwen35_merged_recurrent_layers || fail qwen35_merged_recurrent_layers "$(grep -o 'recurrent_layers.\{0,200\}' "$T/m.json")"
import json, sys
kv = {o["key"]: o for o in json.load(open(sys.argv[1]))["metadata"]}
r = kv["qwen35.attention.recurrent_layers"]["value"]
assert r["element_type"] == "u32", r
assert r["items"] == [1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0], r
assert kv["qwen35.block_count"]["value"] == 12
EOF
"$BIN" inspect "$T/m.gguf" | grep -q "blk.11.nextn.eh_proj.weight" && ok qwen35_merged_head_last || fail qwen35_merged_head_last "no head tensors at layer 11"

# --dump-plan: step kinds, and the head apart from the plan
"$BIN" run -m "$M" -p hi --repeat-layers 2,5 --dump-plan > "$T/plan.txt" 2>/dev/null
grep -q "8 -> 11 layers" "$T/plan.txt" && grep -q "NextN/MTP head: layers 8..8" "$T/plan.txt" && grep -q "rec" "$T/plan.txt" &&
    ok qwen35_dump_plan || fail qwen35_dump_plan "$(cat "$T/plan.txt")"
expect_error qwen35_plan_head_refused "NextN" "$BIN" run -m "$M" -p hi --repeat-layers 7,9

# synth: a small Qwen3.5-shaped model at Q8_0 loads, runs, merges
"$BIN" synth --arch qwen35 --n-embd 128 --n-layer 8 --n-head 2 --n-head-kv 1 --head-dim 64 --n-ff 256 \
    --ssm-state 32 --ssm-groups 2 --ssm-heads 4 --vocab "$V" --type q8_0 -o "$T/s.gguf" 2> "$T/err" &&
    "$BIN" run -m "$T/s.gguf" -p "$P" -n 8 --temp 0 > /dev/null 2> "$T/err" && ok qwen35_synth_runs || fail qwen35_synth_runs "$(tail -2 "$T/err")"
"$BIN" merge -m "$T/s.gguf" --repeat-layers 3,6 -o "$T/sm.gguf" -q 2>/dev/null
"$BIN" run -m "$T/sm.gguf" -p "$P" --dump-logits "$T/a.f32" -q 2>/dev/null
"$BIN" run -m "$T/s.gguf" --repeat-layers 3,6 -p "$P" --dump-logits "$T/b.f32" -q 2>/dev/null
cmp -s "$T/a.f32" "$T/b.f32" && [ -s "$T/a.f32" ] && ok qwen35_merge_synth_q8 || fail qwen35_merge_synth_q8 "logits differ (or missing)"
expect_error qwen35_synth_bad_shape "inconsistent recurrent shape" "$BIN" synth --arch qwen35 --n-embd 128 --n-layer 4 \
    --n-head 2 --ssm-heads 3 --ssm-groups 2 -o "$T/bad.gguf"
