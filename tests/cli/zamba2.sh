# Zamba2: synthetic models through the tools; a plan written as a merged file
# runs the same bits as the runtime plan; merges that would lose a shared
# block's tensors are refused.
. "$(dirname "$0")/_lib.sh"
P="Once upon a time, there was a little girl"

synth() { "$BIN" synth --arch zamba2 --n-embd 64 --n-layer 9 --n-head 4 --n-ff 96 "$@" 2> "$T/err"; }

synth -o "$T/a.gguf" && synth -o "$T/a2.gguf" || fail synth "$(tail -1 "$T/err")"
cmp -s "$T/a.gguf" "$T/a2.gguf" && ok synth_deterministic || fail synth_deterministic "files differ"
synth --adapters-merged -o "$T/m.gguf" || fail synth_merged "$(tail -1 "$T/err")"
synth --attn-adapter-rank 4 --shared-blocks 1 --type q8_0 -o "$T/q.gguf" || fail synth_q8 "$(tail -1 "$T/err")"

# the block's tensors are stored once: 2 blocks over 3 hybrid layers (2, 5, 8)
n=$("$BIN" inspect "$T/a.gguf" | grep -c 'blk\.[0-9]*\.attn_q\.weight')
[ "$n" = 2 ] && ok shared_stored_once || fail shared_stored_once "$n attn_q tensors"
n=$("$BIN" inspect "$T/m.gguf" | grep -c 'blk\.[0-9]*\.ffn_up\.weight')
[ "$n" = 3 ] && ok merged_form_ffn_up_per_visit || fail merged_form_ffn_up_per_visit "$n ffn_up tensors"

"$BIN" run -m "$T/a.gguf" -p "$P" -n 8 --temp 0 -t 1 > /dev/null 2>&1 && ok run || fail run "exit $?"
"$BIN" run -m "$T/q.gguf" -p "$P" -n 8 --temp 0 -t 1 > /dev/null 2>&1 && ok run_q8_attn_adapters || fail run_q8_attn_adapters "exit $?"
"$BIN" run -m "$T/a.gguf" --repeat-layers 4,6 --dump-plan 2>&1 | grep -q "hyb" && ok plan_shows_hybrid_steps ||
    fail plan_shows_hybrid_steps "no hybrid step in the plan report"

# reprise merge: the runtime plan and the merged file give the same logits
check_merge() { # NAME MODEL FLAG SPEC
    local name=$1 model=$2 flag=$3 spec=$4
    "$BIN" merge -m "$model" $flag "$spec" -o "$T/merged.gguf" -q 2> "$T/err" || { fail "$name" "merge: $(tail -1 "$T/err")"; return; }
    "$BIN" run -m "$T/merged.gguf" -p "$P" --dump-logits "$T/x.f32" -ctk f32 -ctv f32 -t 1 -q 2> "$T/err" || { fail "$name" "run merged: $(tail -1 "$T/err")"; return; }
    "$BIN" run -m "$model" $flag "$spec" -p "$P" --dump-logits "$T/y.f32" -ctk f32 -ctv f32 -t 1 -q 2> "$T/err" || { fail "$name" "run plan: $(tail -1 "$T/err")"; return; }
    if cmp -s "$T/x.f32" "$T/y.f32"; then ok "$name"; else fail "$name" "logits differ between the merged file and the runtime plan"; fi
}
check_merge merge_mamba_and_hybrid "$T/a.gguf" --repeat-layers 4,6      # layer 5: block 1's only visit
check_merge merge_block_first_layer "$T/a.gguf" --repeat-layers 1,3     # layer 2 stores block 0
check_merge merge_aliased_visit "$T/a.gguf" --repeat-layers 7,9         # layer 8 aliases layer 2
check_merge merge_two_blocks "$T/a.gguf" --repeat-layers "1,3;5,8"
check_merge merge_merged_form "$T/m.gguf" --repeat-layers 2,6
check_merge merge_attn_adapters "$T/q.gguf" --repeat-layers 0,9
check_merge merge_map_reorders_blocks "$T/a.gguf" --layer-map "0..1,5,2..8"

# block 0 is stored at layer 2; a map whose first block-0 visit is layer 8 cannot be a file
expect_error merge_refuses_lost_block "first visit of shared block 0" \
    "$BIN" merge -m "$T/a.gguf" --layer-map "0,1,8,2..7" -o "$T/bad.gguf"
[ ! -e "$T/bad.gguf" ] && ok merge_refusal_leaves_nothing || fail merge_refusal_leaves_nothing "output exists"

# the converter: both forms of the tiny transformers checkpoints run the same model
W="$S/text/war-and-peace.txt"
for f in mem1 mem2; do
    D=tests/fixtures/hf/zamba2-$f
    "$BIN" convert "$D" -o "$T/$f-a.gguf" --outtype f32 -q 2> "$T/err" &&
        "$BIN" convert "$D" -o "$T/$f-m.gguf" --outtype f32 --zamba2-merged -q 2>> "$T/err" ||
        { fail "convert_$f" "$(tail -1 "$T/err")"; continue; }
    ok "convert_$f"
    a=$("$BIN" run -m "$T/$f-a.gguf" -p "$P" -n 48 --temp 0 -t 1 2>/dev/null | od -An -tx1)
    m=$("$BIN" run -m "$T/$f-m.gguf" -p "$P" -n 48 --temp 0 -t 1 2>/dev/null | od -An -tx1)
    [ -n "$a" ] && [ "$a" = "$m" ] && ok "greedy_same_both_forms_$f" || fail "greedy_same_both_forms_$f" "texts differ"
    "$BIN" perplexity -m "$T/$f-a.gguf" -f "$W" -c 128 --chunks 6 -t 1 --kl-divergence-base "$T/$f.kld" > "$T/pa" 2>&1 &&
        "$BIN" perplexity -m "$T/$f-m.gguf" --kl-divergence-base "$T/$f.kld" --kl-divergence -t 1 > "$T/pm" 2>&1 ||
        { fail "kld_merged_vs_adapters_$f" "$(tail -1 "$T/pm")"; continue; }
    kld=$(sed -n 's/^Mean *KLD: *\([0-9.e-]*\).*/\1/p' "$T/pm")
    top=$(sed -n 's/^Same top p: *\([0-9.]*\).*/\1/p' "$T/pm")
    awk -v k="$kld" -v t="$top" 'BEGIN { exit !(k != "" && k + 0 < 1e-5 && t + 0 >= 99) }' &&
        ok "kld_merged_vs_adapters_$f" || fail "kld_merged_vs_adapters_$f" "mean KLD '$kld', same top p '$top'"
done

# Zamba2-7B-Instruct's shapes from its config.json alone: the merged form
# costs 13 full gate_up matrices where the adapter form stores 2 + 13 pairs
size_of() { "$BIN" convert tests/fixtures/hf/zamba2-7b-config --dry-run --no-vocab "$@" 2>/dev/null | sed -n 's/^file size: \([0-9]*\) bytes.*/\1/p'; }
a=$(size_of); m=$(size_of --zamba2-merged)
awk -v a="$a" -v m="$m" 'BEGIN { d = m - a; exit !(a > 0 && d > 2.14e9 && d < 2.16e9) }' &&
    ok dry_run_7b_saving || fail dry_run_7b_saving "adapter form '$a' bytes, merged '$m' bytes"
