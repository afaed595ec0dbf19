# reprise chat in a pipe: one turn per line, KV reuse across turns, /reset,
# template errors; the answer equals `reprise run` on the rendered prompt.
. "$(dirname "$0")/_lib.sh"
V="$S/vocab/qwen3/ggml-vocab-qwen3.gguf"
M="$T/q3.gguf"
"$BIN" synth --arch qwen3 --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --vocab "$V" --type q8_0 --tied \
    -o "$M" 2>/dev/null || { fail chat_synth "could not synthesize a model with the Qwen3 vocabulary"; exit 0; }
C=("$BIN" chat -m "$M" --temp 0 -n 8 -t 1 --stats)

printf 'Hello there\nHow are you?\n/reset\nHello there\n' | "${C[@]}" > "$T/out" 2> "$T/err"
rc=$?
[ $rc -eq 0 ] && [ "$(wc -l < "$T/out")" -eq 3 ] && ok chat_pipe_turns || fail chat_pipe_turns "exit $rc, $(wc -l < "$T/out") answers: $(head -c 300 "$T/err")"

# turn 2 decodes only its own tokens: everything of turn 1 is reused
t1=$(sed -n 's/.*\[turn 1: prompt \([0-9]*\) new tokens (0 reused.*cache \([0-9]*\)\/.*/\1 \2/p' "$T/err")
t2=$(sed -n 's/.*\[turn 2: prompt \([0-9]*\) new tokens (\([0-9]*\) reused.*/\1 \2/p' "$T/err")
set -- $t1 $t2
[ -n "$4" ] && [ "$4" -eq "$2" ] && [ "$3" -gt 0 ] && [ "$3" -lt $(( $2 + $3 )) ] && ok chat_kv_reuse \
    || fail chat_kv_reuse "turn 1 '$t1', turn 2 '$t2': $(grep turn "$T/err" | head -3)"

# /reset starts from scratch: the same question, the same (greedy) answer
a1=$(sed -n 1p "$T/out"); a3=$(sed -n 3p "$T/out")
[ -n "$a1" ] && [ "$a1" = "$a3" ] && grep -q "conversation reset" "$T/err" && grep -q "turn 3: prompt [0-9]* new tokens (0 reused" "$T/err" \
    && ok chat_reset || fail chat_reset "'$a1' vs '$a3'"

# the first answer is what run produces on the rendered ChatML prompt
want=$("$BIN" run -m "$M" -p $'<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n' -n 8 --temp 0 -t 1 2>/dev/null)
[ "$a1" = "$want" ] && ok chat_equals_run || fail chat_equals_run "chat '$a1' run '$want'"

# a system message goes first
s1=$(printf 'Hello there\n' | "${C[@]}" --system "Be brief." 2>/dev/null)
want=$("$BIN" run -m "$M" -p $'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n' -n 8 --temp 0 -t 1 2>/dev/null)
[ "$s1" = "$want" ] && ok chat_system || fail chat_system "chat '$s1' run '$want'"

# Qwen3 without thinking: the empty think block is part of the prompt
n1=$(printf 'Hello there\n' | "${C[@]}" --no-think 2>/dev/null)
want=$("$BIN" run -m "$M" -p $'<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' -n 8 --temp 0 -t 1 2>/dev/null)
[ "$n1" = "$want" ] && ok chat_no_think || fail chat_no_think "chat '$n1' run '$want'"

# a template that rewrites history (Llama 2 strips and re-spaces the answer):
# the cache is cut back to the first differing token, not thrown away
printf 'Hello there\nHow are you?\n' | "${C[@]}" --chat-template llama2 > /dev/null 2> "$T/err2"
r2=$(sed -n 's/.*\[turn 2: prompt [0-9]* new tokens (\([0-9]*\) reused.*/\1/p' "$T/err2")
c1=$(sed -n 's/.*\[turn 1: .*cache \([0-9]*\)\/.*/\1/p' "$T/err2")
[ -n "$r2" ] && [ "$r2" -gt 0 ] && [ "$r2" -lt "$c1" ] && ok chat_history_rewrite || fail chat_history_rewrite "$(head -c 300 "$T/err2")"

# the plan flags work here too
"${C[@]}" --repeat-layers 0,1 --dump-plan < /dev/null > "$T/plan" 2>&1
grep -q "2 -> 3 layers" "$T/plan" && ok chat_repeat_layers || fail chat_repeat_layers "$(head -c 300 "$T/plan")"
printf 'Hello there\n' | "${C[@]}" --repeat-layers 0,1 > "$T/out" 2> /dev/null && [ -s "$T/out" ] && ok chat_repeat_layers_runs \
    || fail chat_repeat_layers_runs "no answer"

expect_error chat_unknown_template "unknown chat template 'nope'" "${C[@]}" --chat-template nope
# stories260K carries no chat template: the error names the flag; naming a family works
expect_error chat_no_template "chat-template" "$BIN" chat -m "$S/models/stories260K.gguf" -t 1 < /dev/null
printf 'Once upon a time\n' | "$BIN" chat -m "$S/models/stories260K.gguf" --chat-template chatml --temp 0 -n 4 -t 1 > "$T/out" 2>&1 \
    && ok chat_named_template || fail chat_named_template "$(head -c 300 "$T/out")"
