# Hardening (issue 22): outputs that must not be replaced, inputs that must not
# hang or exhaust memory, signals that must not leave temporary files, values
# that must be refused. Each check fails on the code before the fix.
. "$(dirname "$0")/_lib.sh"
Q="$S/models/synth/qwen3-tiny.gguf"
M="$S/models/stories260K.gguf"

# ---- outputs -----------------------------------------------------------------
cp "$Q" "$T/in.gguf"; chmod u+w "$T/in.gguf"
expect_error quantize_in_is_out "input of this command" "$BIN" quantize "$T/in.gguf" "$T/in.gguf" Q8_0
cmp -s "$Q" "$T/in.gguf" && ok quantize_in_is_out_untouched || fail quantize_in_is_out_untouched "the input changed"
ln -s in.gguf "$T/alias.gguf"
expect_error quantize_in_is_out_via_link "input of this command" "$BIN" quantize "$T/in.gguf" "$T/alias.gguf" Q8_0
expect_exit quantize_in_is_out_forced 0 "$BIN" quantize "$T/in.gguf" "$T/in.gguf" Q8_0 --force
expect_error gguf_copy_in_is_out "input of this command" "$BIN" gguf-copy "$M" "$M"
expect_error merge_in_is_out "an input of this command" "$BIN" merge -m "$T/in.gguf" --repeat-layers 0-1 -o "$T/in.gguf"

# a symbolic link output writes its target, which keeps its mode
cp "$M" "$T/target.gguf"; chmod 0640 "$T/target.gguf"; ln -s target.gguf "$T/link.gguf"
"$BIN" gguf-copy "$Q" "$T/link.gguf" 2> "$T/err"
if [ -L "$T/link.gguf" ] && cmp -s "$Q" "$T/target.gguf" && [ "$(stat -c %a "$T/target.gguf")" = 640 ]; then
    ok output_symlink_target_written
else
    fail output_symlink_target_written "link kept: $([ -L "$T/link.gguf" ] && echo yes || echo no), mode $(stat -c %a "$T/target.gguf"): $(cat "$T/err")"
fi
cp "$M" "$T/ro.gguf"; chmod 0444 "$T/ro.gguf"
expect_error output_read_only_refused "read-only" "$BIN" gguf-copy "$Q" "$T/ro.gguf"
mkfifo "$T/out.fifo"
expect_error output_fifo_refused "FIFO" "$BIN" quantize "$M" "$T/out.fifo" Q8_0
[ -p "$T/out.fifo" ] && ok output_fifo_kept || fail output_fifo_kept "the FIFO was replaced"
# a character device is written through (root could otherwise replace /dev/null)
expect_exit output_dev_null 0 "$BIN" quantize "$M" /dev/null Q8_0
[ -c /dev/null ] && ok output_dev_null_kept || fail output_dev_null_kept "/dev/null is no longer a device"

# the tools' own writers (run --dump-logits, --dump-tensors) follow the same rules
cp "$M" "$T/self.gguf"; chmod u+w "$T/self.gguf"
expect_error dump_logits_in_is_out "input of this command" "$BIN" run -m "$T/self.gguf" -p hi --dump-logits "$T/self.gguf"
cmp -s "$M" "$T/self.gguf" && ok dump_logits_in_is_out_untouched || fail dump_logits_in_is_out_untouched "the model changed"
expect_error dump_logits_fifo_refused "FIFO" timeout 20 "$BIN" run -m "$M" -p hi --dump-logits "$T/out.fifo"
echo old > "$T/ro.f32"; chmod 0444 "$T/ro.f32"
expect_error dump_logits_read_only_refused "read-only" "$BIN" run -m "$M" -p hi --dump-logits "$T/ro.f32"
echo old > "$T/lt.f32"; chmod 0640 "$T/lt.f32"; ln -s lt.f32 "$T/ll.f32"
"$BIN" run -m "$M" -p hi --dump-logits "$T/ll.f32" > /dev/null 2> "$T/err"
if [ -L "$T/ll.f32" ] && [ "$(stat -c %s "$T/lt.f32")" -gt 100 ] && [ "$(stat -c %a "$T/lt.f32")" = 640 ]; then
    ok dump_logits_symlink_target_written
else
    fail dump_logits_symlink_target_written "link kept: $([ -L "$T/ll.f32" ] && echo yes || echo no), size $(stat -c %s "$T/lt.f32"), mode $(stat -c %a "$T/lt.f32"): $(head -c 200 "$T/err")"
fi
ls "$T" | grep -q '\.tmp' && fail dump_logits_no_temp "$(ls "$T" | grep '\.tmp')" || ok dump_logits_no_temp
mkdir -p "$T/tr"; mkfifo "$T/tr/index.tsv"
expect_error dump_tensors_index_fifo_refused "FIFO" timeout 20 "$BIN" run -m "$M" -p hi -n 1 --dump-tensors "$T/tr"

# SIGINT / SIGTERM / SIGHUP during a write leave no temporary file
for sig in INT TERM HUP; do
    rm -f "$T"/sig.gguf*
    "$BIN" quantize -t 1 "$Q" "$T/sig.gguf" IQ4_XS 2> /dev/null &
    pid=$!
    for _ in $(seq 500); do compgen -G "$T/sig.gguf.tmp.*" > /dev/null && break; sleep 0.01; done
    seen=$(compgen -G "$T/sig.gguf.tmp.*" > /dev/null && echo yes || echo no)
    kill -"$sig" "$pid"; wait "$pid" 2> /dev/null
    left=$(ls "$T" | grep -c 'sig.gguf')
    if [ "$seen" = yes ] && [ "$left" -eq 0 ]; then ok "quantize_sig${sig}_no_temp"; else fail "quantize_sig${sig}_no_temp" "temp seen: $seen, left: $(ls "$T" | grep sig.gguf)"; fi
done

# ---- inputs ------------------------------------------------------------------
mkfifo "$T/model.fifo"
expect_error model_fifo_refused "FIFO" timeout 10 "$BIN" run -m "$T/model.fifo" -p hi -n 1
cp "$M" "$T/m.gguf"; chmod u+w "$T/m.gguf"; mkfifo "$T/m.gguf.rphash"
expect_exit rphash_fifo_ignored 0 timeout 20 "$BIN" plan hash "$T/m.gguf"
rm -f "$T/m.gguf.rphash"; ln -s /dev/zero "$T/m.gguf.rphash"
expect_exit rphash_dev_zero_ignored 0 timeout 20 "$BIN" plan hash "$T/m.gguf"
expect_error text_dev_zero_bounded "limit for a text file" timeout 60 "$BIN" run -m "$M" -f /dev/zero -n 1

# ---- the HTTP connection layer -------------------------------------------------
start_server() { # NAME ARGS...: sets PORT and PID
    local name=$1; shift
    "$BIN" serve -m "$M" --port 0 -t 1 "$@" > "$T/$name.out" 2> "$T/$name.err" &
    PID=$!
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
stop_server() {
    kill -TERM "$PID" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PID" 2>/dev/null && { fail "stop_$1" "still running"; kill -KILL "$PID"; }
    wait "$PID" 2>/dev/null
    STOP_RC=$?
}
# http.py PORT CHECK: prints "ok NAME" / "FAIL NAME: why" lines
cat > "$T/http.py" <<'PY'
import socket, sys, time
port, check = int(sys.argv[1]), sys.argv[2]
def ok(n): print("ok " + n)
def fail(n, why): print("FAIL %s: %s" % (n, why))
def exchange(data, src="127.0.0.1", wait=5.0):
    s = socket.socket(); s.bind((src, 0)); s.settimeout(wait); s.connect(("127.0.0.1", port))
    t = time.time(); s.sendall(data); r = b""
    try:
        while True:
            k = s.recv(65536)
            if not k: break
            r += k
    except Exception as e:
        r += b"<" + type(e).__name__.encode() + b">"
    s.close()
    return r, time.time() - t
def status(r): return r.split(b"\r\n", 1)[0].decode("latin-1")
HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
BODY = b'{"prompt": "hi", "max_tokens": 1}'
if check == "framing":
    for name, data in [
        ("http_garbage_line_400", b"\x00\x01\x02GARBAGE\r\n\r\n"),
        ("http_garbage_word_400", b"GARBAGE\r\n\r\n"),
        ("http_two_content_lengths_400", b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: 5\r\n\r\n" % len(BODY) + BODY),
        ("http_cl_and_te_400", b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(BODY) + BODY),
    ]:
        r, dt = exchange(data)
        if status(r).startswith("HTTP/1.1 400") and dt < 1.0: ok(name)
        else: fail(name, "%r after %.2f s" % (status(r), dt))
    # an empty line before the request line, its \r and \n in two packets (tests/fuzz/fuzz_http_head.c)
    s = socket.create_connection(("127.0.0.1", port)); s.settimeout(5)
    r = b""
    try:
        s.sendall(b"\r"); time.sleep(0.3); s.sendall(b"\n" + HEALTH)
        while True:
            k = s.recv(4096)
            if not k: break
            r += k
    except Exception:
        pass
    s.close()
    if status(r).startswith("HTTP/1.1 200"): ok("http_split_empty_line_accepted")
    else: fail("http_split_empty_line_accepted", repr(status(r)))
    # 31 empty lines fill the 64 bytes the connection layer looks at: garbage at
    # once (it polled the readable socket in a loop until the header deadline)
    r, dt = exchange(b"\r\n" * 31 + b"T /x HTTP/1.1\r\nHost: x\r\n\r\n")
    if status(r).startswith("HTTP/1.1 400") and dt < 0.5: ok("http_64_bytes_of_empty_lines_400")
    else: fail("http_64_bytes_of_empty_lines_400", "%r after %.2f s" % (status(r), dt))
    # a message whose second content part is refused: 422, and nothing leaks
    # (the first part's text did: LSan at the server's exit, fuzz_http_body)
    chat = b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}]}]}'
    r, dt = exchange(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(chat) + chat)
    if status(r).startswith("HTTP/1.1 422"): ok("http_refused_content_part_422")
    else: fail("http_refused_content_part_422", repr(status(r)))
    r, dt = exchange(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (len(BODY), len(BODY)) + BODY)
    if status(r).startswith("HTTP/1.1 200"): ok("http_equal_content_lengths_accepted")
    else: fail("http_equal_content_lengths_accepted", status(r))
    # a header line every 0.3 s: cut at the header deadline (1 s), with 408
    s = socket.create_connection(("127.0.0.1", port)); s.settimeout(5)
    t = time.time(); s.sendall(b"GET /health HTTP/1.1\r\n"); r = b""
    try:
        for i in range(20):
            s.sendall(b"X-Slow-%d: 1\r\n" % i); time.sleep(0.3)
    except OSError:
        pass
    try:
        while True:
            k = s.recv(4096)
            if not k: break
            r += k
    except Exception:
        pass
    dt = time.time() - t
    if status(r).startswith("HTTP/1.1 408") and dt < 3.0: ok("http_header_deadline_408")
    else: fail("http_header_deadline_408", "%r after %.2f s" % (status(r), dt))
elif check.startswith("slowloris"):
    # 600 sockets that send a request line and then a header line now and then,
    # from other loopback addresses; a normal client is answered at once
    socks, refused = [], 0
    srcs = ["127.0.0.2"] if check == "slowloris_one_ip" else ["127.0.0.%d" % (2 + i % 50) for i in range(50)]
    for i in range(600):
        s = socket.socket(); s.bind((srcs[i % len(srcs)], 0)); s.settimeout(5)
        s.connect(("127.0.0.1", port)); s.sendall(b"GET /health HTTP/1.1\r\nX-A: 1\r\n"); socks.append(s)
    time.sleep(0.3)
    for s in socks:
        try:
            s.sendall(b"X-B: 2\r\n")
        except OSError:
            pass
    worst = 0.0
    for k in range(5):
        r, dt = exchange(HEALTH, wait=5)
        worst = max(worst, dt)
        if not status(r).startswith("HTTP/1.1 200"): worst = 99; break
    if worst < 1.0: ok("http_%s_normal_client_served" % check)
    else: fail("http_%s_normal_client_served" % check, "%r, worst %.2f s" % (status(r), worst))
    n503 = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(64).startswith(b"HTTP/1.1 503"): n503 += 1
        except OSError:
            pass
        s.close()
    if n503 > 0: ok("http_%s_refused_with_503" % check)
    else: fail("http_%s_refused_with_503" % check, "no socket got a 503")
PY
if start_server H1 --header-timeout 1 --chat-template chatml; then
    python3 "$T/http.py" "$PORT" framing
    stop_server H1
    # the ASan tree: a leak reported at exit makes the exit status nonzero
    [ "$STOP_RC" -eq 0 ] && ok serve_exit_clean_after_framing || fail serve_exit_clean_after_framing "exit $STOP_RC: $(grep -A6 'Sanitizer' "$T/H1.err" | head -12)"
fi
if start_server H2; then # the defaults: 128 per address, 512 in all
    python3 "$T/http.py" "$PORT" slowloris_one_ip
    stop_server H2
fi
if start_server H3 --conn-limit 64 --conn-limit-per-ip 0; then
    python3 "$T/http.py" "$PORT" slowloris_many_ips
    stop_server H3
fi
expect_error serve_empty_alias "alias is empty" "$BIN" serve -m "$M" -a "" --port 0

# ---- values ------------------------------------------------------------------
expect_error run_n_minus_2 "-n must be -1" "$BIN" run -m "$M" -p hi -n -2
expect_error run_t_minus_3 "-t must be at least 0" "$BIN" run -m "$M" -p hi -n 1 -t -3
expect_error run_empty_repeat_layers "--repeat-layers is empty" "$BIN" run -m "$M" -p hi -n 1 --repeat-layers ""
expect_error run_empty_layer_map "--layer-map is empty" "$BIN" run -m "$M" -p hi -n 1 --layer-map ""
"$BIN" run -m "$M" -p hi -n 4 -t 10000 --temp 0 > /dev/null 2> "$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "note: -t 10000 is more than the $(getconf _NPROCESSORS_ONLN) cores here: using $(getconf _NPROCESSORS_ONLN)" "$T/err"; then ok run_threads_capped; else fail run_threads_capped "rc $rc: $(head -c 300 "$T/err")"; fi

# ---- weights -----------------------------------------------------------------
# gguf_patch.py IN OUT TENSOR HEX: OUT is IN with every 4-byte word of TENSOR's data set to HEX
cat > "$T/gguf_patch.py" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read()); o = 4
def u(f):
    global o; v = struct.unpack_from('<' + f, d, o)[0]; o += struct.calcsize('<' + f); return v
def s():
    global o; n = u('Q'); v = bytes(d[o:o + n]).decode(); o += n; return v
size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def val(t):
    global o
    if t == 8: s(); return
    if t == 9:
        et = u('I')
        for _ in range(u('Q')): val(et)
        return
    o += size[t]
u('I'); nt = u('Q'); nkv = u('Q'); align = 32
for _ in range(nkv):
    k = s(); t = u('I'); at = o; val(t)
    if k == 'general.alignment': align = struct.unpack_from('<I', d, at)[0]
ts = {}
for _ in range(nt):
    name = s(); nd = u('I'); ne = [u('Q') for _ in range(nd)]; ty = u('I'); off = u('Q')
    n = 1
    for x in ne: n *= x
    ts[name] = (ty, off, n)
base = (o + align - 1) // align * align
ty, off, n = ts[sys.argv[3]]
assert ty == 0, "F32 tensors only"
word = bytes.fromhex(sys.argv[4])
for i in range(n): d[base + off + 4 * i: base + off + 4 * i + 4] = word
open(sys.argv[2], 'wb').write(d)
PY
python3 "$T/gguf_patch.py" "$M" "$T/nan.gguf" output_norm.weight 0000c07f
expect_error nan_weights_error "are not finite" "$BIN" run -m "$T/nan.gguf" -p hi -n 2
python3 "$T/gguf_patch.py" "$M" "$T/inf.gguf" output_norm.weight 0000807f
expect_error inf_weights_error "position [0-9]*) are not finite" "$BIN" run -m "$T/inf.gguf" -p hi -n 2

# inspect prints key and tensor names escaped (no terminal escape gets through)
python3 - "$M" "$T/esc.gguf" <<'PY'
import sys
d = open(sys.argv[1], 'rb').read()
j = d.index(b'output_norm.weight')
d = d[:j] + b'\x1b[2Jut_norm.weight' + d[j + 18:]  # the same length
open(sys.argv[2], 'wb').write(d)
PY
"$BIN" inspect "$T/esc.gguf" > "$T/out" 2>&1
if grep -q $'\x1b' "$T/out"; then fail inspect_escapes_names "an ESC byte reached the output"
elif grep -qF '\x1b[2Jut_norm.weight' "$T/out"; then ok inspect_escapes_names
else fail inspect_escapes_names "$(grep -n norm "$T/out" | head -3)"; fi

# ---- memory bounds of plans ----------------------------------------------------
MAP10K=$(python3 -c "print(','.join(['0..4'] * 2000))") # 10000 steps: 2500 MiB of KV at -c 2048
expect_error plan_over_mem_limit "need 2500.0 MiB of state .* over the memory limit of 1024.0 MiB" "$BIN" run -m "$M" --layer-map "$MAP10K" -p hi -n 1 --mem-limit 1024
expect_error bench_huge_prompt_bounded "1000001 positions need" "$BIN" bench -m "$M" -p 1000000 -n 0 -r 1 --mem-limit 512
ASAN=0; nm "$BIN" 2>/dev/null | grep -q __asan_init && ASAN=1
if [ "$ASAN" = 0 ]; then # --dump-plan allocates no state: it runs in 1 GB of address space
    (ulimit -v 1000000; "$BIN" run -m "$M" --layer-map "$MAP10K" --dump-plan > "$T/out" 2> "$T/err")
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "2500.00 MiB for 1 x 2048" "$T/out"; then ok dump_plan_allocates_nothing; else fail dump_plan_allocates_nothing "rc $rc: $(head -c 300 "$T/err")"; fi
else
    expect_exit dump_plan_allocates_nothing 0 "$BIN" run -m "$M" --layer-map "$MAP10K" --dump-plan
fi

# serve adds up the memory of every context it creates (the model's and each
# --plan's, --parallel slots each): 8.8 + 12.9 + 16.8 MiB, each under 20 MiB alone
SPLANS=(--parallel 4 -c 2048 --plan 'r1=map:0..4,1..4' --plan 'r2=map:0..4,1..4,1..4')
expect_error serve_plans_sum_over_mem_limit "need 38.5 MiB of state and scratch in all (the largest alone 16.8 MiB), over the memory limit of 20.0 MiB" \
    timeout 20 "$BIN" serve -m "$M" --port 0 -t 1 "${SPLANS[@]}" --mem-limit 20
if start_server P1 "${SPLANS[@]}" --mem-limit 40; then ok serve_plans_sum_under_mem_limit; stop_server P1; fi
if start_server P2 --parallel 4 -c 2048 --plan-requests 1 --mem-limit 20; then
    code=$(curl -s -m 20 -o "$T/resp" -w '%{http_code}' -d '{"prompt": "hi", "max_tokens": 1, "plan": "map:0..4,1..4,1..4"}' "http://127.0.0.1:$PORT/v1/completions")
    if [ "$code" = 503 ] && grep -q "needs 16.8 MiB of state and scratch, 25.6 MiB in all with the 1 context served, over the memory limit of 20.0 MiB" "$T/resp"; then
        ok serve_request_plan_sum_over_mem_limit
    else
        fail serve_request_plan_sum_over_mem_limit "$code: $(head -c 300 "$T/resp")"
    fi
    stop_server P2
fi

# ---- convert -------------------------------------------------------------------
HF=tests/fixtures/hf/llama
mkdir -p "$T/hf0" "$T/hf1"
cp "$HF"/*.json "$HF"/model.safetensors "$T/hf0/"
sed 's/"rope_theta": 10000.0/"rope_theta": 0/' "$HF/config.json" > "$T/hf0/config.json"
expect_error convert_rope_theta_zero "rope_theta 0 must be positive" "$BIN" convert "$T/hf0" -o "$T/c0.gguf"
cp "$HF"/*.json "$HF"/model.safetensors "$T/hf1/"
python3 -c "import json,sys; t=json.load(open(sys.argv[1])); t['model']['vocab']={}; t['model']['merges']=[]; json.dump(t, open(sys.argv[2],'w'))" "$HF/tokenizer.json" "$T/hf1/tokenizer.json"
expect_error convert_empty_vocab "model.vocab is empty" "$BIN" convert "$T/hf1" -o "$T/c1.gguf"
[ -e "$T/c0.gguf" ] || [ -e "$T/c1.gguf" ] && fail convert_refusals_leave_nothing "an output was written" || ok convert_refusals_leave_nothing
# tj.py IN OUT PYTHON: OUT is tokenizer.json IN with t changed by PYTHON
tj() { python3 -c "import json,sys; t=json.load(open(sys.argv[1])); $3; json.dump(t, open(sys.argv[2],'w'))" "$1" "$2"; }
convert_warns() { # NAME FIXTURE PYTHON PATTERN: converts, rc 0, stderr matches PATTERN
    local d="$T/hf-$1"
    mkdir -p "$d"; find tests/fixtures/hf/"$2" -maxdepth 1 -type f -exec cp {} "$d/" \;
    tj "tests/fixtures/hf/$2/tokenizer.json" "$d/tokenizer.json" "$3"
    "$BIN" convert "$d" -o "$T/$1.gguf" > /dev/null 2> "$T/err"
    local rc=$?
    if [ "$rc" -eq 0 ] && grep -q -- "$4" "$T/err"; then ok "$1"; else fail "$1" "rc $rc: $(head -c 300 "$T/err")"; fi
}
convert_warns convert_unknown_normalizer_warns llama "t['normalizer']['normalizers'].append({'type': 'NFKC'})" \
    "normalizer\[2\] 'NFKC' is not applied"
convert_warns convert_unknown_normalizer_top_warns qwen2 "t['normalizer'] = {'type': 'Strip', 'strip_left': True, 'strip_right': True}" \
    "normalizer 'Strip' is not applied"
convert_warns convert_spm_pre_tokenizer_warns llama "t['pre_tokenizer'] = {'type': 'Digits', 'individual_digits': True}" \
    "pre_tokenizer 'Digits' is not applied to a SentencePiece-style"
"$BIN" convert tests/fixtures/hf/qwen2 -o "$T/q.gguf" > /dev/null 2> "$T/err"
if [ $? -eq 0 ] && ! grep -qi "warn" "$T/err"; then ok convert_known_normalizers_quiet; else fail convert_known_normalizers_quiet "$(head -c 300 "$T/err")"; fi
mkdir -p "$T/hf-re"; find tests/fixtures/hf/qwen2 -maxdepth 1 -type f -exec cp {} "$T/hf-re/" \;
tj tests/fixtures/hf/qwen2/tokenizer.json "$T/hf-re/tokenizer.json" "t['pre_tokenizer']['pretokenizers'][0]['pattern']['Regex'] = '(['"
expect_error convert_bad_split_regex "pre-tokenizer (1 Split regex(es) starting '(\['" "$BIN" convert "$T/hf-re" -o "$T/re.gguf"
tj tests/fixtures/hf/qwen2/tokenizer.json "$T/hf-re/tokenizer.json" "t['pre_tokenizer'] = {'type': 'Sequence', 'pretokenizers': [{'type': 'Punctuation'}, {'type': 'ByteLevel', 'use_regex': False}]}"
expect_error convert_unknown_pre_tokenizer "pre-tokenizer (a Punctuation step)" "$BIN" convert "$T/hf-re" -o "$T/re.gguf"

# ---- a model file truncated under a running server ------------------------------------
cp "$M" "$T/live.gguf"; chmod u+w "$T/live.gguf"
REQ='{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}'
post() { curl -s -m 20 -o "$T/resp" -w '%{http_code}' -H 'Content-Type: application/json' -d "$REQ" "http://127.0.0.1:$PORT/v1/completions"; }
M_SAVE=$M; M="$T/live.gguf"
if start_server S1; then
    a=$(post); : > "$T/live.gguf"; b=$(post)
    if [ "$a" = 200 ] && [ "$b" = 200 ] && kill -0 "$PID" 2>/dev/null; then ok serve_survives_truncated_model; else fail serve_survives_truncated_model "before $a, after $b, alive: $(kill -0 "$PID" 2>/dev/null && echo yes || echo no)"; fi
    stop_server S1
fi
M=$M_SAVE
