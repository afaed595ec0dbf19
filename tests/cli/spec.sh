# Speculative decoding: greedy text identical to plain decoding in run, chat
# and bench (stories260K, a synthetic qwen3, qwen35-tiny with its MTP head,
# each with and without --repeat-layers); sampling runs; refusals.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
Q3="$S/models/synth/qwen3-tiny.gguf"
Q35="$S/models/synth/qwen35-tiny.gguf"

# same_text NAME MODEL "PLAIN FLAGS" "SPEC FLAGS" PROMPT-FLAGS...
same_text() {
    local name=$1 model=$2 plain=$3 spec=$4; shift 4
    # shellcheck disable=SC2086
    "$BIN" run -m "$model" -t 1 $plain "$@" -n 40 --temp 0 > "$T/a.txt" 2> "$T/a.err" || { fail "$name" "plain: $(tail -1 "$T/a.err")"; return; }
    # shellcheck disable=SC2086
    "$BIN" run -m "$model" -t 1 $plain $spec "$@" -n 40 --temp 0 > "$T/b.txt" 2> "$T/b.err" || { fail "$name" "spec: $(tail -1 "$T/b.err")"; return; }
    if ! grep -q "speculative: [0-9]* of [0-9]* drafted tokens accepted" "$T/b.err"; then fail "$name" "no acceptance line"; return; fi
    if cmp -s "$T/a.txt" "$T/b.txt"; then ok "$name"; else fail "$name" "text differs: '$(head -c 80 "$T/a.txt")' vs '$(head -c 80 "$T/b.txt")'"; fi
}

TOK="1,50,260,300,301,77,90,400"
same_text greedy_stories "$M" "" "--draft-plan 0,1,3,4 --draft-max 4 --draft-p-min 0" -p "Once upon a time"
same_text greedy_stories_repeat "$M" "--repeat-layers 1,3" "--spec" -p "Once upon a time"
same_text greedy_qwen3 "$Q3" "" "--draft-plan 0..2,5..7 --draft-max 3 --draft-p-min 0" --tokens "$TOK"
same_text greedy_qwen3_repeat "$Q3" "--repeat-layers 2,5" "--spec --draft-max 3" --tokens "$TOK"
same_text greedy_qwen35_mtp "$Q35" "" "--spec-mtp --draft-max 3 --draft-p-min 0" --tokens "$TOK"
same_text greedy_qwen35_mtp_repeat "$Q35" "--repeat-layers 2,6" "--spec-mtp --draft-max 2" --tokens "$TOK"
same_text greedy_qwen35_draft_plan "$Q35" "--repeat-layers 2,6" "--draft-plan 0..2,4..7 --draft-max 3 --draft-p-min 0" --tokens "$TOK"
# quantized weights: the batched (gemm) and single-token (gemv) kernels give the same floats
same_text greedy_qwen3_q4km "$S/models/synth/qwen3-tiny-Q4_K_M.gguf" "--repeat-layers 2,5 -t 2" "--spec --draft-max 6 --draft-p-min 0" --tokens "$TOK"
# sliding-window rings (gemma3, micro-batch 16: rings of window + 15 cells) roll back
same_text greedy_gemma3_rings "$S/models/synth/gemma3-tiny.gguf" "-b 16" "--draft-plan 0,2..5 --draft-max 8 --draft-p-min 0" --tokens "$TOK"
# zamba2: Mamba2 state restored from checkpoints in the target (a repeat plan) and the draft
"$BIN" synth --arch zamba2 --n-embd 64 --n-layer 6 --n-head 4 --n-ff 96 --ssm-groups 2 -o "$T/z2.gguf" 2>/dev/null
same_text greedy_zamba2_repeat "$T/z2.gguf" "--repeat-layers 1,3" "--draft-plan 0,1,2,4,5 --draft-p-min 0" --tokens "$TOK"

# the draft's description names its plan and never the target's
"$BIN" run -m "$M" --repeat-layers 1,3 --spec -p hi -n 2 --temp 0 2>&1 >/dev/null | grep -q "draft: the trunk once (5 of the target's 7 steps)" \
    && ok draft_ignores_target_plan || fail draft_ignores_target_plan "$("$BIN" run -m "$M" --repeat-layers 1,3 --spec -p hi -n 2 2>&1 >/dev/null | grep draft)"

# sampling: runs to the token limit, same seed same text
"$BIN" run -m "$M" -p "Once upon a time" -n 30 -s 5 --temp 0.9 --draft-plan 0,1,2,4 > "$T/s1.txt" 2> "$T/s.err" \
    && "$BIN" run -m "$M" -p "Once upon a time" -n 30 -s 5 --temp 0.9 --draft-plan 0,1,2,4 > "$T/s2.txt" 2>/dev/null \
    && grep -q "generation 30 tokens" "$T/s.err" && cmp -s "$T/s1.txt" "$T/s2.txt" \
    && ok sampling_runs || fail sampling_runs "$(tail -2 "$T/s.err")"

# the context fills as in plain decoding
"$BIN" run -m "$M" -p "Once upon a time" -c 24 --temp 0 > "$T/a.txt" 2>/dev/null
"$BIN" run -m "$M" -p "Once upon a time" -c 24 --temp 0 --spec --draft-max 6 --draft-p-min 0 > "$T/b.txt" 2> "$T/b.err"
cmp -s "$T/a.txt" "$T/b.txt" && grep -q "stopped: context full" "$T/b.err" && ok context_full || fail context_full "$(tail -2 "$T/b.err")"

# chat: the same answers, turn after turn
printf 'Hello there\nTell me a story\n' > "$T/chat.in"
"$BIN" chat -m "$M" --chat-template chatml --temp 0 -n 30 -t 1 < "$T/chat.in" > "$T/c1.txt" 2>/dev/null
"$BIN" chat -m "$M" --chat-template chatml --temp 0 -n 30 -t 1 --draft-plan 0,2,3,4 --stats < "$T/chat.in" > "$T/c2.txt" 2> "$T/c.err"
if cmp -s "$T/c1.txt" "$T/c2.txt" && [ "$(grep -c '^\[speculative:' "$T/c.err")" -eq 2 ]; then ok chat_same_answers; else fail chat_same_answers "$(tail -3 "$T/c.err")"; fi
"$BIN" chat -m "$Q35" --chat-template chatml --temp 0 -n 20 -t 1 < "$T/chat.in" > "$T/c1.txt" 2>/dev/null
"$BIN" chat -m "$Q35" --chat-template chatml --temp 0 -n 20 -t 1 --spec-mtp --draft-p-min 0 < "$T/chat.in" > "$T/c2.txt" 2> "$T/c.err"
cmp -s "$T/c1.txt" "$T/c2.txt" && ok chat_mtp_same_answers || fail chat_mtp_same_answers "$(tail -3 "$T/c.err")"

# bench: plain and speculative generation side by side
"$BIN" bench -m "$M" -p 0 -n 16 -r 1 -t 1 --draft-plan 0,1,3,4 > "$T/bench.txt" 2> "$T/bench.err"
if grep -q "| *gen16+spec |" "$T/bench.txt" && grep -q "^speed-up: [0-9.]*x" "$T/bench.txt" \
    && grep -q "^tokens: identical" "$T/bench.txt"; then ok bench_spec; else fail bench_spec "$(cat "$T/bench.txt" "$T/bench.err" | tail -5)"; fi

# refusals
expect_error tuning_alone "turn it on with" "$BIN" run -m "$M" -p hi --draft-max 4
expect_error mtp_without_head "no NextN/MTP head" "$BIN" run -m "$M" -p hi --spec-mtp
expect_error mtp_and_plan "alternatives" "$BIN" run -m "$Q35" -p hi --spec-mtp --draft-plan 0..3
expect_error bad_draft_plan "draft plan '0..9'" "$BIN" run -m "$M" -p hi --draft-plan 0..9
expect_error draft_max_range "outside 1..64" "$BIN" run -m "$M" -p hi --spec --draft-max 65
expect_error p_min_range "p-min 2" "$BIN" run -m "$M" -p hi --spec --draft-p-min 2
expect_error draft_min_range "draft-min 9" "$BIN" run -m "$M" -p hi --spec --draft-max 4 --draft-min 9
expect_error dump_logits "does not combine" "$BIN" run -m "$M" -p hi --spec --dump-logits "$T/x.f32"
expect_error small_batch "micro-batch" "$BIN" run -m "$M" -p hi --spec -b 4
