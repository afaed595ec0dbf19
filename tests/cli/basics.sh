# CLI basics: run, tokenize, inspect, synth, plans, errors.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"

# greedy run reproduces llama.cpp's continuation text (stdout only the continuation)
out=$("$BIN" run -m "$M" -p "Once upon a time" -n 64 --temp 0 -ctk f32 -ctv f32 2>/dev/null)
want=$(tail -n +2 "$S/golden/stories260K/p1.greedy.txt")
[ "$out" = "$want" ] && ok run_greedy_text || fail run_greedy_text "got: $(echo "$out" | head -c 200)"

"$BIN" run -m "$M" -p "Once upon a time" -n 8 --temp 0 2> "$T/err" > /dev/null
grep -q "^timing: prompt" "$T/err" && ok run_timing_line || fail run_timing_line "no timing line on stderr"

out=$("$BIN" tokenize -m "$M" -p "Once upon a time")
[ "$out" = "$(cat "$S/golden/stories260K/p1.tokens.txt")" ] && ok tokenize || fail tokenize "got $out"

"$BIN" run -m "$M" --tokens 1,403,407,261,378 -n 4 --temp 0 > /dev/null 2>&1 && ok run_tokens || fail run_tokens "exit $?"

"$BIN" run -m "$M" -p "Once upon a time" --dump-logits "$T/l.f32" -ctk f32 -ctv f32 > /dev/null 2>&1
[ "$(stat -c %s "$T/l.f32")" = 10240 ] && ok dump_logits_size || fail dump_logits_size "size $(stat -c %s "$T/l.f32" 2>/dev/null)"

"$BIN" run -m "$M" -p "Once upon a time" -n 300 --temp 0 -c 32 > /dev/null 2> "$T/err"
[ $? -eq 0 ] && grep -q "context full" "$T/err" && ok run_context_full || fail run_context_full "$(tail -2 "$T/err")"

"$BIN" inspect "$M" > "$T/inspect.txt" && grep -q "blk.4.ffn_up.weight" "$T/inspect.txt" && ok inspect || fail inspect "no tensor table"
"$BIN" inspect --json "$M" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert len(d["tensors"])==48' && ok inspect_json || fail inspect_json "bad json"
for f in $(find "$S" -name '*.gguf'); do
    "$BIN" inspect "$f" > /dev/null 2> "$T/err" || { fail "inspect_$(basename "$f")" "$(head -c 200 "$T/err")"; continue; }
done
ok inspect_all_shared

"$BIN" run -m "$M" -p hi --repeat-layers 1,3 --dump-plan > "$T/plan.txt" 2>/dev/null
grep -q "5 -> 7 layers" "$T/plan.txt" && grep -q "0..2 | 1..4" "$T/plan.txt" && ok dump_plan || fail dump_plan "$(cat "$T/plan.txt")"

expect_error plan_refused "block 1 '4,9'" "$BIN" run -m "$M" -p hi --repeat-layers 4,9
expect_error plan_overlap "overlap" "$BIN" run -m "$M" -p hi --repeat-layers "1,3;2,4"
expect_error plan_both "alternatives" "$BIN" run -m "$M" -p hi --repeat-layers 1,3 --layer-map 0..4
expect_error missing_model "cannot open" "$BIN" run -m "$T/nope.gguf" -p hi
expect_error bad_flag "unknown option" "$BIN" run -m "$M" --nope
expect_error bad_int "expects an integer" "$BIN" run -m "$M" -p hi -n abc
expect_error bad_ctk "cache type" "$BIN" run -m "$M" -p hi -ctk q4_0
head -c 5000 "$M" > "$T/trunc.gguf"
expect_error truncated_model "byte offset" "$BIN" run -m "$T/trunc.gguf" -p hi
expect_error not_gguf "not a GGUF" "$BIN" inspect "$S/text/wiki.test.raw"

# synth is deterministic
"$BIN" synth --arch qwen3 --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --vocab "$M" --type q8_0 -o "$T/a.gguf" 2>/dev/null
"$BIN" synth --arch qwen3 --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --vocab "$M" --type q8_0 -o "$T/b.gguf" 2>/dev/null
cmp -s "$T/a.gguf" "$T/b.gguf" && ok synth_deterministic || fail synth_deterministic "files differ"
"$BIN" run -m "$T/a.gguf" -p "Once upon a time" -n 8 --temp 0 > /dev/null 2>&1 && ok synth_runs || fail synth_runs "exit $?"

# bit flips through the CLI: an error exit or success, never a signal
sig=0
for off in 0 4 8 16 24 100 500 1000 2000 4000; do
    for bit in 0 3 7; do
        python3 - "$M" "$T/flip.gguf" "$off" "$bit" <<'PY'
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
d[int(sys.argv[3])] ^= 1 << int(sys.argv[4])
open(sys.argv[2], 'wb').write(d)
PY
        "$BIN" run -m "$T/flip.gguf" -p "Once" -n 2 > /dev/null 2>&1
        rc=$?; [ $rc -ge 128 ] && sig=$((sig + 1))
    done
done
[ $sig -eq 0 ] && ok cli_bitflips_no_signal || fail cli_bitflips_no_signal "$sig runs died by a signal"
