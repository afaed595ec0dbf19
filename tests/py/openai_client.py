#!/usr/bin/env python3
"""`reprise serve` driven by the official `openai` Python client.

usage: openai_client.py PORT   (env: API_KEY, MODEL_ID, WANT_GREEDY: `reprise
run --temp 0 -n 32` of "Once upon a time")
Prints "ok NAME" / "FAIL NAME: why" per check.
"""
import os
import sys

PORT = int(sys.argv[1])
KEY = os.environ["API_KEY"]
MODEL_ID = os.environ["MODEL_ID"]
WANT = os.environ["WANT_GREEDY"]


def ok(name):
    print("ok " + name, flush=True)


def fail(name, why):
    print("FAIL %s: %s" % (name, str(why)[:400]), flush=True)


def check(name, cond, why=""):
    ok(name) if cond else fail(name, why)


def main():
    import openai

    base = "http://127.0.0.1:%d/v1" % PORT
    client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)

    models = client.models.list()
    check("openai_models", [m.id for m in models.data] == [MODEL_ID], models)

    r = client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=32, temperature=0)
    check("openai_completion_greedy", r.choices[0].text == WANT and r.choices[0].finish_reason == "length"
          and r.usage.completion_tokens == 32, (r.choices[0].text, WANT))

    chunks = list(client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=32, temperature=0,
                                            stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    check("openai_completion_stream", text == WANT and chunks[-1].choices[0].finish_reason == "length", text)

    msgs = [{"role": "user", "content": "Tell me a story."}]
    r = client.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=16, temperature=0)
    content = r.choices[0].message.content
    check("openai_chat", isinstance(content, str) and r.choices[0].message.role == "assistant"
          and r.choices[0].finish_reason in ("stop", "length") and r.usage.prompt_tokens > 0, r)

    chunks = list(client.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=16, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check("openai_chat_stream", streamed == content and chunks[-1].usage is not None
          and chunks[-1].usage.completion_tokens == r.usage.completion_tokens, (streamed, content))

    r = client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=32, temperature=0,
                                  stop=[WANT[10:14]])
    check("openai_stop", r.choices[0].text == WANT[:WANT.find(WANT[10:14])] and r.choices[0].finish_reason == "stop",
          (r.choices[0].text, WANT[10:14]))

    def raises(name, exc, fn):
        try:
            fn()
            fail(name, "no exception")
        except exc as ex:
            check(name, isinstance(ex.body, dict) and "message" in ex.body, ex.body)
        except Exception as ex:  # noqa: BLE001
            fail(name, "raised %r" % ex)

    # a one-model server serves any model name, as llama-server does (clients send fixed names)
    try:
        r = client.completions.create(model="gpt-4o", prompt="x", max_tokens=2)
        check("openai_any_model_name", r.model == MODEL_ID and r.choices[0].text is not None, r)
    except Exception as ex:  # noqa: BLE001
        fail("openai_any_model_name", "raised %r" % ex)
    try:
        r = client.chat.completions.create(model="gpt-4o-mini", max_tokens=6, temperature=0, logprobs=True,
                                           top_logprobs=2, messages=[{"role": "user", "content": "Hi"}])
        lp = r.choices[0].logprobs.content
        check("openai_chat_logprobs", len(lp) == r.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in lp), r)
    except Exception as ex:  # noqa: BLE001
        fail("openai_chat_logprobs", "raised %r" % ex)
    try:
        r = client.chat.completions.create(model=MODEL_ID, max_tokens=100, temperature=0.8, seed=3,
                                           response_format={"type": "json_object"},
                                           messages=[{"role": "user", "content": "Hi"}])
        import json as _json
        good = r.choices[0].finish_reason == "length"
        if not good:
            good = isinstance(_json.loads(r.choices[0].message.content), dict)
        check("openai_json_object", good, r.choices[0].message.content)
    except Exception as ex:  # noqa: BLE001
        fail("openai_json_object", "raised %r" % ex)
    raises("openai_bad_value", openai.UnprocessableEntityError,
           lambda: client.completions.create(model=MODEL_ID, prompt="x", max_tokens=2, temperature=-1))
    bad = openai.OpenAI(base_url=base, api_key="not-the-key", max_retries=0, timeout=30)
    raises("openai_bad_key", openai.AuthenticationError, lambda: bad.models.list())


if __name__ == "__main__":
    try:
        main()
    except Exception as ex:  # noqa: BLE001 - a crash is a failure, never a silent pass
        import traceback
        traceback.print_exc()
        fail("openai_client", "raised %r" % ex)
