# CLI: reprise convert (Hugging Face checkpoint -> GGUF).
. "$(dirname "$0")/_lib.sh"
F=tests/fixtures/hf

# convert, then run the file: logits equal transformers' (max |d| <= 1e-4)
"$BIN" convert "$F/qwen3" -o "$T/q.gguf" --outtype f32 > "$T/out" 2> "$T/err"
[ $? -eq 0 ] && [ -s "$T/q.gguf" ] && grep -q "wrote $T/q.gguf" "$T/err" && ok convert_writes || fail convert_writes "$(head -c 300 "$T/err")"
ls "$T" | grep -q '\.tmp\.' && fail convert_no_temp "temporary file left" || ok convert_no_temp
"$BIN" plan hash "$T/q.gguf" > "$T/h1" && h=$("$BIN" plan hash --recompute "$T/q.gguf") \
    && grep -q "(metadata)" "$T/h1" && [ "$(cut -d' ' -f1 "$T/h1")" = "${h%% *}" ] \
    && ok convert_content_hash_stamped || fail convert_content_hash_stamped "$(cat "$T/h1") / $h"
"$BIN" inspect "$T/q.gguf" > "$T/inspect.txt" 2>&1 && grep -q "blk.1.attn_q_norm.weight" "$T/inspect.txt" \
    && grep -q "qwen3.attention.key_length" "$T/inspect.txt" && ok convert_inspect || fail convert_inspect "$(head -c 300 "$T/inspect.txt")"
toks=$(tr ' ' ',' < "$F/qwen3/ref/tokens.txt" | tr -d '\n')
"$BIN" run -m "$T/q.gguf" --tokens "$toks" -n 0 --dump-logits "$T/q.f32" -ctk f32 -ctv f32 > /dev/null 2>&1
python3 - "$T/q.f32" "$F/qwen3/ref/logits.f32" > "$T/cmp" 2>&1 <<'PY'
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read()); b.frombytes(open(sys.argv[2], "rb").read())
d = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) and a else float("inf")
print(d); sys.exit(0 if d <= 1e-4 else 1)
PY
[ $? -eq 0 ] && ok convert_logits || fail convert_logits "max|d| $(cat "$T/cmp")"

# --dry-run: the table and the size the file has
"$BIN" convert "$F/qwen3" --dry-run --outtype f32 > "$T/dry" 2>&1
size=$(sed -n 's/^file size: \([0-9]*\) bytes.*/\1/p' "$T/dry")
[ -n "$size" ] && [ "$size" = "$(stat -c %s "$T/q.gguf")" ] && grep -q "^blk.0.attn_q.weight " "$T/dry" \
    && ok convert_dry_run_size || fail convert_dry_run_size "dry run says '$size', file has $(stat -c %s "$T/q.gguf")"
# ... also from a config.json alone (no weights; same directory name, as general.name is that)
mkdir -p "$T/cfg/gemma3" && cp "$F/gemma3"/*.json "$T/cfg/gemma3/"
"$BIN" convert "$F/gemma3" --dry-run > "$T/dry1" 2>&1
"$BIN" convert "$T/cfg/gemma3" --dry-run > "$T/dry2" 2>&1
grep -q "no weights" "$T/dry2" && [ "$(grep '^file size' "$T/dry1")" = "$(grep '^file size' "$T/dry2")" ] \
    && ok convert_dry_run_config_only || fail convert_dry_run_config_only "$(tail -2 "$T/dry2")"
expect_error convert_config_only_needs_dry_run "model.safetensors" "$BIN" convert "$T/cfg/gemma3" -o "$T/x.gguf"

# q8_0 (f16 where rows are not a multiple of 32) runs
"$BIN" convert "$F/llama" -o "$T/l8.gguf" --outtype q8_0 -q && "$BIN" inspect "$T/l8.gguf" > "$T/i8" 2>&1 \
    && grep "blk.0.ffn_down.weight" "$T/i8" | grep -q f16 && grep "blk.0.ffn_up.weight" "$T/i8" | grep -q q8_0 \
    && "$BIN" run -m "$T/l8.gguf" -p "Once upon a time" -n 4 --temp 0 > /dev/null 2>&1 \
    && ok convert_q8_0 || fail convert_q8_0 "$(grep ffn_ "$T/i8" | head -3)"

# refusals
expect_error convert_missing_dir "no config.json" "$BIN" convert "$T/nope" -o "$T/x.gguf"
expect_exit convert_bad_outtype 2 "$BIN" convert "$F/qwen3" -o "$T/x.gguf" --outtype q4_0
expect_exit convert_no_output 2 "$BIN" convert "$F/qwen3"
expect_exit convert_two_dirs 2 "$BIN" convert "$F/qwen3" "$F/qwen2" -o "$T/x.gguf"
mkdir -p "$T/bert" && echo '{"architectures": ["BertModel"]}' > "$T/bert/config.json"
expect_error convert_unsupported_arch "BertModel" "$BIN" convert "$T/bert" -o "$T/x.gguf"
expect_error convert_unwritable "$T/no/such/dir" "$BIN" convert "$F/qwen2" -o "$T/no/such/dir/x.gguf"
[ ! -e "$T/no/such/dir/x.gguf" ] && [ ! -e "$T/x.gguf" ] && ok convert_nothing_left || fail convert_nothing_left "output exists"

# --vocab-only: metadata and tokenizer, no tensors; the vocabulary works
"$BIN" convert "$F/gemma3" --vocab-only -o "$T/v.gguf" -q && "$BIN" inspect "$T/v.gguf" > "$T/iv" 2>&1 \
    && grep -q '^  tokenizer.ggml.model *str *"llama"' "$T/iv" && ! grep -q "blk.0" "$T/iv" \
    && [ "$("$BIN" tokenize -m "$T/v.gguf" -p "Hello world" 2>/dev/null | cut -d' ' -f1)" = 2 ] \
    && ok convert_vocab_only || fail convert_vocab_only "$(head -c 300 "$T/iv")"

# a truncated shard is refused with the file, the tensor and a byte offset
mkdir -p "$T/trunc" && cp "$F/qwen3"/*.json "$T/trunc/" && head -c 3000 "$F/qwen3/model.safetensors" > "$T/trunc/model.safetensors"
expect_error convert_truncated_shard "model.safetensors: tensor '.*' at byte offset" "$BIN" convert "$T/trunc" -o "$T/x.gguf"
