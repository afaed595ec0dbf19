# The two real trained models (models/README.md, "Real models"; fetched by
# scripts/fetch-models.sh when missing) against llama.cpp 0c1e570's goldens
# (tests/reference/make_real_goldens.sh): logits of every position (top-64
# per position and the whole last row), greedy 64-token text, SmolLM2's chat
# answer, tokenizer vectors of hard strings.
. "$(dirname "$0")/_lib.sh"
G=tests/golden/real
PLAN=""
MD="${REPRISE_MODELS:-$HOME/.cache/reprise}"
SMOL="$MD/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA="$MD/gemma-3-270m-q4_k_m.gguf"
if [ ! -f "$SMOL" ] || [ ! -f "$GEMMA" ]; then
    scripts/fetch-models.sh > "$T/fetch" 2>&1 || { fail real_models_fetch "$(tail -3 "$T/fetch")"; exit 0; }
fi

# logits: NAME MODEL N_VOCAB MAX_NMSE MIN_TOP1 (PLAN: extra run options, a
# layer plan)
logits() {
    local ids
    ids=$(tr -s ' \n' ',' < "$G/$1.tokens.txt" | sed 's/^,//; s/,$//')
    # shellcheck disable=SC2086
    "$BIN" run -m "$2" $PLAN --tokens "$ids" -ctk f32 -ctv f32 -q --dump-logits "$T/$1.f32" > /dev/null 2> "$T/err" \
        || { fail "real_logits_$1" "$(head -c 300 "$T/err")"; return; }
    if python3 tests/reference/real_golden.py check "$T/$1.f32" "$3" "$G/$1" "$4" "$5" > "$T/out"; then
        ok "real_logits_$1 ($(cat "$T/out"))"
    else
        fail "real_logits_$1" "$(cat "$T/out") (bounds: nmse $4, top-1 $5)"
    fi
}
# greedy: NAME MODEL N_VOCAB GAP. On AVX-512 machines (EXACT=1): reprise's
# greedy continuation decoded as generation runs it (the prompt as one batch,
# then one token at a time; tests/cli/greedy_decode.py) is llama.cpp's 64 ids,
# every one: each engine's one-token decode follows its own orders (V summed
# in 64 lanes, not a batch's 16; docs/fidelity.md) and reprise follows both.
# Elsewhere (other kernel orders): the prompt and llama.cpp's continuation as
# one batch, every argmax the next id llama.cpp chose, or agreeing up to a
# tie closer than GAP
greedy() {
    local ids
    if [ "$EXACT" = 1 ]; then
        # shellcheck disable=SC2086
        if REPRISE_LIB="$PWD/$BUILD/libreprise.so" LD_PRELOAD="$ASAN_PRELOAD" \
            ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" python3 tests/cli/greedy_decode.py "$2" \
            "$G/$1.tokens.txt" "$G/$1.greedy.txt" ${PLAN#--repeat-layers } > "$T/out" 2>&1; then
            ok "real_greedy_$1 ($(cat "$T/out"))"
        else
            fail "real_greedy_$1" "$(tail -3 "$T/out")"
        fi
        return
    fi
    ids=$(cat "$G/$1.tokens.txt" "$G/$1.greedy.txt" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
    # shellcheck disable=SC2086
    "$BIN" run -m "$2" $PLAN --tokens "$ids" -ctk f32 -ctv f32 -q --dump-logits "$T/g.f32" > /dev/null 2>&1
    python3 - "$T/g.f32" "$3" "$G/$1.tokens.txt" "$G/$1.greedy.txt" "$4" > "$T/out" <<'PY'
import array, sys
nv = int(sys.argv[2])
a = array.array("f"); a.frombytes(open(sys.argv[1], "rb").read())
n0 = len(open(sys.argv[3]).read().split()); want = [int(t) for t in open(sys.argv[4]).read().split()]
got = [max(range(nv), key=lambda i: a[(n0 - 1 + k) * nv + i]) for k in range(len(want))]
same = 0
while same < len(want) and got[same] == want[same]: same += 1
if same == len(want):
    print(f"{same}/{len(want)} greedy tokens as llama.cpp"); sys.exit(0)
row = a[(n0 - 1 + same) * nv:(n0 + same) * nv]
gap = row[got[same]] - row[want[same]]
print(f"{same}/{len(want)} greedy tokens as llama.cpp, then a near tie: "
      f"logit gap {gap:.3g} between its choice and reprise's")
sys.exit(0 if gap < float(sys.argv[5]) else 1)
PY
    [ $? = 0 ] && ok "real_greedy_$1 ($(cat "$T/out"))" || fail "real_greedy_$1" "$(cat "$T/out")"
}
# Both are exact against llama.cpp's native x86 build (docs/fidelity.md; on
# AVX-512: Gemma's Q4_K/Q6_K follow llama.cpp's prompt orders on packed
# weights only)
logits smollm2-chat "$SMOL" 49152 1e-6 1
logits smollm2-code "$SMOL" 49152 1e-6 1
# a sanitizer tree's library needs the ASan runtime first in a Python process
ASAN_PRELOAD=""
nm "$BIN" 2> /dev/null | grep -q __asan_init && ASAN_PRELOAD="$(cc -print-file-name=libasan.so)"
GB="1e-6 1" EXACT=1
for f in avx512f avx512bw avx512vl avx512dq avx512_vnni avx512vbmi; do
    grep -qw "$f" /proc/cpuinfo 2> /dev/null || { GB="5e-2 0.9"; EXACT=0; } # other orders
done
logits gemma3-prose "$GEMMA" 262144 $GB
# a sanitizer tree (SANITIZED, _lib.sh) runs one check of each kind on each
# path (the release tree checks every golden): the logits of gemma3-code,
# the plan's second and third logits goldens, the greedy decodes but
# smollm2-chat, and Gemma's perplexity are the release tree's alone
[ "$SANITIZED" = 1 ] || logits gemma3-code "$GEMMA" 262144 $GB
greedy smollm2-chat "$SMOL" 49152 0.05
# a plan against the merged file: reprise runs --repeat-layers 10,14 on the
# original; llama.cpp ran the file `reprise merge` writes for that plan (the
# repeated layers materialized, 34 blocks): bit for bit expected, also on
# the prompt with llama.cpp's 64 greedy tokens as one batch (rys-cont: so
# every greedy choice of a batch is llama.cpp's); its one-token decodes part
# from its own batch after 20 tokens at a near tie (0.15)
PLAN="--repeat-layers 10,14"
logits smollm2-rys-chat "$SMOL" 49152 1e-6 1
if [ "$SANITIZED" = 0 ]; then
    logits smollm2-rys-code "$SMOL" 49152 1e-6 1
    logits smollm2-rys-cont "$SMOL" 49152 1e-6 1
    greedy smollm2-rys-chat "$SMOL" 49152 0.2
    PLAN=""
    greedy smollm2-code "$SMOL" 49152 0.2
    greedy gemma3-prose "$GEMMA" 262144 0.5
    greedy gemma3-code "$GEMMA" 262144 0.5
fi
PLAN=""

# perplexity: the first 512-token chunk of wiki.test.raw against
# llama-perplexity's (-c 512 --chunks 1 -fa off -ctk f32 -ctv f32, the
# figures in tests/golden/real/*.ppl.txt), within 0.02 %
ppl() { # NAME MODEL
    "$BIN" perplexity -m "$2" -f "$S/text/wiki.test.raw" -c 512 --chunks 1 -ctk f32 -ctv f32 \
        > "$T/ppl.txt" 2> "$T/err" || { fail "real_ppl_$1" "$(tail -2 "$T/err")"; return; }
    python3 - "$T/ppl.txt" "$G/$1-wiki-c512-1.ppl.txt" > "$T/out" <<'PY'
import re, sys
fin = lambda s: [float(x) for x in re.search(r'Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)', s).groups()]
(p, u), (gp, gu) = fin(open(sys.argv[1]).read()), fin(open(sys.argv[2]).read())
print(f"PPL {p} +/- {u}, llama-perplexity {gp} +/- {gu}")
sys.exit(0 if abs(p - gp) <= 2e-4 * gp and abs(u - gu) <= 2e-4 * gu else 1)
PY
    [ $? = 0 ] && ok "real_ppl_$1 ($(cat "$T/out"))" || fail "real_ppl_$1" "$(cat "$T/out")"
}
ppl smollm2 "$SMOL"
[ "$SANITIZED" = 1 ] || ppl gemma3 "$GEMMA"

# chat: SmolLM2 through its ChatML template answers a factual question
out=$("$BIN" chat -m "$SMOL" -p "What is the capital of France? Answer in one short sentence." \
    -n 24 --temp 0 -ctk f32 -ctv f32 -q < /dev/null 2> "$T/err")
echo "$out" | grep -q "Paris" && ok real_chat_paris || fail real_chat_paris "'$(echo "$out" | head -c 200)' $(head -c 200 "$T/err")"

# tokenizer: hard strings as llama-tokenize splits them (BOS as it adds it)
tok() { # NAME MODEL
    local n=0 bad=0 want got s
    while IFS= read -r line && IFS= read -r want <&3; do
        n=$((n + 1))
        s=$(printf '%b' "$line")
        got=$("$BIN" tokenize -m "$2" -p "$s" 2>/dev/null)
        [ "$got" = "$want" ] || { bad=$((bad + 1)); echo "  line $n: got '$got' want '$want'" >> "$T/tokbad"; }
    done < "$G/hard-strings.txt" 3< "$G/$1.hard.ids"
    [ "$bad" = 0 ] && [ "$n" -gt 5 ] && ok "real_tokenize_$1 ($n strings)" \
        || fail "real_tokenize_$1" "$bad of $n differ: $(head -c 400 "$T/tokbad" 2>/dev/null)"
}
tok smollm2 "$SMOL"
tok gemma3 "$GEMMA"
