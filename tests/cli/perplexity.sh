# reprise perplexity: llama.cpp's golden on the whole text, batching, the KLD
# flow with a plan, the base file's refusals, bad input.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
G="$S/golden/ppl/stories260K-war-and-peace-c128-40.txt"
F32="-ctk f32 -ctv f32 -t 1"
# 16 KiB of the text tokenize to the whole text's first 9614 ids: enough for
# every run below except the golden, which takes the whole file.
head -c 16384 "$S/text/war-and-peace.txt" > "$T/text.txt"
head -c 16000 "$S/text/war-and-peace.txt" > "$T/other.txt"

# llama.cpp's golden: running values and the final line, whole text
"$BIN" perplexity -m "$M" -f "$S/text/war-and-peace.txt" -c 128 --chunks 40 $F32 > "$T/ppl.txt" 2> "$T/err"
python3 - "$T/ppl.txt" "$G" <<'PY' && ok ppl_golden_stories || fail ppl_golden_stories "$(head -c 400 "$T/ppl.txt") $(tail -2 "$T/err")"
import re, sys
mine, gold = open(sys.argv[1]).read(), open(sys.argv[2]).read()
vals = lambda s: [float(x) for x in re.findall(r'\[\d+\]([0-9.]+),', s)]
fin = lambda s: [float(x) for x in re.search(r'Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)', s).groups()]
a, b = vals(mine), vals(gold)
assert len(a) == 40 and len(b) == 40, (len(a), len(b))
assert all(abs(x - y) <= 1.5e-4 for x, y in zip(a, b)), [(x, y) for x, y in zip(a, b) if abs(x - y) > 1.5e-4]
(p, u), (gp, gu) = fin(mine), fin(gold)
assert abs(p - gp) <= 1e-3 * gp and abs(u - gu) <= 1e-3 * gu, (p, u, gp, gu)
PY
grep -q "^perplexity: 40 chunks of 128 tokens" "$T/err" && ok ppl_info_line || fail ppl_info_line "$(head -c 300 "$T/err")"

# -b: chunks per decode and micro-batches do not change a digit
"$BIN" perplexity -m "$M" -f "$T/text.txt" -c 64 --chunks 6 $F32 -b 64 > "$T/b64.txt" 2>/dev/null
"$BIN" perplexity -m "$M" -f "$T/text.txt" -c 64 --chunks 6 $F32 -b 384 > "$T/b384.txt" 2>/dev/null
[ -s "$T/b64.txt" ] && cmp -s "$T/b64.txt" "$T/b384.txt" && ok ppl_batch_invariant || fail ppl_batch_invariant "$(cat "$T/b64.txt" "$T/b384.txt")"

# the base file, then the model against itself and against a plan
"$BIN" perplexity -m "$M" -f "$T/text.txt" -c 128 --chunks 8 $F32 --kl-divergence-base "$T/base.kld" > "$T/base.txt" 2>/dev/null
want=$((256 + 8 * 128 * 4 + 8 * 63 * (16 + 2 * 512)))
[ "$(stat -c %s "$T/base.kld" 2>/dev/null)" = "$want" ] && ok kld_base_written || fail kld_base_written "size $(stat -c %s "$T/base.kld" 2>/dev/null), want $want"
cmp -s <(grep -v '^$' "$T/base.txt") <("$BIN" perplexity -m "$M" -f "$T/text.txt" -c 128 --chunks 8 $F32 2>/dev/null | grep -v '^$') \
    && ok kld_base_same_ppl || fail kld_base_same_ppl "saving the base changed the output"

"$BIN" perplexity -m "$M" -f "$T/text.txt" $F32 --kl-divergence-base "$T/base.kld" --kl-divergence > "$T/self.txt" 2> "$T/err"
grep -q "^Same top p: 100.000 ± 0.000 %" "$T/self.txt" && grep -q "^Mean    KLD:   0.000000 ±" "$T/self.txt" \
    && ok kld_self_zero || fail kld_self_zero "$(grep -E 'KLD|top' "$T/self.txt" | head -4) $(tail -2 "$T/err")"
python3 - "$T/base.txt" "$T/self.txt" <<'PY' && ok kld_ppl_base_exact || fail kld_ppl_base_exact "$(grep Final "$T/base.txt"); $(grep 'PPL(base)' "$T/self.txt")"
import re, sys
base = float(re.search(r'Final estimate: PPL = ([0-9.]+)', open(sys.argv[1]).read()).group(1))
kld = float(re.search(r'Mean PPL\(base\) +: +([0-9.]+)', open(sys.argv[2]).read()).group(1))
assert abs(base - kld) <= 5e-5 + 1e-7 * base, (base, kld)
PY
for h in "====== Perplexity statistics ======" "Cor(ln(PPL(Q)), ln(PPL(base)))" "====== KL divergence statistics ======" \
         "99.9%   KLD" "Median  KLD" " 0.1%   KLD" "====== Token probability statistics ======" "75.0%   Δp" "RMS Δp    :"; do
    grep -qF -- "$h" "$T/self.txt" || { fail kld_report_layout "no '$h'"; break; }
done && ok kld_report_layout
[ "$(grep -c '^ *[0-9]\+ \+[0-9.]\+ ± ' "$T/self.txt")" = 8 ] && ok kld_chunk_table || fail kld_chunk_table "$(head -12 "$T/self.txt")"

# a plan moves the model; the base side may carry a plan too
"$BIN" perplexity -m "$M" $F32 --repeat-layers 1,3 --kl-divergence-base "$T/base.kld" --kl-divergence > "$T/plan.txt" 2> "$T/err"
python3 - "$T/plan.txt" <<'PY' && ok kld_plan_moves || fail kld_plan_moves "$(grep -E 'KLD|top' "$T/plan.txt" | head -3) $(tail -2 "$T/err")"
import re, sys
s = open(sys.argv[1]).read()
kld = float(re.search(r'Mean    KLD: +([0-9.]+)', s).group(1))
top = float(re.search(r'Same top p: +([0-9.]+)', s).group(1))
assert 0.001 < kld < 20 and 0 < top < 100, (kld, top)
PY
grep -q "^plan: --repeat-layers 1,3: 5 -> 7 layers" "$T/err" && grep -q "text not checked" "$T/err" && ok kld_plan_report || fail kld_plan_report "$(head -5 "$T/err")"
"$BIN" perplexity -m "$M" -f "$T/text.txt" -c 128 --chunks 8 $F32 --layer-map 0,1,2,1,2,3,4 --kl-divergence-base "$T/plan.kld" > /dev/null 2>&1
"$BIN" perplexity -m "$M" -f "$T/text.txt" $F32 --repeat-layers 1,3 --kl-divergence-base "$T/plan.kld" --kl-divergence > "$T/pp.txt" 2> "$T/err"
grep -q "^Mean    KLD:   0.000000" "$T/pp.txt" && grep -q "^base: stories260K.gguf --layer-map 0,1,2,1,2,3,4" "$T/err" \
    && ok kld_plan_both_sides || fail kld_plan_both_sides "$(grep KLD "$T/pp.txt" | head -1) $(grep base: "$T/err")"
"$BIN" perplexity -m "$M" $F32 --chunks 3 --kl-divergence-base "$T/base.kld" --kl-divergence > "$T/c3.txt" 2>/dev/null
[ "$(grep -c '^ *[0-9]\+ \+[0-9.]\+ ± ' "$T/c3.txt")" = 3 ] && ok kld_fewer_chunks || fail kld_fewer_chunks "$(head -6 "$T/c3.txt")"

# refusals: each says why
expect_error kld_other_text "another text" "$BIN" perplexity -m "$M" -f "$T/other.txt" --kl-divergence-base "$T/base.kld" --kl-divergence
expect_error kld_other_c "made with -c 128" "$BIN" perplexity -m "$M" -c 64 --kl-divergence-base "$T/base.kld" --kl-divergence
expect_error kld_more_chunks "holds 8 chunks; 9 asked" "$BIN" perplexity -m "$M" --chunks 9 --kl-divergence-base "$T/base.kld" --kl-divergence
"$BIN" synth --arch llama --n-embd 32 --n-layer 2 --n-head 4 --n-ff 64 --n-vocab 300 -o "$T/v300.gguf" 2>/dev/null
expect_error kld_other_vocab "vocabulary of 512 tokens; this model has 354" "$BIN" perplexity -m "$T/v300.gguf" --kl-divergence-base "$T/base.kld" --kl-divergence
expect_error kld_no_base "needs --kl-divergence-base" "$BIN" perplexity -m "$M" --kl-divergence
expect_error kld_missing_base "cannot open" "$BIN" perplexity -m "$M" --kl-divergence-base "$T/nope.kld" --kl-divergence
head -c 5000 "$T/base.kld" > "$T/trunc.kld"
expect_error kld_truncated "truncated" "$BIN" perplexity -m "$M" --kl-divergence-base "$T/trunc.kld" --kl-divergence
{ printf '_logits_'; tail -c +9 "$T/base.kld"; } > "$T/llama.kld"
expect_error kld_llama_file "llama.cpp" "$BIN" perplexity -m "$M" --kl-divergence-base "$T/llama.kld" --kl-divergence
expect_error kld_not_base "magic" "$BIN" perplexity -m "$M" --kl-divergence-base "$T/text.txt" --kl-divergence

# bad input
: > "$T/empty.txt"
expect_error ppl_empty_text "has 1 tokens" "$BIN" perplexity -m "$M" -f "$T/empty.txt" -c 128
printf 'Once upon a time there was a cat.' > "$T/short.txt"
expect_error ppl_short_text "at least 256 (two chunks' worth)" "$BIN" perplexity -m "$M" -f "$T/short.txt" -c 128
expect_error ppl_c_too_large "trained on (2048 tokens)" "$BIN" perplexity -m "$M" -f "$T/text.txt" -c 4096
expect_error ppl_c_too_small "too small" "$BIN" perplexity -m "$M" -f "$T/text.txt" -c 2
expect_error ppl_no_text "no text" "$BIN" perplexity -m "$M"
expect_error ppl_no_model "no model" "$BIN" perplexity -f "$T/text.txt"
expect_error ppl_bad_chunks "positive" "$BIN" perplexity -m "$M" -f "$T/text.txt" --chunks 0
expect_error ppl_missing_text "cannot open" "$BIN" perplexity -m "$M" -f "$T/nope.txt"
expect_error ppl_bad_plan "block 1" "$BIN" perplexity -m "$M" -f "$T/text.txt" --repeat-layers 4,9
# a failed run leaves no base file
"$BIN" perplexity -m "$M" -f "$T/short.txt" -c 128 --kl-divergence-base "$T/fail.kld" > /dev/null 2>&1
[ ! -e "$T/fail.kld" ] && [ -z "$(ls "$T" | grep 'fail.kld.tmp')" ] && ok kld_failed_run_leaves_nothing || fail kld_failed_run_leaves_nothing "$(ls "$T")"
expect_error kld_base_unwritable "cannot create" "$BIN" perplexity -m "$M" -f "$T/text.txt" -c 64 --chunks 2 --kl-divergence-base "$T/no/such/dir/b.kld"

# the model's default context caps -c when -c is not given
"$BIN" synth --arch llama --n-embd 32 --n-layer 2 --n-head 4 --n-ff 64 --vocab "$M" --ctx 64 -o "$T/ctx64.gguf" 2>/dev/null
"$BIN" perplexity -m "$T/ctx64.gguf" -f "$T/text.txt" --chunks 2 > /dev/null 2> "$T/err" && grep -q "chunks of 64 tokens" "$T/err" \
    && ok ppl_default_c_capped || fail ppl_default_c_capped "$(tail -2 "$T/err")"
"$BIN" perplexity --help > "$T/help.txt" && grep -q -- "--kl-divergence-base" "$T/help.txt" && ok ppl_help || fail ppl_help "no help"
