# Plans: runtime plan == physically merged file, bit for bit; plan surfaces.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
P="Once upon a time, there was a little girl"

check_merge() { # NAME MODEL SPEC-FLAG SPEC
    local name=$1 model=$2 flag=$3 spec=$4
    "$BIN" merge -m "$model" $flag "$spec" -o "$T/merged.gguf" -q 2> "$T/err" || { fail "$name" "merge: $(tail -1 "$T/err")"; return; }
    "$BIN" run -m "$T/merged.gguf" -p "$P" --dump-logits "$T/a.f32" -ctk f32 -ctv f32 -q 2> "$T/err" || { fail "$name" "run merged: $(tail -1 "$T/err")"; return; }
    "$BIN" run -m "$model" $flag "$spec" -p "$P" --dump-logits "$T/b.f32" -ctk f32 -ctv f32 -q 2> "$T/err" || { fail "$name" "run plan: $(tail -1 "$T/err")"; return; }
    if cmp -s "$T/a.f32" "$T/b.f32"; then ok "$name"; else fail "$name" "logits differ between the merged file and the runtime plan"; fi
}

check_merge merge_stories_1_3 "$M" --repeat-layers 1,3
check_merge merge_stories_two_blocks "$M" --repeat-layers "3,4;1,2"
check_merge merge_stories_map "$M" --layer-map "0..3,2..4"

"$BIN" synth --arch llama --n-embd 128 --n-layer 10 --n-head 4 --n-ff 256 --vocab "$M" --type q8_0 -o "$T/s10.gguf" 2>/dev/null
check_merge merge_synth10_q8 "$T/s10.gguf" --repeat-layers 3,7
"$BIN" synth --arch qwen3 --n-embd 128 --n-layer 8 --n-head 4 --n-head-kv 2 --n-ff 256 --vocab "$M" -o "$T/q8.gguf" 2>/dev/null
check_merge merge_synth_qwen3 "$T/q8.gguf" --repeat-layers "2,4;5,6"

# the merged file really holds the repeated layers again; the plan does not
"$BIN" merge -m "$T/s10.gguf" --repeat-layers 3,7 -o "$T/m.gguf" -q 2>/dev/null
a=$(stat -c %s "$T/s10.gguf"); b=$(stat -c %s "$T/m.gguf")
[ "$b" -gt "$a" ] && ok merged_file_larger || fail merged_file_larger "$a vs $b"
"$BIN" inspect "$T/m.gguf" | grep -q "block_count .* 14$" && ok merged_block_count || fail merged_block_count "$("$BIN" inspect "$T/m.gguf" | grep block_count)"

# greedy text on the RYS golden
out=$("$BIN" run -m "$M" --repeat-layers 1,3 -p "Once upon a time" -n 64 --temp 0 -ctk f32 -ctv f32 2>/dev/null)
[ "$out" = "$(tail -n +2 "$S/golden/rys/stories260K-1-3.greedy.txt")" ] && ok rys_golden_text || fail rys_golden_text "$out"

# surfaces
"$BIN" inspect "$M" --repeat-layers 1,3 | grep -q "5 -> 7 layers" && ok inspect_plan || fail inspect_plan "no plan in inspect"
"$BIN" run -m "$M" --repeat-layers 0,2 -p hi -n 1 2>&1 >/dev/null | grep -q "warning: .*boundary" && ok boundary_warning || fail boundary_warning "no warning"
expect_error merge_needs_plan "no plan" "$BIN" merge -m "$M" -o "$T/x.gguf"
expect_error merge_bad_spec "block 1" "$BIN" merge -m "$M" --repeat-layers 3,9 -o "$T/x.gguf"
[ ! -e "$T/x.gguf" ] && ok merge_refusal_leaves_nothing || fail merge_refusal_leaves_nothing "output exists"
