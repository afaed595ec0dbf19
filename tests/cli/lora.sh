#!/bin/bash
# LoRA adapters and per-step deltas through the tools: reprise convert --lora
# writes the tensors llama.cpp's convert_lora_to_gguf.py writes; --lora,
# --lora-scaled and '@' step modifiers show in --dump-plan; refusals name the
# flag, the file or the item. (Logits against PEFT: tests/unit/test_lora.c.)
source "$(dirname "$0")/_lib.sh"
F=tests/fixtures/lora
"$BIN" convert tests/fixtures/hf/llama -o "$T/base.gguf" -q || { fail convert_base "$(cat "$T/err" 2>/dev/null)"; exit 0; }
expect_exit convert_lora 0 "$BIN" convert tests/fixtures/hf/llama --lora $F/a --outtype f32 -o "$T/a.gguf" -q
# the same tensors, names, shapes and bytes as llama.cpp's converter
"$BIN" inspect "$T/a.gguf" 2>/dev/null | grep '\.lora_[ab] ' | awk '{print $2, $3, $4 $5 $6, $NF}' | sort > "$T/ours"
"$BIN" inspect $F/a-llamacpp.gguf 2>/dev/null | grep '\.lora_[ab] ' | awk '{print $2, $3, $4 $5 $6, $NF}' | sort > "$T/theirs"
if [ -s "$T/ours" ] && cmp -s "$T/ours" "$T/theirs"; then ok lora_tensors_as_llamacpp; else fail lora_tensors_as_llamacpp "$(diff "$T/ours" "$T/theirs" | head -5)"; fi
"$BIN" inspect "$T/a.gguf" 2>/dev/null > "$T/keys"
if grep -q "general.type.*adapter" "$T/keys" && grep -q "adapter.lora.alpha.*8" "$T/keys"; then ok lora_keys; else fail lora_keys "$(grep -E 'general.type|adapter' "$T/keys")"; fi
expect_exit convert_rep 0 "$BIN" convert tests/fixtures/hf/llama --lora $F/rep -o "$T/rep.gguf" -q
"$BIN" inspect "$T/rep.gguf" 2>/dev/null | grep -q "adapter.reprise.layer_map.*0..1,1..1" && ok rep_layer_map || fail rep_layer_map "no adapter.reprise.layer_map"

"$BIN" run -m "$T/base.gguf" --lora "$T/a.gguf" --lora-scaled $F/a-llamacpp.gguf 0.5 \
    --layer-map "0,1,0@s=0.7@lora=$T/a.gguf*0.5,1@s=0.85" --dump-plan > "$T/plan" 2>&1
if grep -q "scale 0.5 on every step of layers 0..1" "$T/plan" && grep -q "step 2 (src 0, pass 2): residual x0.7, lora .*a.gguf x0.5" "$T/plan" \
    && grep -q "step 3 (src 1, pass 2): residual x0.85" "$T/plan"; then ok dump_plan_deltas; else fail dump_plan_deltas "$(cat "$T/plan")"; fi
"$BIN" run -m "$T/base.gguf" --lora "$T/rep.gguf" --dump-plan > "$T/plan" 2>&1
grep -q "eff->src: 0..1 | 1" "$T/plan" && grep -q "layer_replication" "$T/plan" && ok rep_plan_adopted || fail rep_plan_adopted "$(cat "$T/plan")"
"$BIN" run -m "$T/base.gguf" --repeat-layers "0,2@s=0.707" --dump-plan > "$T/plan" 2>&1
grep -q "step 3 (src 1, pass 2): residual x0.707" "$T/plan" && ok repeat_second_pass || fail repeat_second_pass "$(cat "$T/plan")"
expect_exit run_lora 0 "$BIN" run -m "$T/base.gguf" --lora "$T/a.gguf" -p "Once upon" -n 4 -q

expect_error bad_scale "the scale is not a number" "$BIN" run -m "$T/base.gguf" --lora-scaled "$T/a.gguf" x -p hi
expect_error scaled_one_value "needs two values" "$BIN" run -m "$T/base.gguf" --lora-scaled "$T/a.gguf"
expect_error not_adapter "not 'adapter'" "$BIN" run -m "$T/base.gguf" --lora "$T/base.gguf" -p hi
expect_error bad_modifier "unknown step modifier" "$BIN" run -m "$T/base.gguf" --layer-map "0,1@q=1" -p hi
expect_error rep_other_plan "layer_replication" "$BIN" run -m "$T/base.gguf" --lora "$T/rep.gguf" --layer-map 0,1 -p hi
expect_error lora_no_config "adapter_config.json" "$BIN" convert tests/fixtures/hf/llama --lora tests/fixtures/hf/llama -o "$T/x.gguf"
[ ! -e "$T/x.gguf" ] && ok no_partial_output || fail no_partial_output "x.gguf left behind"

# scan --scales: one CSV per residual scale; its rows equal whole plans with '@s='
head -c 3000 "$S/text/war-and-peace.txt" > "$T/text.txt"
expect_exit scan_scales 0 "$BIN" scan -m "$T/base.gguf" -f "$T/text.txt" -c 32 --chunks 2 --scales 1,0.5 -o "$T/s.csv" -q
if [ -s "$T/s.csv" ] && grep -q "^# residual-scale: 0.5" "$T/s-s0.5.csv" && [ -s "$T/s-s0.5.png" ]; then ok scan_scale_files; else fail scan_scale_files "$(ls "$T")"; fi
want=$(awk -F, '$1 == 1 && $2 == 2 {print $5}' "$T/s-s0.5.csv")
got=$("$BIN" perplexity -m "$T/base.gguf" -f "$T/text.txt" -c 32 --chunks 2 --repeat-layers "1,2@s=0.5" -q 2>&1 | sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p')
# the CSV keeps 10 digits, perplexity prints 4 decimals: equal to its rounding
[ -n "$want" ] && [ -n "$got" ] && awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; exit !(d < 0.00005 + 1e-9 && d > -0.00005 - 1e-9) }' && ok scan_scale_is_plan || fail scan_scale_is_plan "scan $want, perplexity $got"
plain=$(awk -F, '$1 == 1 && $2 == 2 {print $5}' "$T/s.csv")
[ "$plain" != "$want" ] && ok scale_changes_ppl || fail scale_changes_ppl "$plain = $want"
expect_error scan_bad_scale "not a scale" "$BIN" scan -m "$T/base.gguf" -f "$T/text.txt" -c 32 --chunks 2 --scales 1,x -o "$T/s2.csv" -q
expect_error merge_refuses_deltas "carries deltas" "$BIN" merge -m "$T/base.gguf" --repeat-layers "0,1@s=0.5" -o "$T/m.gguf"
[ ! -e "$T/m.gguf" ] && ok merge_no_output || fail merge_no_output "m.gguf written"
# an architecture whose forward does not apply deltas refuses them by name
"$BIN" synth --arch zamba2 -o "$T/z.gguf" >/dev/null 2>&1
if [ -s "$T/z.gguf" ]; then
    expect_error deltas_unsupported_arch "forward does not apply" "$BIN" run -m "$T/z.gguf" --repeat-layers "1,2@s=0.5" -p hi
else
    fail deltas_unsupported_arch "synth zamba2 failed"
fi
