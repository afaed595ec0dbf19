#!/usr/bin/env python3
"""Structured output, log-probabilities, request fields and server
conventions of `reprise serve` (issue 25), standard library only.

usage: serve_structured.py GROUP PORT
GROUP main: a one-model server with --chat-template chatml --cors '*';
GROUP spec: a server decoding speculatively. Environment: MODEL_ID.
Prints "ok NAME" / "FAIL NAME: why" per check. Every constrained output is
parsed and validated here.
"""
import http.client
import json
import math
import os
import re
import sys

GROUP, PORT = sys.argv[1], int(sys.argv[2])
MODEL_ID = os.environ.get("MODEL_ID", "")
SERVER_LOG = os.environ.get("SERVER_LOG", "")


def ok(name):
    print("ok " + name, flush=True)


def fail(name, why):
    print("FAIL %s: %s" % (name, str(why)[:400]), flush=True)


def check(name, cond, why=""):
    (ok if cond else lambda n: fail(n, why))(name)
    return cond


def request(method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
    r = c.getresponse()
    b = r.read()
    hdrs = dict((k.lower(), v) for k, v in r.getheaders())
    c.close()
    try:
        j = json.loads(b)
    except ValueError:
        j = None
    return r.status, j, b, hdrs


def post(path, body):
    s, j, b, _ = request("POST", path, body)
    return s, j, b


def stream(path, body):
    """The JSON payloads of a streamed reply (without [DONE])."""
    body = dict(body, stream=True)
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode()
    c.close()
    out = []
    for ev in raw.split("\n\n"):
        if ev.startswith("data: ") and ev[6:] != "[DONE]":
            out.append(json.loads(ev[6:]))
    return r.status, out


SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "kind": {"enum": ["cat", "dog"]}},
          "required": ["name", "age", "kind"]}


def valid(text):
    try:
        d = json.loads(text)
    except ValueError as ex:
        return False, "not JSON: %r (%s)" % (text[:200], ex)
    good = (isinstance(d, dict) and set(d) == {"name", "age", "kind"} and isinstance(d["name"], str)
            and len(d["name"]) <= 10 and isinstance(d["age"], int) and 0 <= d["age"] <= 120
            and d["kind"] in ("cat", "dog"))
    return good, d


MSG = [{"role": "user", "content": "Tell me about a pet."}]


def group_main():
    # ---- grammars and schemas: every output parses and validates
    for seed in range(4):
        s, j, b = post("/completion", {"prompt": "Once", "n_predict": 120, "temperature": 1.0, "seed": seed,
                                       "json_schema": SCHEMA})
        good, why = valid(j["content"]) if s == 200 else (False, b)
        check("native_json_schema_seed%d" % seed, good and j["stop_type"] == "eos", why)
    s, j, b = post("/v1/chat/completions", {"messages": MSG, "max_tokens": 120, "temperature": 0.9, "seed": 7,
                                            "response_format": {"type": "json_schema",
                                                                "json_schema": {"name": "pet", "schema": SCHEMA}}})
    good, why = valid(j["choices"][0]["message"]["content"]) if s == 200 else (False, b)
    check("chat_response_format_json_schema", good, why)
    for seed in range(3):
        s, j, b = post("/v1/chat/completions", {"messages": MSG, "max_tokens": 150, "temperature": 1.0, "seed": seed,
                                                "response_format": {"type": "json_object"}})
        txt = j["choices"][0]["message"]["content"] if s == 200 else ""
        try:
            d = json.loads(txt)
            good = isinstance(d, dict) or j["choices"][0]["finish_reason"] == "length"
        except ValueError:
            good = j is not None and j["choices"][0]["finish_reason"] == "length"
        check("chat_json_object_seed%d" % seed, s == 200 and good, b)
    s, j, b = post("/v1/completions", {"prompt": "Once", "max_tokens": 30, "temperature": 1.0, "seed": 3,
                                       "grammar": 'root ::= (" " [a-z]+){1,5} "."'})
    check("completions_grammar", s == 200 and re.fullmatch(r"( [a-z]+){1,5}\.", j["choices"][0]["text"]), b)
    st, ev = stream("/v1/chat/completions", {"messages": MSG, "max_tokens": 120, "temperature": 0.8, "seed": 11,
                                             "json_schema": SCHEMA})
    txt = "".join(e["choices"][0]["delta"].get("content", "") for e in ev if e.get("choices"))
    good, why = valid(txt)
    check("stream_json_schema", st == 200 and good, why)
    for name, body, code in [("grammar_syntax", {"grammar": 'root ::= "a'}, "invalid_grammar"),
                             ("grammar_undefined", {"grammar": "root ::= nope"}, "invalid_grammar"),
                             ("schema_type", {"json_schema": "x"}, "invalid_type"),
                             ("two_grammars", {"grammar": 'root ::= "a"', "json_schema": {}}, "invalid_value"),
                             ("response_format_type", {"response_format": {"type": "xml"}}, "unsupported")]:
        s, j, b = post("/completion", dict(body, prompt="x", n_predict=2))
        check("refuse_" + name, 400 <= s < 500 and j["error"]["code"] == code, b)

    # ---- log-probabilities
    s, j, b = post("/v1/completions", {"prompt": "Once upon", "max_tokens": 8, "temperature": 0, "logprobs": 3})
    lp = j["choices"][0]["logprobs"] if s == 200 else None
    check("completions_logprobs", lp and "".join(lp["tokens"]) == j["choices"][0]["text"]
          and len(lp["tokens"]) == j["usage"]["completion_tokens"]
          and all(len(t) == 3 for t in lp["top_logprobs"]) and all(x <= 0 for x in lp["token_logprobs"])
          and all(abs(max(t.values()) - x) < 1e-4 for t, x in zip(lp["top_logprobs"], lp["token_logprobs"]))
          and lp["text_offset"][0] == 0, b)
    s, j, b = post("/v1/chat/completions", {"messages": MSG, "max_tokens": 8, "temperature": 0.7, "seed": 1,
                                            "logprobs": True, "top_logprobs": 2})
    c = j["choices"][0]["logprobs"]["content"] if s == 200 else []
    check("chat_logprobs", s == 200 and len(c) == j["usage"]["completion_tokens"]
          and all(len(x["top_logprobs"]) == 2 and x["logprob"] <= 0 and isinstance(x["bytes"], list) for x in c)
          and "".join(x["token"] for x in c) == j["choices"][0]["message"]["content"], b)
    st, ev = stream("/v1/chat/completions", {"messages": MSG, "max_tokens": 10, "temperature": 0.7, "seed": 1,
                                             "logprobs": True, "top_logprobs": 2,
                                             "stream_options": {"include_usage": True}})
    streamed = [x for e in ev if e.get("choices") and e["choices"][0].get("logprobs")
                for x in e["choices"][0]["logprobs"]["content"]]
    usage = [e["usage"] for e in ev if e.get("usage")]
    check("chat_logprobs_streamed", st == 200 and usage and len(streamed) == usage[0]["completion_tokens"]
          and all(len(x["top_logprobs"]) == 2 for x in streamed), ev[:3])
    s, j, b = post("/completion", {"prompt": "Once upon", "n_predict": 6, "temperature": 0, "n_probs": 4})
    cp = j.get("completion_probabilities", []) if s == 200 else []
    check("native_n_probs", s == 200 and len(cp) == j["tokens_predicted"]
          and all(len(x["top_logprobs"]) == 4 and x["id"] == x["top_logprobs"][0]["id"] for x in cp), b)
    s, j, b = post("/completion", {"prompt": "Once upon", "n_predict": 6, "temperature": 0.8, "seed": 2,
                                   "n_probs": 3, "post_sampling_probs": True})
    cp = j.get("completion_probabilities", []) if s == 200 else []
    check("native_post_sampling_probs", s == 200 and len(cp) == 6
          and all(0 <= x["prob"] <= 1 and sum(t["prob"] for t in x["top_probs"]) <= 1 + 1e-4 for x in cp), b)
    st, ev = stream("/completion", {"prompt": "Once upon", "n_predict": 6, "temperature": 0, "n_probs": 2})
    probs = [x for e in ev for x in e.get("completion_probabilities", [])]
    check("native_n_probs_streamed", st == 200 and len(probs) == 6, ev[-1:])

    # ---- sampling fields llama-server takes: implemented, not ignored
    base = {"prompt": "Once upon a time", "n_predict": 12, "seed": 5}
    for name, extra in [("mirostat", {"mirostat": 2, "mirostat_tau": 4.0}), ("typical", {"typical_p": 0.8}),
                        ("dry", {"dry_multiplier": 0.8, "dry_sequence_breakers": ["\n", "."]}),
                        ("xtc", {"xtc_probability": 0.5, "xtc_threshold": 0.1}), ("top_n_sigma", {"top_n_sigma": 1.5}),
                        ("samplers", {"samplers": ["top_k", "temperature"]}), ("min_keep", {"min_keep": 2})]:
        s, j, b = post("/completion", dict(base, **extra))
        check("sampling_" + name, s == 200 and j["tokens_predicted"] > 0, b)
    s, j, b = post("/completion", dict(base, samplers="nonsense"))
    check("sampling_bad_samplers_refused", s == 422, b)
    s, j, b = post("/completion", {"prompt": "Once upon a time", "n_predict": 1, "temperature": 0, "return_tokens": True})
    first = j["tokens"][0]
    s, j2, b = post("/completion", {"prompt": "Once upon a time", "n_predict": 1, "temperature": 0, "return_tokens": True,
                                    "logit_bias": [[first, False]]})
    check("logit_bias_bans", s == 200 and j2["tokens"][0] != first, b)
    s, j2, b = post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 1, "temperature": 0,
                                        "logprobs": 0, "logit_bias": {str(first): -100}})
    check("logit_bias_openai", s == 200 and j2["choices"][0]["logprobs"]["tokens"][0] != j["content"], b)
    s, j, b = post("/completion", {"prompt": "Once upon a time", "n_predict": 300, "temperature": 0, "ignore_eos": True})
    check("ignore_eos", s == 200 and j["tokens_predicted"] == 300 and j["stop_type"] == "limit", b)

    # ---- fields refused by name (the table in /props), never ignored
    s, props, b, _ = request("GET", "/props")
    fields = props.get("request_fields", []) if props else []
    refused = [f for f in fields if f["handling"] == "refused"]
    check("props_field_table", len(fields) > 60 and len(refused) > 20, b[:200])
    bad = []
    for f in refused:
        path, body = (("/completion", {"prompt": "x", "n_predict": 1}) if f["native"] else
                      ("/v1/chat/completions", {"messages": MSG, "max_tokens": 1}) if f["chat"] else
                      ("/v1/completions", {"prompt": "x", "max_tokens": 1}))
        value = [{"type": "function", "function": {"name": "f"}}] if f["name"] in ("tools", "functions") else \
            "required" if f["name"] == "tool_choice" else 3
        s, j, b = post(path, dict(body, **{f["name"]: value}))
        if not (s == 422 and ("'%s'" % f["name"]) in j["error"]["message"]):
            bad.append((f["name"], s, b[:100]))
    check("refused_fields_named", not bad, bad[:3])

    # ---- model routing, plan field
    s, j, b = post("/v1/completions", {"prompt": "x", "model": "gpt-4o-mini", "max_tokens": 2})
    check("one_model_any_name", s == 200 and j["model"] == MODEL_ID, b)
    s, j, b, _ = request("GET", "/v1/models")
    check("models_say_routing", s == 200 and j["routing"].startswith("any"), b)
    s, j, b = post("/v1/completions", {"prompt": "x", "plan": MODEL_ID, "max_tokens": 2})
    check("plan_by_name", s == 200, b)
    s, j, b = post("/v1/completions", {"prompt": "x", "plan": "3,5", "max_tokens": 2})
    check("plan_unserved_refused", s == 422 and j["error"]["code"] == "plan_not_served" and "'3,5'" in j["error"]["message"], b)

    # ---- endpoints: /apply-template, /metrics, /slots, CORS, the page
    s, j, b = post("/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})
    check("apply_template", s == 200 and j["prompt"] == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", b)
    s, j, b, h = request("GET", "/metrics")
    text = b.decode()
    m = re.search(r"^llamacpp:tokens_predicted_total (\S+)$", text, re.M)
    check("metrics", s == 200 and h.get("content-type", "").startswith("text/plain") and m and float(m.group(1)) > 0
          and "# TYPE llamacpp:prompt_tokens_total counter" in text and "llamacpp:requests_processing" in text, text[:300])
    s, j, b, _ = request("GET", "/slots")
    check("slots", s == 200 and isinstance(j, list) and len(j) == 2 and all(not x["is_processing"] for x in j), b)
    s, j, b, h = request("OPTIONS", "/v1/chat/completions", headers={"Origin": "http://example.com",
                                                                      "Access-Control-Request-Method": "POST"})
    check("cors_preflight", s == 204 and h.get("access-control-allow-origin") == "*"
          and "POST" in h.get("access-control-allow-methods", ""), (s, h))
    s, j, b, h = request("GET", "/health")
    check("cors_header", h.get("access-control-allow-origin") == "*", h)
    s, j, b, h = request("GET", "/")
    check("chat_page", s == 200 and h.get("content-type", "").startswith("text/html") and b"/v1/models" in b, b[:100])
    if SERVER_LOG:
        log = open(SERVER_LOG).read()
        check("no_mhd_option_warning", "is not the first option" not in log, log[-300:])


def group_spec():
    for seed in range(3):
        s, j, b = post("/completion", {"prompt": "Once", "n_predict": 120, "temperature": 1.0, "seed": seed,
                                       "json_schema": SCHEMA})
        good, why = valid(j["content"]) if s == 200 else (False, b)
        check("spec_json_schema_seed%d" % seed, good, why)
    s, j, b = post("/completion", {"prompt": "Once upon", "n_predict": 8, "temperature": 0, "n_probs": 2})
    cp = j.get("completion_probabilities", []) if s == 200 else []
    check("spec_n_probs", s == 200 and len(cp) == 8 and all(x["id"] == x["top_logprobs"][0]["id"] for x in cp)
          and j["timings"]["draft_n"] > 0, b)
    s, j, b = post("/completion", {"prompt": "x", "n_predict": 2, "n_probs": 2, "post_sampling_probs": True})
    check("spec_post_sampling_refused", s == 422 and "post_sampling_probs" in j["error"]["message"], b)


def group_planreq():
    """--plan-requests 1: a request's spec is built once, then served by name; the limit and bad specs."""
    import subprocess
    want = subprocess.run([os.environ["BIN"], "run", "-m", os.environ["MODEL"], "-p", "Once upon a time", "-n", "12",
                           "--temp", "0", "-t", "1", "-c", "256", "--repeat-layers", "1,3"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode().rstrip("\n")
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "plan": "1,3"}
    s, j, b = post("/v1/completions", dict(body, plan="9,99"))  # refused, and it uses up nothing
    check("plan_request_bad_spec", s == 422 and j["error"]["code"] == "invalid_plan" and "9,99" in j["error"]["message"], b)
    s, j, b = post("/v1/completions", body)
    check("plan_request_built", s == 200 and j["model"] == "1,3" and j["choices"][0]["text"] == want, (b, want))
    s, j, b = post("/v1/completions", body)
    check("plan_request_reused", s == 200 and j["choices"][0]["text"] == want, b)
    s, j, b, _ = request("GET", "/v1/models")
    ids = [m["id"] for m in j["data"]]
    check("plan_request_listed", ids == [MODEL_ID, "1,3"] and j["routing"].startswith("by id"), ids)
    s, j, b = post("/v1/completions", {"prompt": "x", "max_tokens": 2, "model": "1,3"})
    check("plan_request_by_model_name", s == 200 and j["model"] == "1,3", b)
    s, j, b = post("/v1/completions", dict(body, plan="2,4"))
    check("plan_request_limit", s == 503 and j["error"]["code"] == "plan_limit", b)


{"main": group_main, "spec": group_spec, "planreq": group_planreq}[GROUP]()
