# run and chat with grammars, JSON schemas and Jinja templates; the CLI
# conventions of issue 25 (random seed, -f, repeated flags, timing line,
# /help and /commands, multi-line turns, -c past the training context).
# Every constrained output is parsed / matched by the checker here.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
R=("$BIN" run -m "$M" -t 1 -q)

# ---- grammars: the output matches, with sampling, with a plan, with speculative decoding
for seed in 1 2 3; do
    out=$("${R[@]}" -p "Once" -n 40 --temp 1.0 -s $seed --grammar 'root ::= (" " [a-z]+){1,6} "."')
    [[ "$out" =~ ^(\ [a-z]+){1,6}\.$ ]] && ok "grammar_gbnf_seed$seed" || fail "grammar_gbnf_seed$seed" "'$out'"
done
printf 'root ::= "yes" | "no"\n' > "$T/yn.gbnf"
out=$("${R[@]}" -p "Once" -n 10 --grammar-file "$T/yn.gbnf" --repeat-layers 1,3)
[[ "$out" == yes || "$out" == no ]] && ok grammar_file_plan || fail grammar_file_plan "'$out'"
SCHEMA='{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},"required":["name","age"]}'
VALIDATE='import json,sys
d=json.loads(sys.stdin.read())
assert set(d) <= {"name","age","tags"} and "name" in d and "age" in d, d
assert isinstance(d["name"], str) and len(d["name"]) <= 12, d
assert isinstance(d["age"], int) and 0 <= d["age"] <= 150, d
assert all(t in ("a","b") for t in d.get("tags", [])) and len(d.get("tags", [])) <= 3, d'
for seed in 1 2 3 4; do
    "${R[@]}" -p "Once" -n 120 --temp 1.0 -s $seed -j "$SCHEMA" > "$T/j.out"
    python3 -c "$VALIDATE" < "$T/j.out" 2> "$T/j.err" && ok "json_schema_valid_seed$seed" \
        || fail "json_schema_valid_seed$seed" "$(head -c 200 "$T/j.out") $(tail -1 "$T/j.err")"
done
# speculative decoding (a draft plan) keeps the grammar and, greedy, the plain output
plain=$("${R[@]}" -p "Once" -n 60 --temp 0 -j "$SCHEMA")
spec=$("${R[@]}" -p "Once" -n 60 --temp 0 -j "$SCHEMA" --spec)
[ -n "$plain" ] && [ "$plain" = "$spec" ] && ok grammar_spec_greedy_equals_plain || fail grammar_spec_greedy_equals_plain "'$plain' vs '$spec'"
"${R[@]}" -p "Once" -n 120 --temp 1.0 -s 9 -j "$SCHEMA" --spec > "$T/j.out"
python3 -c "$VALIDATE" < "$T/j.out" 2> "$T/j.err" && ok json_schema_spec_sampled \
    || fail json_schema_spec_sampled "$(head -c 200 "$T/j.out") $(tail -1 "$T/j.err")"
echo '{}' > "$T/any.json"
"${R[@]}" -p "Once" -n 80 --temp 0.9 -s 5 -jf "$T/any.json" > "$T/j.out"
python3 -c 'import json,sys; json.loads(sys.stdin.read())' < "$T/j.out" 2>/dev/null \
    && ok json_schema_any_value || fail json_schema_any_value "$(head -c 200 "$T/j.out")"
expect_error grammar_bad "line 1" "${R[@]}" -p x --grammar 'root ::= "a'
expect_error grammar_undefined "undefined" "${R[@]}" -p x --grammar 'root ::= foo'
expect_error grammar_two "give one of --grammar" "${R[@]}" -p x --grammar 'root ::= "a"' -j '{}'
expect_error schema_bad "json-schema" "${R[@]}" -p x -j '{"type":'

# ---- templates: a Jinja text, a file, the refusal before the weights load
JINJA="{% for m in messages %}<|im_start|>{{ m['role'] }}
{{ m['content'] }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"
printf '%s' "$JINJA" > "$T/t.jinja"
a=$(printf 'Hello there\nAgain\n' | "$BIN" chat -m "$M" --temp 0 -n 6 -t 1 -q --chat-template chatml)
b=$(printf 'Hello there\nAgain\n' | "$BIN" chat -m "$M" --temp 0 -n 6 -t 1 -q --chat-template "$JINJA")
c=$(printf 'Hello there\nAgain\n' | "$BIN" chat -m "$M" --temp 0 -n 6 -t 1 -q --chat-template-file "$T/t.jinja")
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok jinja_text_and_file_equal_builtin || fail jinja_text_and_file_equal_builtin "'$a' / '$b' / '$c'"
r1=$("${R[@]}" -p "Hello there" -n 6 --temp 0 --chat-template-file "$T/t.jinja")
r2=$("${R[@]}" -p $'<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n' -n 6 --temp 0)
[ -n "$r1" ] && [ "$r1" = "$r2" ] && ok run_jinja_user_turn || fail run_jinja_user_turn "'$r1' vs '$r2'"
"$BIN" chat -m "$M" -t 1 < /dev/null > "$T/out" 2> "$T/err"
grep -q "no chat template" "$T/err" && ! grep -q "^plan:" "$T/err" && ok template_missing_before_load || fail template_missing_before_load "$(head -c 300 "$T/err")"
expect_error template_jinja_syntax "does not compile" "$BIN" chat -m "$M" --chat-template '{% if x %}oops'
expect_error template_unknown "unknown chat template" "$BIN" chat -m "$M" --chat-template nosuch
expect_error template_jinja_no_own "no chat template" "$BIN" chat -m "$M" --jinja

# ---- chat input: /help, unknown commands, '\' continuation, -p, -sys
C=("$BIN" chat -m "$M" --temp 0 -n 4 -t 1 --chat-template chatml --stats)
printf '/help\n/nosuch\nHello \\\nthere\n' | "${C[@]}" > "$T/out" 2> "$T/err"
[ "$(wc -l < "$T/out")" -eq 1 ] && grep -q "/reset" "$T/err" && grep -q "unknown command '/nosuch'" "$T/err" \
    && grep -q "turn 1:" "$T/err" && ! grep -q "turn 2:" "$T/err" && ok chat_commands_and_continuation \
    || fail chat_commands_and_continuation "$(wc -l < "$T/out") answers; $(head -c 300 "$T/err")"
one=$(printf 'Hello \\\nthere\n' | "$BIN" chat -m "$M" --temp 0 -n 6 -t 1 -q --chat-template chatml)
two=$("${R[@]}" -p $'<|im_start|>user\nHello \nthere<|im_end|>\n<|im_start|>assistant\n' -n 6 --temp 0)
[ "$one" = "$two" ] && ok chat_continuation_is_newline || fail chat_continuation_is_newline "'$one' vs '$two'"
p=$("$BIN" chat -m "$M" --temp 0 -n 6 -t 1 -q --chat-template chatml -p "Hello there" < /dev/null)
[ -n "$p" ] && [ "$p" = "$(sed -n 1p <<< "$a")" ] && ok chat_prompt_flag || fail chat_prompt_flag "'$p' vs '$a'"
s1=$("$BIN" chat -m "$M" --temp 0 -n 6 -t 1 -q --chat-template chatml -sys "Be brief" -p "Hi" < /dev/null)
s2=$("${R[@]}" -p $'<|im_start|>system\nBe brief<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' -n 6 --temp 0)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok chat_sys_flag || fail chat_sys_flag "'$s1' vs '$s2'"
g=$(printf 'Hi\n' | "$BIN" chat -m "$M" --temp 1 -n 20 -t 1 -q --chat-template chatml --grammar 'root ::= "A" [a-z ]* "."')
[[ "$g" =~ ^A[a-z\ ]*\.?$ ]] && ok chat_grammar || fail chat_grammar "'$g'"

# ---- CLI conventions
"$BIN" run -m "$M" -p "Once" -n 4 -t 1 -v > /dev/null 2> "$T/v1"
"$BIN" run -m "$M" -p "Once" -n 4 -t 1 -v > /dev/null 2> "$T/v2"
s1=$(sed -n 's/^seed: //p' "$T/v1"); s2=$(sed -n 's/^seed: //p' "$T/v2")
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s1" != "$s2" ] && ok seed_random_printed || fail seed_random_printed "'$s1' '$s2'"
o1=$("${R[@]}" -p "Once" -n 12 --temp 1 -s "$s1"); o2=$("${R[@]}" -p "Once" -n 12 --temp 1 -s "$s1")
[ "$o1" = "$o2" ] && ok seed_repeatable || fail seed_repeatable "'$o1' vs '$o2'"
expect_exit seed_minus_one 0 "${R[@]}" -p "Once" -n 2 -s -1
expect_error seed_bad "seed expects" "${R[@]}" -p "Once" -n 2 -s -5
expect_error repeated_flag "given twice" "$BIN" run -m "$M" --repeat-layers 1,3 --repeat-layers 2,4 -p x
printf 'Once upon\n' > "$T/p.txt"
[ "$("${R[@]}" -f "$T/p.txt" -n 8 --temp 0)" = "$("${R[@]}" -p "Once upon" -n 8 --temp 0)" ] && ok file_strips_newline \
    || fail file_strips_newline "-f differs from -p"
"$BIN" run -m "$M" -p "Once" -n 4 -t 1 > "$T/both" 2>&1
grep -q "^timing: " "$T/both" && ok timing_own_line || fail timing_own_line "$(tail -2 "$T/both")"
"$BIN" run -m "$M" -p "Once" -n 2 -t 1 -c 4096 2> "$T/err" > /dev/null
grep -q "past the model's training context" "$T/err" && ok ctx_past_training_warns || fail ctx_past_training_warns "$(head -3 "$T/err")"
"$BIN" inspect "$M" --json --repeat-layers 1,3 > "$T/i.json" 2>/dev/null
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/i.json" 2>/dev/null && ok inspect_json_with_plan || fail inspect_json_with_plan "$(head -c 200 "$T/i.json")"

# ---- a model's own Jinja template (Qwen3's, in a synthetic model with its vocabulary): --jinja
# renders what the built-in family renders, turn after turn, with and without thinking
V="$S/vocab/qwen3/ggml-vocab-qwen3.gguf"
Q="$T/q3.gguf"
if "$BIN" synth --arch qwen3 --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --vocab "$V" --type q8_0 --tied -o "$Q" 2>/dev/null; then
    for think in "" --no-think; do
        a=$(printf 'Hello there\nAnd then?\n' | "$BIN" chat -m "$Q" --temp 0 -n 6 -t 1 -q $think)
        b=$(printf 'Hello there\nAnd then?\n' | "$BIN" chat -m "$Q" --temp 0 -n 6 -t 1 -q --jinja $think)
        [ -n "$a" ] && [ "$a" = "$b" ] && ok "jinja_model_template_equals_builtin${think}" || fail "jinja_model_template_equals_builtin${think}" "'$a' vs '$b'"
    done
    "$BIN" chat -m "$Q" -t 1 --jinja -v < /dev/null 2>&1 | grep -q "chat template: jinja (the model's template)" \
        && ok jinja_reported || fail jinja_reported "no 'chat template: jinja' line at -v"
    # serve --jinja renders the same prompt /apply-template returns
    "$BIN" serve -m "$Q" --port 0 -t 1 -c 256 --jinja > /dev/null 2> "$T/sj.err" &
    SPID=$!
    for _ in $(seq 1 100); do PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/sj.err" | grep -o '[0-9]*$'); [ -n "$PORT" ] && break; sleep 0.1; done
    got=$(curl -s "http://127.0.0.1:$PORT/apply-template" -d '{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}')
    want='{"prompt":"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"}'
    [ "$got" = "$want" ] && ok serve_jinja_apply_template || fail serve_jinja_apply_template "$got"
    got=$(curl -s "http://127.0.0.1:$PORT/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"x":1}}}]},{"role":"tool","content":"42"}],"max_tokens":2}')
    [[ "$got" == *'"finish_reason"'* ]] && ok serve_jinja_tool_roles || fail serve_jinja_tool_roles "$got"
    kill -TERM $SPID; wait $SPID 2>/dev/null
else
    fail jinja_synth "could not synthesize a model with the Qwen3 vocabulary"
fi
