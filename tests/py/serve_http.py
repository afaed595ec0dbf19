#!/usr/bin/env python3
"""HTTP checks of `reprise serve`, standard library only.

usage: serve_http.py GROUP PORT
Environment: BIN (the reprise binary), MODEL (the .gguf), MODEL_ID (its id in
/v1/models), PLAN (extra `run` flags matching the server's plan, e.g.
"--repeat-layers 1,3"), CTX (the server's -c), SERVER_PID, API_KEY; for several
plans in one server PLANS ("id|run flags|n_eff;..."), SLOTS, N_PLAN_FILES, and
PORT_ONE (a single-model server to compare memory with).
Prints "ok NAME" or "FAIL NAME: why" per check (tests/run.sh counts them) and
"info ..." lines with figures.
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

GROUP = sys.argv[1]
PORT = int(sys.argv[2])
HOST = "127.0.0.1"
BIN = os.environ.get("BIN", "build/reprise")
MODEL = os.environ.get("MODEL", "")
MODEL_ID = os.environ.get("MODEL_ID", "")
PLAN = os.environ.get("PLAN", "").split()
CTX = os.environ.get("CTX", "")
KEY = os.environ.get("API_KEY", "")
AUTH = {"Authorization": "Bearer " + KEY} if KEY else {}


def ok(name):
    print("ok " + name, flush=True)


def fail(name, why):
    print("FAIL %s: %s" % (name, str(why)[:400]), flush=True)


def check(name, cond, why=""):
    if cond:
        ok(name)
    else:
        fail(name, why)
    return cond


def request(method, path, body=None, raw=None, headers=None, timeout=120):
    """One request on a fresh connection: (status, parsed JSON or None, raw bytes)."""
    c = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    h = dict(AUTH)
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    if data is not None:
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    b = r.read()
    c.close()
    try:
        j = json.loads(b)
    except ValueError:
        j = None
    return r.status, j, b


def post(path, body, **kw):
    return request("POST", path, body=body, **kw)


def stream(path, body, conn=None, timeout=120):
    """A streamed request read chunk by chunk as it arrives: (status,
    content-type, [event payloads], leftover bytes). Every event must be one
    'data: ...' line followed by a blank line."""
    c = conn or http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    h = dict(AUTH)
    h["Content-Type"] = "application/json"
    c.request("POST", path, body=json.dumps(body).encode(), headers=h)
    r = c.getresponse()
    events, buf = [], b""
    if r.status != 200:
        return r.status, r.getheader("Content-Type"), [r.read().decode(errors="replace")], b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or b"\n" in ev:
                return r.status, r.getheader("Content-Type"), events, b"bad event: " + ev
            events.append(ev[6:].decode())
    if not conn:
        c.close()
    return r.status, r.getheader("Content-Type"), events, buf


def run_greedy(prompt, n, ctx=None):
    """`reprise run --temp 0` with the server's plan: the reference text."""
    cmd = [BIN, "run", "-m", MODEL, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1"] + PLAN
    if ctx or CTX:
        cmd += ["-c", str(ctx or CTX)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=300).stdout.decode()
    return out[:-1] if out.endswith("\n") else out


def completion(prompt, n, **extra):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0}
    body.update(extra)
    return post("/v1/completions", body)


def health():
    return request("GET", "/health")[1] or {}


def wait_idle(limit=5.0):
    """Seconds until no slot is busy and nothing is queued (None if never)."""
    t0 = time.time()
    while time.time() - t0 < limit:
        h = health()
        if h.get("slots_processing") == 0 and h.get("requests_queued") == 0:
            return time.time() - t0
        time.sleep(0.05)
    return None


def is_error_body(j, status_code=None):
    if not isinstance(j, dict) or set(j) != {"error"}:
        return False
    e = j["error"]
    return (isinstance(e, dict) and {"message", "type", "code"} <= set(e) and isinstance(e["message"], str)
            and e["message"] != "" and isinstance(e["type"], str))


PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a big bird"]


# ---- groups ---------------------------------------------------------------------


def group_basic():
    s, j, _ = request("GET", "/health")
    check("health", s == 200 and j.get("status") == "ok", (s, j))
    s, j, _ = request("GET", "/v1/models")
    check("models", s == 200 and j["object"] == "list" and j["data"][0]["id"] == MODEL_ID, (s, j))
    s, j, _ = request("GET", "/props")
    plan = (j or {}).get("plan", {})
    check("props_plan", s == 200 and plan.get("n_eff") == 7 and plan.get("eff_to_src") == [0, 1, 2, 1, 2, 3, 4]
          and plan.get("kind") == "repeat-layers" and plan.get("spec") == "1,3" and j.get("n_ctx") == int(CTX)
          and j.get("total_slots") == 4 and "0..2 | 1..4" in plan.get("report", ""), (s, j))

    # greedy /v1/completions == reprise run --temp 0 (same plan, same length)
    n = 48
    for i, p in enumerate(PROMPTS[:3]):
        want = run_greedy(p, n)
        s, j, b = completion(p, n)
        got = j["choices"][0]["text"] if s == 200 else b
        check("greedy_equals_run_%d" % i, s == 200 and got == want, "got %r want %r" % (got, want))
    want = run_greedy(PROMPTS[0], n)
    s, toks, _ = post("/tokenize", {"content": PROMPTS[0], "add_special": True})
    s, j, b = completion(PROMPTS[0], n)
    u = j.get("usage", {}) if s == 200 else {}
    check("usage_counts", u.get("prompt_tokens") == len(toks["tokens"]) and u.get("completion_tokens") == n
          and u.get("total_tokens") == n + len(toks["tokens"]) and j["choices"][0]["finish_reason"] == "length",
          (u, toks))
    s, j, b = post("/completion", {"prompt": PROMPTS[0], "n_predict": n, "temperature": 0})
    check("native_equals_run", s == 200 and j["content"] == want and j["tokens_predicted"] == n
          and j["stop_type"] == "limit" and j["stop"] is True and j["tokens_evaluated"] == len(toks["tokens"]), b)
    # token-id prompt: same as the text prompt's tokens
    s, j, b = completion(toks["tokens"], n)
    check("token_prompt", s == 200 and j["choices"][0]["text"] == want, b)

    # the context fills: same place and text as run
    long_prompt = " ".join(["the dog and the cat played in the park"] * 14)
    n_long = len(post("/tokenize", {"content": long_prompt, "add_special": True})[1]["tokens"])
    check("context_full_setup", int(CTX) - 60 < n_long < int(CTX), n_long)
    want_full = run_greedy(long_prompt, 400)
    s, j, b = completion(long_prompt, 400)
    check("context_full_equals_run", s == 200 and j["choices"][0]["text"] == want_full
          and j["choices"][0]["finish_reason"] == "length"
          and j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"] == int(CTX) + 1, b[:300])

    # streaming, parsed chunk by chunk
    s, ctype, ev, rest = stream("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": n, "temperature": 0,
                                                    "stream": True})
    good = s == 200 and ctype.startswith("text/event-stream") and rest == b"" and ev and ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]] if good else []
    text = "".join(c["choices"][0]["text"] for c in chunks)
    fins = [c["choices"][0]["finish_reason"] for c in chunks]
    check("stream_completions", good and text == want and fins[-1] == "length" and all(f is None for f in fins[:-1])
          and len(chunks) >= n and all(c["object"] == "text_completion" for c in chunks), (s, ctype, ev[:3], rest))
    s, _, ev, rest = stream("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 8, "temperature": 0,
                                                "stream": True, "stream_options": {"include_usage": True}})
    last = json.loads(ev[-2]) if len(ev) >= 2 else {}
    check("stream_usage", ev[-1:] == ["[DONE]"] and last.get("choices") == [] and
          last.get("usage", {}).get("completion_tokens") == 8, ev[-2:])
    s, _, ev, rest = stream("/completion", {"prompt": PROMPTS[0], "n_predict": n, "temperature": 0, "stream": True})
    chunks = [json.loads(e) for e in ev]
    check("stream_native", s == 200 and chunks and chunks[-1]["stop"] is True
          and all(c["stop"] is False for c in chunks[:-1]) and "".join(c["content"] for c in chunks) == want
          and chunks[-1]["tokens_predicted"] == n, ev[-2:])

    # chat: the chatml rendering, then the same continuation as a raw completion
    msgs = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Tell me a story."}]
    rendered = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in msgs)
    rendered += "<|im_start|>assistant\n"
    s, ref, _ = completion(rendered, 24)
    s, j, b = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 24, "temperature": 0})
    check("chat", s == 200 and j["object"] == "chat.completion" and j["choices"][0]["message"]["role"] == "assistant"
          and j["choices"][0]["message"]["content"] == ref["choices"][0]["text"]
          and j["usage"]["prompt_tokens"] == ref["usage"]["prompt_tokens"], (b[:300], ref))
    s, _, ev, rest = stream("/v1/chat/completions", {"messages": msgs, "max_tokens": 24, "temperature": 0,
                                                     "stream": True})
    chunks = [json.loads(e) for e in ev[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    check("stream_chat", ev[-1:] == ["[DONE]"] and deltas[0].get("role") == "assistant"
          and "".join(d.get("content", "") for d in deltas) == ref["choices"][0]["text"]
          and chunks[-1]["choices"][0]["finish_reason"] == "length"
          and all(c["object"] == "chat.completion.chunk" for c in chunks), ev[:3])
    s, j, b = post("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Tell me "}, {"type": "text", "text": "a story."}]}], "max_tokens": 4})
    check("chat_content_parts", s == 200 and j["choices"][0]["message"]["content"] is not None, b)

    # stop strings, including one that spans two tokens: the token boundaries
    # come from the generated ids (return_tokens) and prefix detokenizations
    s, j, b = post("/completion", {"prompt": PROMPTS[1], "n_predict": n, "temperature": 0, "return_tokens": True})
    full, ids = j["content"], j.get("tokens", [])
    check("return_tokens", s == 200 and len(ids) == n == j["tokens_predicted"], b)
    texts = [post("/detokenize", {"tokens": ids[:k]})[1]["content"] for k in range(len(ids) + 1)]
    shift = len(full) - len(texts[-1])  # the leading space detokenize drops
    bounds = [shift + len(t) for t in texts[1:]]
    stop = None
    for i in range(3, len(bounds) - 1):
        a, b_, c = bounds[i - 1], bounds[i], bounds[i + 1]
        if b_ - a >= 2 and c - b_ >= 2:
            stop = full[b_ - 2:b_ + 2]
            break
    if not check("stop_setup", stop is not None and full.endswith(texts[-1]), (full, texts[-1], bounds)):
        return
    expect = full[:full.find(stop)]
    s, j, b = completion(PROMPTS[1], n, stop=stop)
    check("stop_across_tokens", s == 200 and j["choices"][0]["text"] == expect
          and j["choices"][0]["finish_reason"] == "stop", (stop, b))
    s, _, ev, _ = stream("/v1/completions", {"prompt": PROMPTS[1], "max_tokens": n, "temperature": 0,
                                             "stream": True, "stop": ["zzzz-never", stop]})
    chunks = [json.loads(e) for e in ev[:-1]]
    got = "".join(c["choices"][0]["text"] for c in chunks)
    check("stop_stream_across_tokens", ev[-1] == "[DONE]" and got == expect
          and chunks[-1]["choices"][0]["finish_reason"] == "stop" and stop not in got, (stop, got, expect))
    s, j, b = post("/completion", {"prompt": PROMPTS[1], "n_predict": n, "temperature": 0, "stop": [stop]})
    check("stop_native", s == 200 and j["content"] == expect and j["stop_type"] == "word"
          and j["stopping_word"] == stop, b)
    s, j, b = completion(PROMPTS[1], n, stop=[full[:1]] if full else ["x"])
    check("stop_at_start", s == 200 and j["choices"][0]["text"] == "" and j["choices"][0]["finish_reason"] == "stop",
          b)

    s, j, b = completion(PROMPTS[0], 0)
    check("max_tokens_zero", s == 200 and j["choices"][0]["text"] == "" and j["usage"]["completion_tokens"] == 0
          and j["choices"][0]["finish_reason"] == "length", b)
    s, j, b = completion(PROMPTS[0], 8, model=MODEL_ID)
    check("model_by_name", s == 200 and j["model"] == MODEL_ID, b)

    # sampling: a seed reproduces; every field is taken
    body = {"prompt": PROMPTS[0], "max_tokens": 24, "temperature": 1.0, "seed": 1234, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0}
    a, b2 = post("/v1/completions", body)[1], post("/v1/completions", body)[1]
    texts = set()
    for seed in range(1, 6):
        body["seed"] = seed
        texts.add(post("/v1/completions", body)[1]["choices"][0]["text"])
    check("seed_reproduces", a["choices"][0]["text"] == b2["choices"][0]["text"] and len(texts) > 1, (a, b2, texts))
    s, j, b = completion(PROMPTS[0], 16, temperature=0.7, top_k=5, top_p=0.9, min_p=0.1, presence_penalty=0.5,
                         frequency_penalty=0.5, seed=7)
    check("sampling_fields", s == 200 and j["usage"]["completion_tokens"] <= 16, b)

    # tokenizer endpoints
    s, j, b = post("/tokenize", {"content": "Once upon a time", "add_special": True})
    golden = os.environ.get("GOLDEN_TOKENS", "")
    check("tokenize", s == 200 and " ".join(map(str, j["tokens"])) == golden, (b, golden))
    s, j2, b = post("/tokenize", {"content": "Once upon a time", "with_pieces": True})
    check("tokenize_pieces", s == 200 and all(set(t) == {"id", "piece"} for t in j2["tokens"])
          and "".join(t["piece"] for t in j2["tokens"]).strip() == "Once upon a time", b)
    s, j3, b = post("/detokenize", {"tokens": [t["id"] for t in j2["tokens"]]})
    check("detokenize", s == 200 and j3["content"].strip() == "Once upon a time", b)


def group_errors():
    def expect(name, status, resp, code=None):
        s, j, b = resp
        good = s == status and is_error_body(j) and (code is None or j["error"]["code"] == code)
        check(name, good, "status %s body %r" % (s, b[:300]))

    expect("err_malformed_json", 400, post("/v1/completions", None, raw=b'{"prompt": "x",'), "invalid_json")
    expect("err_not_object", 400, post("/v1/completions", None, raw=b"[1, 2]"))
    expect("err_empty_body", 400, post("/v1/completions", None, raw=b""))
    expect("err_bad_utf8", 400, post("/v1/completions", None, raw=b'{"prompt": "\xff\xfe"}'))
    expect("err_deep_nesting", 400, post("/v1/completions", None, raw=b"[" * 30000 + b"]" * 30000))
    expect("err_duplicate_key", 400, post("/v1/completions", None, raw=b'{"prompt": "a", "prompt": "b"}'))
    for name, body in [("temperature_type", {"prompt": "x", "temperature": "hot"}),
                       ("max_tokens_type", {"prompt": "x", "max_tokens": "x"}),
                       ("max_tokens_fraction", {"prompt": "x", "max_tokens": 1.5}),
                       ("stop_type", {"prompt": "x", "stop": 5}),
                       ("stop_item_type", {"prompt": "x", "stop": [1]}),
                       ("prompt_type", {"prompt": 5}),
                       ("prompt_object", {"prompt": {"a": 1}}),
                       ("prompt_token_type", {"prompt": [1, "x"]}),
                       ("model_type", {"prompt": "x", "model": 5}),
                       ("stream_type", {"prompt": "x", "stream": "yes"}),
                       ("missing_prompt", {"max_tokens": 3})]:
        expect("err_" + name, 400, post("/v1/completions", body))
    for name, body in [("messages_type", {"messages": "hi"}), ("message_item", {"messages": [1]}),
                       ("role_type", {"messages": [{"role": 1, "content": "x"}]}),
                       ("missing_messages", {"max_tokens": 3})]:
        expect("err_" + name, 400, post("/v1/chat/completions", body))
    expect("err_tokenize_type", 400, post("/tokenize", {"content": 5}))
    expect("err_detokenize_type", 400, post("/detokenize", {"tokens": "1 2"}))

    # one model: any name is served (as llama-server does), the reply names the model
    s, j, b = post("/v1/completions", {"prompt": "x", "model": "gpt-4o-mini", "max_tokens": 2})
    check("any_model_name_served", s == 200 and j["model"] == MODEL_ID, b)
    s, j, b = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "model": "nope", "max_tokens": 2})
    check("any_model_name_served_chat", s == 200 and j["model"] == MODEL_ID, b)
    expect("err_unknown_endpoint", 404, request("GET", "/v1/nope"))
    expect("err_wrong_method", 405, request("GET", "/v1/completions"))

    long_prompt = " ".join(["the dog and the cat played in the park"] * 40)
    expect("err_context_length", 400, post("/v1/completions", {"prompt": long_prompt}), "context_length_exceeded")
    expect("err_context_length_chat", 400, post("/v1/chat/completions",
                                                {"messages": [{"role": "user", "content": long_prompt}]}),
           "context_length_exceeded")

    for name, extra in [("temperature", {"temperature": -1}), ("top_p_zero", {"top_p": 0}),
                        ("top_p_big", {"top_p": 1.5}), ("min_p", {"min_p": 2}), ("top_k", {"top_k": -1}),
                        ("n", {"n": 2}), ("max_tokens", {"max_tokens": -5}), ("presence", {"presence_penalty": 3}),
                        ("frequency", {"frequency_penalty": -3}), ("repeat_penalty", {"repeat_penalty": 0}),
                        ("token_id", {"prompt": [1, 99999]}), ("logprobs", {"logprobs": 6}),
                        ("echo", {"echo": True}), ("too_many_stops", {"stop": ["a%d" % i for i in range(17)]}),
                        ("several_prompts", {"prompt": ["a", "b"]})]:
        body = {"prompt": "x"}
        body.update(extra)
        expect("err_value_" + name, 422, post("/v1/completions", body))
    expect("err_value_role", 422, post("/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}))
    expect("err_value_detokenize", 422, post("/detokenize", {"tokens": [1, -4]}))

    # oversized body: refused from its declared length, before it is read
    big = json.dumps({"prompt": "x" * 200000}).encode()
    try:
        r = post("/v1/completions", None, raw=big)
    except (BrokenPipeError, ConnectionResetError) as ex:
        r = (0, None, repr(ex).encode())
    expect("err_body_too_large", 413, r, "request_too_large")
    # ... and when sent chunked without a length
    def chunks():
        for _ in range(40):
            yield b'{"prompt": "' + b"y" * 4000
    c = http.client.HTTPConnection(HOST, PORT, timeout=60)
    try:
        c.request("POST", "/v1/completions", body=chunks(), encode_chunked=True,
                  headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        r = c.getresponse()
        b = r.read()
        r = (r.status, json.loads(b), b)
    except (BrokenPipeError, ConnectionResetError) as ex:
        r = (0, None, repr(ex).encode())
    c.close()
    expect("err_body_too_large_chunked", 413, r, "request_too_large")

    # mutated bodies (bounded, seeded): an answer of the documented kinds, never a crash
    import random
    rnd = random.Random(8)
    seeds = [json.dumps({"prompt": "Once upon", "max_tokens": 4, "temperature": 0.5, "stop": ["a", "b"],
                         "top_k": 3, "seed": 1}).encode(),
             json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}).encode(),
             json.dumps({"prompt": [1, 403, 407], "n_predict": 3, "min_p": 0.1}).encode()]
    paths = ["/v1/completions", "/v1/chat/completions", "/completion"]
    bad = []
    for i in range(300):
        k = rnd.randrange(3)
        b = bytearray(seeds[k])
        for _ in range(rnd.randint(1, 4)):
            op, at = rnd.randrange(3), rnd.randrange(len(b))
            if op == 0:
                b[at] = rnd.randrange(256)
            elif op == 1:
                del b[at]
            else:
                b.insert(at, rnd.choice(b'{}[]",:0123456789-.eE\\ntfu'))
        try:
            st, j, raw = post(paths[k], None, raw=bytes(b))
            if st not in (200, 400, 404, 422) or (st != 200 and not is_error_body(j)):
                bad.append((st, bytes(b)[:80], raw[:120]))
        except Exception as ex:  # noqa: BLE001
            bad.append(("exception", bytes(b)[:80], repr(ex)))
    check("err_mutated_bodies", not bad, bad[:3])

    # nothing is stuck, nothing leaks a slot: the server still answers right
    check("errors_leave_idle", wait_idle() is not None, health())
    s, j, b = completion(PROMPTS[0], 8)
    check("after_errors_serves", s == 200 and j["usage"]["completion_tokens"] == 8, b)
    s, j, _ = request("GET", "/health")
    check("after_errors_health", s == 200 and j["slots_processing"] == 0, j)


def group_auth():
    def status(path, method="GET", headers=None, body=None):
        c = http.client.HTTPConnection(HOST, PORT, timeout=60)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=json.dumps(body).encode() if body else None, headers=h)
        r = c.getresponse()
        b = r.read()
        c.close()
        try:
            return r.status, json.loads(b)
        except ValueError:
            return r.status, None
    s, j = status("/health")
    check("auth_health_open", s == 200, s)
    s, j = status("/v1/models")
    check("auth_missing_key", s == 401 and is_error_body(j) and j["error"]["code"] == "invalid_api_key", (s, j))
    s, j = status("/v1/models", headers={"Authorization": "Bearer wrong-" + KEY})
    check("auth_wrong_key", s == 401 and is_error_body(j), (s, j))
    s, j = status("/v1/models", headers={"Authorization": "Bearer " + KEY[:-1]})
    check("auth_prefix_of_key", s == 401, s)
    s, j = status("/v1/models", headers={"Authorization": KEY})
    check("auth_no_bearer", s == 401, s)
    s, j = status("/v1/completions", "POST", {"Authorization": "Bearer x"}, {"prompt": "x"})
    check("auth_completions", s == 401, s)
    s, j = status("/v1/models", headers={"Authorization": "Bearer " + KEY})
    check("auth_right_key", s == 200 and j["data"][0]["id"] == MODEL_ID, (s, j))


def raw_post(body):
    """Sends a request on a bare socket and returns the socket (unread)."""
    data = json.dumps(body).encode()
    s = socket.create_connection((HOST, PORT), timeout=30)
    hdr = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(
        data)
    if KEY:
        hdr += "Authorization: Bearer %s\r\n" % KEY
    s.sendall(hdr.encode() + b"\r\n" + data)
    return s


def group_disconnect():
    long_body = {"prompt": PROMPTS[0], "max_tokens": 6000, "temperature": 0, "min_p": 0}
    # non-streaming: the client goes away while its text is generated
    s = raw_post(long_body)
    time.sleep(0.4)
    busy = health().get("slots_processing")
    s.close()
    t = wait_idle(5.0)
    check("disconnect_frees_slot", busy == 1 and t is not None, (busy, t, health()))
    # streaming: read two events, then go away
    body = dict(long_body, stream=True)
    s = raw_post(body)
    got = b""
    while got.count(b"data: ") < 2:
        got += s.recv(4096)
    s.close()
    t = wait_idle(5.0)
    check("disconnect_stream_frees_slot", t is not None, health())
    # a queued request whose client leaves never runs; the one running is unaffected
    s1 = raw_post(long_body)
    time.sleep(0.3)
    s2 = raw_post({"prompt": PROMPTS[1], "max_tokens": 4})
    time.sleep(0.3)
    q = health().get("requests_queued")
    s2.close()
    time.sleep(0.3)
    q2 = health().get("requests_queued")
    s1.close()
    check("disconnect_queued", q == 1 and q2 == 0 and wait_idle(5.0) is not None, (q, q2, health()))
    s, j, b = completion(PROMPTS[0], 8)
    check("after_disconnect_serves", s == 200 and j["usage"]["completion_tokens"] == 8, b)


def group_timeout():
    long_body = {"prompt": PROMPTS[0], "max_tokens": 100000, "temperature": 0}
    t0 = time.time()
    s, j, b = post("/v1/completions", long_body)
    dt = time.time() - t0
    check("timeout_504", s == 504 and is_error_body(j) and j["error"]["code"] == "timeout" and dt < 10, (s, b, dt))
    s, _, ev, _ = stream("/v1/completions", dict(long_body, stream=True))
    last = json.loads(ev[-1]) if ev else {}
    check("timeout_stream_error_event", s == 200 and is_error_body(last) and last["error"]["code"] == "timeout",
          ev[-1:])
    # a request queued behind one that times out gets the slot when it is cut
    res = {}
    th = threading.Thread(target=lambda: res.setdefault("a", post("/v1/completions", long_body)))
    th.start()
    time.sleep(0.2)
    s, j, b = completion(PROMPTS[1], 4)
    th.join()
    check("timeout_then_queue_runs", s == 200 and j["usage"]["completion_tokens"] == 4 and res["a"][0] == 504,
          (s, b, res["a"][0]))
    check("timeout_leaves_idle", wait_idle() is not None, health())


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def group_load():
    clients = int(os.environ.get("CLIENTS", "32"))
    per = int(os.environ.get("PER_CLIENT", "10"))
    rss_limit = int(os.environ.get("RSS_GROWTH_KIB", "8192"))
    pid = int(os.environ["SERVER_PID"])
    n = int(os.environ.get("N_TOKENS", "16"))
    chat_msgs = [{"role": "user", "content": "Tell me a story."}]
    # references first, one at a time: every answer under load must equal them
    ref = {p: completion(p, n)[1] for p in PROMPTS}
    want = {p: r["choices"][0]["text"] for p, r in ref.items()}
    n_tok = {p: r["usage"]["completion_tokens"] for p, r in ref.items()}
    ref_chat = post("/v1/chat/completions", {"messages": chat_msgs, "max_tokens": n, "temperature": 0})[1]
    want_chat = ref_chat["choices"][0]["message"]["content"]
    n_tok["chat"] = ref_chat["usage"]["completion_tokens"]
    generated = [0]

    lat, errors, lock = [], [], threading.Lock()

    def one(conn, i, k):
        p = PROMPTS[(i + k) % len(PROMPTS)]
        kind = (i * per + k) % 4
        t0 = time.time()
        try:
            if kind == 0:
                conn.request("POST", "/v1/completions", json.dumps({"prompt": p, "max_tokens": n, "temperature": 0}),
                             dict(AUTH, **{"Content-Type": "application/json"}))
                r = conn.getresponse()
                j = json.loads(r.read())
                good = r.status == 200 and j["choices"][0]["text"] == want[p]
            elif kind == 1:
                s, _, ev, _ = stream("/v1/completions", {"prompt": p, "max_tokens": n, "temperature": 0,
                                                         "stream": True}, conn=conn)
                good = s == 200 and ev[-1] == "[DONE]" and \
                    "".join(json.loads(e)["choices"][0]["text"] for e in ev[:-1]) == want[p]
            elif kind == 2:
                conn.request("POST", "/completion", json.dumps({"prompt": p, "n_predict": n, "temperature": 0}),
                             dict(AUTH, **{"Content-Type": "application/json"}))
                r = conn.getresponse()
                j = json.loads(r.read())
                good = r.status == 200 and j["content"] == want[p]
            else:
                conn.request("POST", "/v1/chat/completions",
                             json.dumps({"messages": chat_msgs, "max_tokens": n, "temperature": 0}),
                             dict(AUTH, **{"Content-Type": "application/json"}))
                r = conn.getresponse()
                j = json.loads(r.read())
                good = r.status == 200 and j["choices"][0]["message"]["content"] == want_chat
        except Exception as ex:  # noqa: BLE001 - any failure counts
            good, j = False, repr(ex)
        dt = time.time() - t0
        with lock:
            lat.append(dt)
            if not good:
                errors.append((kind, p, str(j)[:200]))
            else:
                generated[0] += n_tok["chat" if kind == 3 else p]
        return good

    def client(i, reps):
        conn = http.client.HTTPConnection(HOST, PORT, timeout=120)  # keep-alive across requests
        for k in range(reps):
            if not one(conn, i, k):
                conn.close()
                conn = http.client.HTTPConnection(HOST, PORT, timeout=120)
        conn.close()

    def round_(reps):
        ts = [threading.Thread(target=client, args=(i, reps)) for i in range(clients)]
        t0 = time.time()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return time.time() - t0

    round_(2)  # warm-up: threads, allocator arenas, buffers
    rss0 = rss_kib(pid)
    lat.clear()
    errors.clear()
    generated[0] = 0
    wall = round_(per)
    rss1 = rss_kib(pid)
    total = clients * per
    lat.sort()
    p50 = lat[len(lat) // 2] * 1e3 if lat else 0
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3 if lat else 0
    print("info load: %d clients x %d requests = %d (%d tokens each), %d failures, %.1f s, %.1f req/s, "
          "%.0f generated tokens/s, p50 %.0f ms, p99 %.0f ms, VmRSS %d -> %d KiB (%+d), VmHWM %d KiB"
          % (clients, per, total, n, len(errors), wall, total / wall, generated[0] / wall, p50, p99, rss0, rss1,
             rss1 - rss0, hwm_kib(pid)), flush=True)
    check("load_all_answered", len(lat) == total and not errors, errors[:3])
    check("load_rss_stable", rss1 - rss0 < rss_limit, "VmRSS grew %d KiB (limit %d)" % (rss1 - rss0, rss_limit))
    check("load_leaves_idle", wait_idle() is not None, health())


def group_sigterm():
    """SIGTERM with requests running and queued: the running ones are answered
    (finished within --grace, or refused with 503 once it passes), the queued
    ones get 503, and nothing new is accepted. The caller checks the exit code."""
    pid = int(os.environ["SERVER_PID"])
    n = int(os.environ.get("SIGTERM_TOKENS", "200"))
    expect_running = os.environ.get("SIGTERM_EXPECT", "finish")
    res = {}

    def go(i, streaming):
        body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": n, "temperature": 0, "stream": streaming}
        try:
            if streaming:
                res[i] = ("stream",) + stream("/v1/completions", body)[:3]
            else:
                res[i] = ("plain",) + post("/v1/completions", body)[:2]
        except Exception as ex:  # noqa: BLE001
            res[i] = ("exception", repr(ex))
    ts = [threading.Thread(target=go, args=(i, i % 2 == 1)) for i in range(2)]
    for t in ts:
        t.start()
    t0 = time.time()
    while health().get("slots_processing", 0) < 2 and time.time() - t0 < 10:
        time.sleep(0.02)
    q = [threading.Thread(target=go, args=(i, False)) for i in range(2, 4)]
    for t in q:
        t.start()
    h = health()
    while h.get("requests_queued", 0) < 2 and time.time() - t0 < 10:
        time.sleep(0.02)
        h = health()
    os.kill(pid, signal.SIGTERM)
    # what the signal found: both slots busy, both extra requests queued (else the
    # generations are too short for this machine and the 503 checks below mean nothing)
    check("sigterm_setup", h.get("slots_processing") == 2 and h.get("requests_queued") == 2, h)
    for t in ts + q:
        t.join(60)
    for i in (0, 1):
        r = res.get(i, ("none",))
        if expect_running == "finish":
            if r[0] == "plain":
                good = r[1] == 200 and r[2]["usage"]["completion_tokens"] == n
            else:
                good = r[0] == "stream" and r[1] == 200 and r[3][-1] == "[DONE]" and \
                    json.loads(r[3][-2])["choices"][0]["finish_reason"] == "length"
        else:
            if r[0] == "plain":
                good = r[1] == 503 and is_error_body(r[2]) and r[2]["error"]["code"] == "shutting_down"
            else:
                good = r[0] == "stream" and r[1] == 200 and is_error_body(json.loads(r[3][-1]))
        check("sigterm_running_%s_%d" % (expect_running, i), good, str(r)[:300])
    for i in (2, 3):
        r = res.get(i, ("none",))
        check("sigterm_queued_503_%d" % i, r[0] == "plain" and r[1] == 503 and r[2]["error"]["code"] ==
              "shutting_down", str(r)[:300])
    time.sleep(0.2)
    try:
        socket.create_connection((HOST, PORT), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    check("sigterm_stops_accepting", refused, "a new connection was accepted after SIGTERM")


def group_bytes():
    """A random-weight model emits byte tokens that are not valid UTF-8 on
    their own: the text is what `run` prints with each invalid sequence
    replaced by U+FFFD (Unicode's maximal-subpart rule, as Python decodes), and
    streaming gives the same text without ever splitting a character."""
    for i, p in enumerate(["Hello world, this is", "Once upon", "The \u65e5\u672c text"]):
        cmd = [BIN, "run", "-m", MODEL, "-p", p, "-n", "100", "--temp", "0", "-t", "1"]
        raw = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=300).stdout[:-1]
        want = raw.decode("utf-8", "replace")
        s, j, b = completion(p, 100)
        got = j["choices"][0]["text"] if s == 200 else b
        check("bytes_greedy_equals_run_%d" % i, got == want, "got %r want %r" % (got, want))
        s, _, ev, rest = stream("/v1/completions", {"prompt": p, "max_tokens": 100, "temperature": 0, "stream": True})
        got_s = "".join(json.loads(e)["choices"][0]["text"] for e in ev[:-1])
        check("bytes_stream_%d" % i, s == 200 and got_s == want and ev[-1] == "[DONE]", (got_s, want))
    check("bytes_replacements_seen", "\ufffd" in want, "the model produced only valid UTF-8; pick other prompts")


def parse_plans():
    """PLANS="id|run flags|n_eff;...": the server's models in order, each with
    the `reprise run` flags of its plan and its step count."""
    out = []
    for item in os.environ.get("PLANS", "").split(";"):
        mid, flags, n_eff = item.split("|")
        out.append((mid, flags.split(), int(n_eff)))
    return out


def run_plan(flags, prompt, n):
    """`reprise run --temp 0` with a plan's flags: the single-plan reference."""
    cmd = [BIN, "run", "-m", MODEL, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1"] + flags
    if CTX:
        cmd += ["-c", CTX]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=300).stdout
    return (out[:-1] if out.endswith(b"\n") else out).decode("utf-8", "replace")


def group_multiplan():
    """One server, several plans over one copy of the weights: each is a model
    in /v1/models; a request's "model" picks the plan; concurrent requests to
    different plans give exactly what `reprise run` gives with that plan alone."""
    plans = parse_plans()
    ids = [p[0] for p in plans]
    s, j, _ = request("GET", "/v1/models")
    got = [m["id"] for m in (j or {}).get("data", [])]
    check("multi_models_listed", s == 200 and got == ids, (got, ids))
    metas = {m["id"]: m["meta"] for m in (j or {}).get("data", [])}
    check("multi_models_meta", all(metas.get(i, {}).get("n_eff") == e for i, _, e in plans), metas)
    s, j, _ = request("GET", "/props")
    models = {m["id"]: m for m in (j or {}).get("models", [])}
    n_layer = plans[0][2]
    kv0 = models.get(ids[0], {}).get("plan", {}).get("kv_bytes_per_slot", 0)
    good = s == 200 and kv0 > 0
    for mid, _, n_eff in plans:
        pl = models.get(mid, {}).get("plan", {})
        # uniform layers: every step holds the same KV, so KV per slot scales with n_eff
        good = good and pl.get("n_eff") == n_eff and pl.get("kv_bytes_per_slot", 0) * n_layer == kv0 * n_eff
    check("multi_props_per_plan", good, {k: (v["plan"]["n_eff"], v["plan"]["kv_bytes_per_slot"]) for k, v in models.items()})
    mem = (j or {}).get("memory", {})
    state = sum(m["plan"]["state_bytes"] for m in models.values())
    check("multi_props_memory", mem.get("state_bytes") == state and mem.get("weight_bytes", 0) > 0
          and mem.get("rss_bytes", 0) > 0 and mem.get("peak_rss_bytes", 0) >= mem.get("rss_bytes", 0)
          and abs(mem.get("rss_over_weights", 0) - mem["rss_bytes"] / mem["weight_bytes"]) < 1e-6, mem)
    files = [m for m in models.values() if "file" in m["plan"]]
    check("multi_props_plan_file", len(files) == int(os.environ.get("N_PLAN_FILES", "0"))
          and all(f["plan"]["forced"] is False and f["plan"]["name"] for f in files), files)

    n = 40
    prompts = PROMPTS[:3]
    want = {(mid, p): run_plan(flags, p, n) for mid, flags, _ in plans for p in prompts}
    distinct = {want[(mid, prompts[1])] for mid in ids}
    check("multi_plans_differ", len(distinct) == len(ids), "plans give the same text: the check could not see "
          "a request answered by the wrong plan")
    # every (plan, prompt) twice, all at once, over three APIs: more requests than slots
    jobs = [(mid, p, k) for mid in ids for p in prompts for k in range(2)]
    res, lock = [], threading.Lock()

    def go(mid, p, k):
        try:
            if k == 0:
                st, jj, b = completion(p, n, model=mid)
                text = jj["choices"][0]["text"] if st == 200 else b
                ok_ = st == 200 and jj["model"] == mid
            elif (ids.index(mid) + prompts.index(p)) % 2:
                st, _, ev, _ = stream("/v1/completions", {"prompt": p, "max_tokens": n, "temperature": 0,
                                                          "stream": True, "model": mid})
                chunks = [json.loads(e) for e in ev[:-1]]
                text = "".join(c["choices"][0]["text"] for c in chunks)
                ok_ = st == 200 and ev[-1] == "[DONE]" and all(c["model"] == mid for c in chunks)
            else:
                st, jj, b = post("/completion", {"prompt": p, "n_predict": n, "temperature": 0, "model": mid})
                text = jj["content"] if st == 200 else b
                ok_ = st == 200 and jj["model"] == mid
        except Exception as ex:  # noqa: BLE001
            text, ok_ = repr(ex), False
        with lock:
            res.append((mid, p, k, ok_ and text == want[(mid, p)], text))
    ts = [threading.Thread(target=go, args=j_) for j_ in jobs]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    bad = [(m, p, k, t) for m, p, k, good_, t in res if not good_]
    check("multi_concurrent_equals_single_plan_runs", len(res) == len(jobs) and not bad,
          "%d/%d answered; wrong: %r" % (len(res), len(jobs), [(m, p, k, t, want[(m, p)]) for m, p, k, t in bad[:2]]))
    s, j, b = completion(PROMPTS[0], 4, model="no-such-plan")
    check("multi_unknown_model", s == 404 and j["error"]["code"] == "model_not_found"
          and all("'%s'" % i in j["error"]["message"] for i in ids), b)
    s, j, b = completion(PROMPTS[1], n)
    check("multi_default_is_first", s == 200 and j["model"] == ids[0] and j["choices"][0]["text"] == want[(ids[0], PROMPTS[1])], b)
    h = health()
    check("multi_health", wait_idle() is not None and health().get("slots_idle") == len(ids) * int(os.environ.get("SLOTS", "1")), h)


def group_mixload():
    """Mixed-plan traffic (bench/multiplan.sh): CLIENTS keep-alive clients each
    send PER_CLIENT greedy requests of N_TOKENS, cycling through the served
    models; every answer must equal that model's one-at-a-time reference.
    Prints requests/s, generated tokens/s, latency and memory."""
    clients = int(os.environ.get("CLIENTS", "8"))
    per = int(os.environ.get("PER_CLIENT", "8"))
    n = int(os.environ.get("N_TOKENS", "32"))
    ids = [m["id"] for m in request("GET", "/v1/models")[1]["data"]]
    ref = {}
    for mid in ids:
        for p in PROMPTS:
            s, j, b = completion(p, n, model=mid)
            if s != 200:
                fail("mixload_reference", b)
                return
            ref[(mid, p)] = (j["choices"][0]["text"], j["usage"]["completion_tokens"])
    lat, errors, lock, gen = [], [], threading.Lock(), [0]

    def client(i):
        conn = http.client.HTTPConnection(HOST, PORT, timeout=600)
        for k in range(per):
            mid, p = ids[(i + k) % len(ids)], PROMPTS[(i // len(ids) + k) % len(PROMPTS)]
            t0 = time.time()
            try:
                conn.request("POST", "/v1/completions",
                             json.dumps({"prompt": p, "max_tokens": n, "temperature": 0, "model": mid}),
                             dict(AUTH, **{"Content-Type": "application/json"}))
                r = conn.getresponse()
                j = json.loads(r.read())
                good = r.status == 200 and j["choices"][0]["text"] == ref[(mid, p)][0]
            except Exception as ex:  # noqa: BLE001
                good, j = False, repr(ex)
                conn.close()
                conn = http.client.HTTPConnection(HOST, PORT, timeout=600)
            with lock:
                lat.append(time.time() - t0)
                if good:
                    gen[0] += ref[(mid, p)][1]
                else:
                    errors.append((mid, p, str(j)[:200]))
        conn.close()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    lat.sort()
    mem = request("GET", "/props")[1]["memory"]
    total = clients * per
    print("info mixload: %d models (%s), %d clients x %d requests = %d (%d tokens each), %d wrong, %.1f s: "
          "%.2f requests/s, %.1f generated tokens/s, p50 %.0f ms, p99 %.0f ms; weights %.1f MiB, state %.1f MiB, "
          "RSS %.1f MiB, peak %.1f MiB"
          % (len(ids), ", ".join(ids), clients, per, total, n, len(errors), wall, total / wall, gen[0] / wall,
             lat[len(lat) // 2] * 1e3, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
             mem["weight_bytes"] / 2**20, mem["state_bytes"] / 2**20, mem["rss_bytes"] / 2**20,
             mem["peak_rss_bytes"] / 2**20), flush=True)
    check("mixload_all_equal_references", len(lat) == total and not errors, errors[:3])


def props_memory(port):
    c = http.client.HTTPConnection(HOST, port, timeout=60)
    c.request("GET", "/props", headers=AUTH)
    j = json.loads(c.getresponse().read())
    c.close()
    return j


def group_memory():
    """Two servers over the same weights, one with a single model and one with
    more plans (PORT): after every model has answered, the one with more plans
    holds at most the extra plans' state (KV) plus a small fixed allowance more
    than the one with a single model, far less than another copy of the
    weights would add."""
    global PORT
    port_one = int(os.environ["PORT_ONE"])
    slack = int(os.environ.get("SLACK_MIB", "4")) << 20
    for port in (port_one, PORT):
        PORT = port
        for m in request("GET", "/v1/models")[1]["data"]:
            s, j, b = completion(PROMPTS[0], 8, model=m["id"])
            if s != 200:
                fail("memory_request", b)
    PORT = int(sys.argv[2])
    one, many = props_memory(port_one), props_memory(PORT)
    m1, m3 = one["memory"], many["memory"]
    d_peak = m3["peak_rss_bytes"] - m1["peak_rss_bytes"]
    d_state = m3["state_bytes"] - m1["state_bytes"]
    w = m1["weight_bytes"]
    print("info memory: %d models vs 1: peak RSS %.1f vs %.1f MiB (+%.1f MiB); state (KV) %.1f vs %.1f MiB (+%.1f MiB); "
          "weights %.1f MiB, mapped once" % (len(many["models"]), m3["peak_rss_bytes"] / 2**20, m1["peak_rss_bytes"] / 2**20,
                                            d_peak / 2**20, m3["state_bytes"] / 2**20, m1["state_bytes"] / 2**20,
                                            d_state / 2**20, w / 2**20), flush=True)
    forced = [m["id"] for m in many["models"] if m["plan"].get("forced")]
    check("memory_props_forced", forced == [x for x in os.environ.get("FORCED", "").split(",") if x], forced)
    check("memory_setup", len(many["models"]) >= 3 and len(one["models"]) == 1 and d_state + slack < w,
          "the test cannot tell a copy of the weights from the allowance: state +%d, slack %d, weights %d"
          % (d_state, slack, w))
    check("memory_within_kv_difference", d_peak <= d_state + slack,
          "peak RSS grew %.1f MiB; the extra plans' state is %.1f MiB (+%d MiB allowed)"
          % (d_peak / 2**20, d_state / 2**20, slack >> 20))


GROUPS = {"multiplan": group_multiplan, "memory": group_memory, "mixload": group_mixload, "bytes": group_bytes, "basic": group_basic, "errors": group_errors, "auth": group_auth, "disconnect": group_disconnect,
          "timeout": group_timeout, "load": group_load, "sigterm": group_sigterm}

if __name__ == "__main__":
    try:
        GROUPS[GROUP]()
    except Exception as ex:  # a crash of the checker is a failure, never a silent pass
        import traceback
        traceback.print_exc()
        fail("serve_http_" + GROUP, "checker raised %r" % ex)
