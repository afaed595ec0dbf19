# reprise serve: real HTTP on loopback against stories260K. Each server is
# started on a free port (--port 0; the port is read from the startup log) and
# stopped by its pid. The checks themselves are in tests/py/.
. "$(dirname "$0")/_lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M="$S/models/stories260K.gguf"
PYCHK="$ROOT/tests/py/serve_http.py"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$T"' EXIT

export BIN MODEL="$M" MODEL_ID="stories260K.gguf" GOLDEN_TOKENS="$(cat "$S/golden/stories260K/p1.tokens.txt")"
ASAN=0
if nm "$BIN" 2>/dev/null | grep -q __asan_init; then ASAN=1; fi

# start_server NAME ARGS...: sets PORT and PID (the log is $T/NAME.err); SMODEL overrides the model
start_server() {
    local name=$1; shift
    "$BIN" serve -m "${SMODEL:-$M}" --port 0 -t 1 "$@" > "$T/$name.out" 2> "$T/$name.err" &
    PID=$!
    PIDS+=("$PID")
    PORT=""
    for _ in $(seq 1 300); do
        PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/$name.err" | grep -o '[0-9]*$')
        [ -n "$PORT" ] && return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    fail "start_$name" "server did not start: $(tail -3 "$T/$name.err")"
    return 1
}

# stop_server NAME: SIGTERM, then the exit status must be 0 within 30 s
stop_server() {
    local name=$1 rc
    kill -TERM "$PID" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$PID" 2>/dev/null; then
        kill -KILL "$PID"; wait "$PID" 2>/dev/null
        fail "exit_$name" "still running 30 s after SIGTERM"; return
    fi
    wait "$PID"; rc=$?
    if [ "$rc" -eq 0 ] && grep -q "^serve: stopped" "$T/$name.err"; then ok "exit_$name"
    else fail "exit_$name" "exit $rc: $(grep -v '^serve: [A-Z/]' "$T/$name.err" | tail -5)"; fi
}

# run_checker NAME CMD...: a python checker's "ok"/"FAIL" lines; a checker that
# exits non-zero (a crash, the timeout) or reports nothing is a failure too
run_checker() {
    local name=$1 rc; shift
    "$@" > "$T/checker.log" 2>&1
    rc=$?
    cat "$T/checker.log"
    if [ "$rc" -ne 0 ]; then
        fail "$name" "the checker exited $rc: $(grep -v '^ok ' "$T/checker.log" | tail -3)"
    elif ! grep -q '^ok ' "$T/checker.log"; then
        fail "$name" "the checker reported no check: $(tail -3 "$T/checker.log")"
    fi
}

checks() { # GROUP [VAR=VALUE...]: the python checks of one group against $PORT
    local group=$1; shift
    run_checker "checker_$group" env "$@" SERVER_PID="$PID" timeout 300 python3 "$PYCHK" "$group" "$PORT"
}

# ---- command line -----------------------------------------------------------
expect_error serve_no_model "no model" "$BIN" serve
expect_error serve_bad_parallel "parallel" "$BIN" serve -m "$M" --parallel 0
expect_error serve_bad_port "port" "$BIN" serve -m "$M" --port 70000
expect_error serve_bad_plan "block 1 '4,9'" "$BIN" serve -m "$M" --repeat-layers 4,9 --port 0
expect_error serve_bad_template "chat-template" "$BIN" serve -m "$M" --chat-template no-such-family --port 0
expect_error serve_bad_host "cannot resolve" "$BIN" serve -m "$M" --host no.such.host.invalid --port 0
"$BIN" serve --help > "$T/help.txt" 2>&1 && grep -q -- "--api-key" "$T/help.txt" && grep -q -- "--repeat-layers" "$T/help.txt" \
    && ok serve_help || fail serve_help "$(head -3 "$T/help.txt")"

# ---- A: a plan, 4 slots, prompts fed in chunks of 32 between generated tokens: endpoints,
# greedy == run (which decodes the prompt in one pass), streaming, stops, errors, load
# (under ASan a small quarantine keeps freed memory from counting as growth)
[ "$ASAN" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8"
if start_server A -np 4 -c 256 -b 32 --repeat-layers 1,3 --chat-template chatml --max-body 65536; then
    grep -q "plan: --repeat-layers 1,3: 5 -> 7 layers" "$T/A.err" && ok serve_startup_plan_log \
        || fail serve_startup_plan_log "$(head -5 "$T/A.err")"
    # a second server cannot take the same port
    expect_error serve_port_in_use "cannot listen" "$BIN" serve -m "$M" --port "$PORT"
    checks basic PLAN="--repeat-layers 1,3" CTX=256
    checks errors CTX=256
    if [ "$ASAN" = 1 ]; then
        checks load CLIENTS=32 PER_CLIENT=10 RSS_GROWTH_KIB=32768
    else
        checks load CLIENTS=32 PER_CLIENT=10 RSS_GROWTH_KIB=8192
    fi
    stop_server A
fi

# ---- B: API key, disconnects, the openai client
KEY="test-key-$$"
if start_server B -np 1 -c 8192 --api-key "$KEY" --chat-template chatml; then
    checks auth API_KEY="$KEY"
    checks disconnect API_KEY="$KEY"
    PY="${REPRISE_PY:-$ROOT/build/venv/bin/python}"
    if [ -x "$PY" ] && "$PY" -c "import openai" 2>/dev/null; then
        want=$("$BIN" run -m "$M" -p "Once upon a time" -n 32 --temp 0 -t 1 2>/dev/null)
        run_checker checker_openai_client env API_KEY="$KEY" WANT_GREEDY="$want" timeout 300 "$PY" "$ROOT/tests/py/openai_client.py" "$PORT"
    else
        fail openai_client "the openai client is missing at $PY (scripts/setup.sh installs it; REPRISE_PY overrides)"
    fi
    stop_server B
fi

# ---- C: --timeout
if start_server C -np 1 -c 8192 --timeout 1; then
    checks timeout
    stop_server C
fi

# ---- F: byte tokens that are not UTF-8 by themselves (random weights)
if SMODEL="$S/models/synth/qwen3-tiny-Q8_0.gguf" start_server F -np 2 -c 512; then
    checks bytes MODEL="$S/models/synth/qwen3-tiny-Q8_0.gguf"
    stop_server F
fi

# ---- G: several plans over one copy of the weights: the model, two specs and a plan file
"$BIN" plan save -m "$M" --repeat-layers 3,4 --name rys-3-4 -o "$T/p34.json" -q
"$BIN" plan save -m "$S/models/synth/qwen3-tiny.gguf" --repeat-layers 3,5 --name q -o "$T/q.json" -q
"$BIN" plan save -m "$S/models/synth/qwen3-tiny-Q8_0.gguf" --repeat-layers 1,4 --name q8 -o "$T/q8.json" -q
expect_error serve_plan_bad_name "name 'a b' is not usable" "$BIN" serve -m "$M" --plan "a b=1,3" --port 0
expect_error serve_plan_bad_spec "plan x=4,9: --repeat-layers: block 1 '4,9'" "$BIN" serve -m "$M" --plan x=4,9 --port 0
expect_error serve_plan_duplicate "name 'x' is already served" "$BIN" serve -m "$M" --plan x=1,3 --plan x=2,3 --port 0
expect_error serve_plan_same_as_model "already served (the model itself" "$BIN" serve -m "$M" --plan stories260K.gguf=1,3 --port 0
expect_error serve_plan_other_model "architecture differs" "$BIN" serve -m "$M" --plan "$T/q.json" --port 0
expect_error serve_plan_missing_file "cannot open plan file" "$BIN" serve -m "$M" --plan "x=$T/none.json" --port 0
expect_error serve_plan_empty "nothing after '='" "$BIN" serve -m "$M" --plan "x=" --port 0
expect_error serve_plan_other_weights "content hash differs" "$BIN" serve -m "$S/models/synth/qwen3-tiny.gguf" \
    --plan "$T/q8.json" --port 0
if start_server G -np 2 -c 256 -b 32 --plan rys=1,3 --plan deep=map:0..4,2..4 --plan "$T/p34.json"; then
    grep -q "serve: models 'stories260K.gguf', 'rys', 'deep', 'rys-3-4', 2 slots each" "$T/G.err" && ok serve_multi_startup_log \
        || fail serve_multi_startup_log "$(grep '^serve:' "$T/G.err")"
    checks multiplan CTX=256 SLOTS=2 N_PLAN_FILES=1 \
        PLANS="stories260K.gguf||5;rys|--repeat-layers 1,3|7;deep|--layer-map 0..4,2..4|8;rys-3-4|--plan $T/p34.json|6"
    stop_server G
fi

# ---- H: the weights are mapped once: a server with three plans holds at most the extra plans'
# KV (plus a fixed allowance) more than a server with one, far less than a copy of the weights
Q="$S/models/synth/qwen3-tiny.gguf"
if SMODEL="$Q" start_server H1 -np 2 -c 256 -b 32; then
    PID_ONE=$PID PORT_ONE=$PORT
    # the third plan is a plan file made for the Q8_0 quantization of these weights: --plan-force
    if SMODEL="$Q" start_server H3 -np 2 -c 256 -b 32 --plan a=2,5 --plan "$T/q8.json" --plan-force; then
        grep -q "^warning: --plan-force: plan 'q8'" "$T/H3.err" && grep -q "models 'qwen3-tiny.gguf', 'a', 'q8'," "$T/H3.err" \
            && ok serve_plan_forced || fail serve_plan_forced "$(grep -v '^  ' "$T/H3.err" | head -5)"
        checks memory PORT_ONE="$PORT_ONE" MODEL="$Q" SLACK_MIB=6 FORCED=q8
        stop_server H3
    fi
    PID=$PID_ONE
    stop_server H1
fi

# ---- D, E: SIGTERM with requests in flight (running ones finish / are cut at --grace)
if start_server D -np 2 -c 8192 --grace 60; then
    # 2000 tokens keep both slots busy for about a second (far longer under ASan) after
    # the queued requests are seen: the SIGTERM always finds them queued
    checks sigterm SIGTERM_TOKENS=2000 SIGTERM_EXPECT=finish
    stop_server D
fi
if start_server E -np 2 -c 8192 --grace 0.3; then
    checks sigterm SIGTERM_TOKENS=100000 SIGTERM_EXPECT=cut
    stop_server E
fi

# ---- S: structured output, log-probabilities, request fields, conventions (tests/py/serve_structured.py)
if start_server S -np 2 -c 512 --chat-template chatml --cors '*'; then
    run_checker checker_structured env MODEL_ID="stories260K.gguf" SERVER_LOG="$T/S.err" timeout 300 \
        python3 "$ROOT/tests/py/serve_structured.py" main "$PORT"
    stop_server S
fi
if start_server SP -np 1 -c 512 --spec --draft-p-min 0; then
    run_checker checker_structured_spec env MODEL_ID="stories260K.gguf" timeout 300 \
        python3 "$ROOT/tests/py/serve_structured.py" spec "$PORT"
    stop_server SP
fi
if start_server PR -np 2 -c 256 --plan-requests 1; then
    run_checker checker_plan_requests env MODEL_ID="stories260K.gguf" BIN="$BIN" MODEL="$M" timeout 300 \
        python3 "$ROOT/tests/py/serve_structured.py" planreq "$PORT"
    stop_server PR
fi
