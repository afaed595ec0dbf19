# Speculative decoding: greedy text identical to plain decoding in run, chat
# and bench (stories260K, a synthetic qwen3, qwen35-tiny with its MTP head,
# each with and without --repeat-layers); sampling runs; refusals.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
Q3="$S/models/synth/qwen3-tiny.gguf"
Q35="$S/models/synth/qwen35-tiny.gguf"

# same_text NAME MODEL "PLAIN FLAGS" "SPEC FLAGS" PROMPT-FLAGS...
same_text() {
    local name=$1 model=$2 plain=$3 spec=$4 threads=(-t 1); shift 4
    [[ " $plain " == *" -t "* ]] && threads=() # a repeated -t is an error: the plan flags give it
    # shellcheck disable=SC2086
    "$BIN" run -m "$model" "${threads[@]}" $plain "$@" -n 40 --temp 0 > "$T/a.txt" 2> "$T/a.err" || { fail "$name" "plain: $(tail -1 "$T/a.err")"; return; }
    # shellcheck disable=SC2086
    "$BIN" run -m "$model" "${threads[@]}" $plain $spec "$@" -n 40 --temp 0 > "$T/b.txt" 2> "$T/b.err" || { fail "$name" "spec: $(tail -1 "$T/b.err")"; return; }
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
# quantized weights on the native kernels: with AVX-512, packed Q4_K / Q6_K
# batches take llama.cpp's batch orders (docs/fidelity.md, items 7-8) and an
# F32 cache's attention its batch order for V (item 11), which differ from the
# one-token orders in the last bits; the target verifies in the one-token
# orders (rp_compute.one_tok) and decodes the prompt as plain decoding does, so
# the text is plain decoding's (before: the F32-cache runs parted at a near tie
# within 40 tokens, on all three of these prompts)
Q4KM="$S/models/synth/qwen3-tiny-Q4_K_M.gguf"
same_text greedy_qwen3_q4km "$Q4KM" "--repeat-layers 2,5 -t 2" "--spec --draft-max 6 --draft-p-min 0" --tokens "$TOK"
same_text greedy_qwen3_q4km_f32cache "$Q4KM" "-t 2 -ctk f32 -ctv f32" "--spec --draft-max 6 --draft-p-min 0" --tokens "$TOK"
same_text greedy_qwen3_q4km_f32cache_short "$Q4KM" "-t 2 -ctk f32 -ctv f32" "--spec --draft-max 6 --draft-p-min 0" --tokens 1,90,33,12
same_text greedy_qwen3_q4km_f32cache_plan "$Q4KM" "-t 2 -ctk f32 -ctv f32" "--draft-plan 0..2,5..7 --draft-max 3 --draft-p-min 0" --tokens "$TOK"
# the MTP target on Q4_K_M with an F32 cache: its prompt rows are all outputs
# (the head's hidden states), in the one-token orders from the last
# feed-forward on (rp_compute.one_tok_out), as plain decoding's one output row
"$BIN" quantize "$Q35" "$T/q35-q4km.gguf" Q4_K_M -t 2 > /dev/null 2>&1
same_text greedy_qwen35_mtp_q4km_f32cache "$T/q35-q4km.gguf" "-t 2 -ctk f32 -ctv f32" "--spec-mtp --draft-max 3 --draft-p-min 0" --tokens 5,6,7,8,9,10,11,12,13,14,15,16
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
# three turns on Q4_K_M with an F32 cache (batch orders differ from one-token
# orders on AVX-512): each turn's tokens are decoded as plain chat decodes
# them, the answer's tokens in their one-token orders (before: different text)
printf 'Hello there\nTell me a story\nAnd another one\n' > "$T/chat3.in"
"$BIN" chat -m "$Q4KM" --chat-template chatml --temp 0 -n 30 -t 2 -ctk f32 -ctv f32 < "$T/chat3.in" > "$T/c1.txt" 2>/dev/null
"$BIN" chat -m "$Q4KM" --chat-template chatml --temp 0 -n 30 -t 2 -ctk f32 -ctv f32 --spec --draft-max 6 --draft-p-min 0 < "$T/chat3.in" > "$T/c2.txt" 2> "$T/c.err"
[ -s "$T/c1.txt" ] && cmp -s "$T/c1.txt" "$T/c2.txt" && ok chat_q4km_f32cache_same_answers || fail chat_q4km_f32cache_same_answers "$(tail -3 "$T/c.err")"

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

# ---- serve: every slot speculates; the drafted rows of all slots are verified in one batch
cat > "$T/serve_check.py" <<'PY'
import json, subprocess, sys, threading, urllib.request
port, binary, model, ctx, group = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
def post(path, body):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())
def get(path):
    with urllib.request.urlopen("http://127.0.0.1:%s%s" % (port, path), timeout=30) as r:
        return json.loads(r.read())
def run(flags, n):
    cmd = [binary, "run", "-m", model, "-n", str(n), "--temp", "0", "-t", "1", "-c", ctx] + flags
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=300).stdout
    return (out[:-1] if out.endswith(b"\n") else out).decode("utf-8", "replace")
def check(name, cond, why):
    print(("ok %s" % name) if cond else ("FAIL %s: %s" % (name, why)), flush=True)
def concurrent(jobs):
    res = [None] * len(jobs)
    def one(i):
        try:
            res[i] = post(*jobs[i])
        except Exception as e:  # reported by the checks
            res[i] = {"error": str(e)}
    th = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
    for t in th: t.start()
    for t in th: t.join()
    return res
if group == "plans":
    prompts = ["Once upon a time", "The little dog", "Lily and Ben went to the park and"]
    for name, plan in (("stories260K.gguf", []), ("r13", ["--repeat-layers", "1,3"])):
        got = concurrent([("/completion", {"model": name, "prompt": p, "n_predict": 40, "temperature": 0})
                          for p in prompts])
        for i, p in enumerate(prompts):
            want = run(plan + ["-p", p], 40)
            g = got[i].get("content")
            check("serve_greedy_%s_%d" % (name.split(".")[0], i), g == want, "got %r want %r" % (g, want))
            tm = got[i].get("timings", {})
            check("serve_draft_counts_%s_%d" % (name.split(".")[0], i),
                  tm.get("draft_n", 0) > 0 and 0 <= tm.get("draft_n_accepted", -1) <= tm["draft_n"], tm)
    want = run(["-p", prompts[0]], 40)
    stop = want[12:16]
    j = post("/v1/completions", {"prompt": prompts[0], "max_tokens": 40, "temperature": 0, "stop": [stop]})
    c = j["choices"][0]
    check("serve_stop_string", c["text"] == want[:want.index(stop)] and c["finish_reason"] == "stop", (c, stop))
    j = post("/completion", {"prompt": prompts[1], "n_predict": 30, "temperature": 0.8, "seed": 3})
    check("serve_sampling", j.get("tokens_predicted", 0) > 0 and j["timings"]["draft_n"] >= 0, j)
    props = get("/props")
    check("serve_props", "draft: plan 0,1,3,4" in json.dumps(props), json.dumps(props)[:300])
else:  # mtp: token prompts, generation to the end of a small context
    toks = [[1, 50, 260, 300, 301, 77], [1, 90, 400, 12]]
    got = concurrent([("/completion", {"prompt": t, "temperature": 0}) for t in toks])
    for i, t in enumerate(toks):
        want = run(["--tokens", ",".join(map(str, t))], -1)
        g = got[i].get("content")
        check("serve_mtp_to_context_end_%d" % i, g == want and got[i].get("stop_type") == "limit",
              "got %r want %r (%s)" % (g, want, got[i].get("stop_type")))
PY
serve_spec() { # NAME MODEL CTX GROUP SERVE-ARGS...
    local name=$1 model=$2 ctx=$3 group=$4; shift 4
    "$BIN" serve -m "$model" --port 0 -t 1 -c "$ctx" "$@" > "$T/$name.out" 2> "$T/$name.err" &
    local pid=$! port=""
    for _ in $(seq 1 300); do
        port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/$name.err" | grep -o '[0-9]*$')
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then fail "$name" "server did not start: $(tail -3 "$T/$name.err")"; kill -KILL "$pid" 2>/dev/null; return; fi
    timeout 300 python3 "$T/serve_check.py" "$port" "$BIN" "$model" "$ctx" "$group" || fail "$name" "checks crashed"
    kill -TERM "$pid"; wait "$pid"
    local rc=$?
    [ "$rc" -eq 0 ] && ok "${name}_exit" || fail "${name}_exit" "exit $rc: $(tail -3 "$T/$name.err")"
}
serve_spec serve_spec_plans "$M" 256 plans -np 3 -b 32 --plan r13=1,3 --draft-plan 0,1,3,4 --draft-max 4 --draft-p-min 0
serve_spec serve_spec_mtp "$Q35" 48 mtp -np 2 --spec-mtp --draft-max 3 --draft-p-min 0
