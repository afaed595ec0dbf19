#!/usr/bin/env python3
"""Renders the chat-template fixtures under tests/fixtures/templates/ with
transformers, the reference for reprise's Jinja interpreter (src/text/jinja*.c).

Not run by `make test`. Needs a venv with transformers and jinja2 (no torch):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install transformers jinja2 gguf
    /tmp/venv/bin/python tests/reference/make_template_fixtures.py [--llama-cpp DIR]

What runs is transformers' own `render_jinja_template` after its
`_normalize_chat_messages` (exactly what `PreTrainedTokenizerBase.
apply_chat_template(tokenize=False)` does, minus loading a tokenizer): the
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
transformers' tojson, raise_exception, strftime_now, dict and namespace. The
special-tokens map is bos_token/eos_token only (the models' own tokens; a model
without a BOS token passes none). strftime_now is pinned to 2025-01-15 12:00 so
that renderings are reproducible (the C test pins the same time).

Writes expected/<name>.json: one case per conversation x add_generation_prompt
x extra variables (enable_thinking false/true where the template reads it),
with the rendered text, or the error the template raised.
"""
import argparse
import datetime
import json
import os
import shutil
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures", "templates")
FIXED_NOW = datetime.datetime(2025, 1, 15, 12, 0, 0)

# name: (source, bos_token, eos_token). Sources: "gguf:PATH" (key
# tokenizer.chat_template), "hfcfg:PATH" (chat_template of a tokenizer_config.json),
# or a file name under llama.cpp's models/templates/.
TEMPLATES = {
    "smollm2": ("gguf:~/.cache/reprise/SmolLM2-135M-Instruct.Q4_1.gguf", "<|im_start|>", "<|im_end|>"),
    "gemma3": ("hfcfg:SHARED/vocab/gemma3/tokenizer_config.json", "<bos>", "<end_of_turn>"),
    "gemma2": ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>"),
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", None, "<|im_end|>"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", None, "<|im_end|>"),
    "qwq": ("Qwen-QwQ-32B.jinja", None, "<|im_end|>"),
    "qwen3-coder": ("Qwen3-Coder.jinja", None, "<|im_end|>"),
    "llama3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.3": ("meta-llama-Llama-3.3-70B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    "mistral-small-3.2": ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "<s>", "</s>"),
    "phi3.5": ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>"),
    "deepseek-r1-qwen": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                         "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-r1-llama": ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
                          "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "hermes2-pro": ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
    "hermes3": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
    "smollm3": ("HuggingFaceTB-SmolLM3-3B.jinja", None, "<|im_end|>"),
    "granite3.3": ("ibm-granite-granite-3.3-2B-Instruct.jinja", "<|end_of_text|>", "<|end_of_text|>"),
    "functionary3.2": ("meetkai-functionary-medium-v3.2.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "command-r7b": ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "gpt-oss": ("openai-gpt-oss-120b.jinja", "<|startoftext|>", "<|return|>"),
    "kimi-k2": ("moonshotai-Kimi-K2.jinja", None, "<|im_end|>"),
    "glm4.6": ("GLM-4.6.jinja", None, "<|endoftext|>"),
    "lfm2": ("LFM2-8B-A1B.jinja", "<|startoftext|>", "<|im_end|>"),
}


def load_template(src, llama_cpp, shared):
    if src.startswith("gguf:"):
        import gguf
        r = gguf.GGUFReader(os.path.expanduser(src[5:]))
        f = r.fields["tokenizer.chat_template"]
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    if src.startswith("hfcfg:"):
        path = src[6:].replace("SHARED", shared)
        with open(path, encoding="utf-8") as fp:
            return json.load(fp)["chat_template"]
    with open(os.path.join(llama_cpp, "models", "templates", src), encoding="utf-8") as fp:
        return fp.read()


def render(template, conv, agp, bos, eos, extra):
    env = ctu._compile_jinja_template(template).environment
    env.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
    messages = ctu._normalize_chat_messages(json.loads(json.dumps(conv["messages"])))
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    kwargs.update(extra)
    out, _ = ctu.render_jinja_template(conversations=[messages], tools=conv.get("tools"),
                                       chat_template=template, add_generation_prompt=agp, **kwargs)
    return out[0]


# Small templates exercising one feature each, rendered with the same
# environment (variables in "vars"). Written to snippets.json.
SNIPPETS = [
    ("{% for i in range(3) %}{% if i > 0 %}[{{ x }}]{% endif %}{% set x = i %}{% endfor %}", {}),
    ("{% set x = 5 %}{% for i in range(3) %}[{{ x }}]{% set x = i %}{% endfor %}{{x}}", {}),
    ("{% macro m() %}{{ y }}{% endmacro %}{% set y = 1 %}{{ m() }}{% set y = 2 %}{{ m() }}", {}),
    ("{{ m }}{% macro m() %}a{% endmacro %}", {}),
    ("{{ [1,'a',None,True,1.5,{'k':[1]}] }}", {}),
    ("{{ (1,2) }}{{ (1,) }}{{ () }}{{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 3/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", {}),
    ("{{ x.y }}", {}),
    ("{{ 'abc'[::-1] }}{{ 'héllo'|length }}{{ 'héllo'[1:3] }}{{ [1,2,3,4,5][1:4:2] }}{{ [1,2,3][-2:] }}{{ 'abcdef'[-3:-1] }}{{ [1,2,3][::-2] }}", {}),
    ("{{ undefined_thing }}|{{ none }}|{{ true }}|{{ False }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ True + 1 }}{{ 1 == 1.0 }}{{ True == 1 }}{{ 'x' in undefined_v }}{{ undefined_v|length }}", {}),
    ("{% for a in undefined_v %}x{% else %}empty{% endfor %}", {}),
    ("{{ {'a':1, 'b': [1, 2.5, None, true, 'é\"\\\\']}|tojson }}", {}),
    ("{{ [1,{'a':[]},{}]|tojson(indent=2) }}|{{ {'b':1,'a':2}|tojson(sort_keys=true) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ [1,2]|tojson(separators=(',', ':')) }}", {}),
    ("{{ 'it\\'s' }} {{ \"it's\" }} {{ ['it\\'s'] }} {{ ['a\"b'] }} {{ ['a\\nb\\t'] }} {{ '\\x41\\u00e9\\U0001F600\\101' }}", {}),
    ("{{ d }}", {"d": {"a": None, "b": "x'y\"z", "c": [1, 2.0]}}),
    ("{{ 'a' ~ 1 ~ None ~ undefined_x ~ [1] }}", {}),
    ("{{ 1 if false }}|{{ 'y' if true else 'n' }}|{{ 'a' if 0 else 'b' if 1 else 'c' }}", {}),
    ("{{ 5 - -3 }} {{ 2**10 }} {{ -2**2 }} {{ 2**-1 }} {{ 10 % 3 }} {{ 2 * 3 + 4 }} {{ (2 + 3) * 4 }} {{ 1 - 2 - 3 }}", {}),
    ("{{ 'abc' * 2 }}{{ [1]*3 }}{{ 3 * 'x' }}", {}),
    ("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c, d = 'xy' %}{{ c }}{{ d }}", {}),
    ("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a b c'.rsplit(' ', 1) }}{{ '  a b  c '.split(None, 1) }}{{ 'l1\\nl2\\r\\nl3'.splitlines() }}", {}),
    ("{{ '{} and {name}'.format(1, name='x') }}|{{ '{0}{1}{0}'.format('a', 'b') }}|{{ '{:>5}|{:<4}|{:^6}|{:05.2f}|{!r}'.format('a', 'b', 'c', 3.14159, 'q') }}", {}),
    ("{{ 'hello world-wide (x)'|title }}|{{ 'hELLO wORLD'.title() }}|{{ 'hELLO'|capitalize }}|{{ 'MiXeD'|lower }}{{ 'MiXeD'|upper }}{{ 'àé'|upper }}", {}),
    ("{{ [3,1,2]|sort }}{{ [3,1,2]|sort(reverse=true)|list }}{{ ['b','A','c']|sort }}{{ ['b','A','c']|sort(case_sensitive=true) }}{{ {'b':1,'a':2}|dictsort }}{{ {'b':1,'a':2}|dictsort(by='value') }}", {}),
    ("{{ [{'n':'b','v':2},{'n':'a','v':1}]|sort(attribute='n')|map(attribute='v')|list }}", {}),
    ("{{ 2.5|round }} {{ 3.5|round }} {{ 2.567|round(2) }} {{ 2|round }} {{ 2.4|round(method='ceil') }} {{ 2.6|round(0, 'floor') }} {{ -1.5|round }}", {}),
    ("{{ range(5)|batch(2)|list }}{{ range(5)|batch(2, 'x')|list }}{{ range(2, 10, 3)|list }}{{ range(5, 0, -2)|list }}", {}),
    ("{{ 'abc'|list }}{{ {'a':1}|list }}{{ {'a':1}|items|list }}{{ (1,2)|list }}", {}),
    ("{{ x|default('d') }}{{ ''|default('e') }}{{ ''|default('e', true) }}{{ none|default('n') }}{{ x|d('dd') }}", {}),
    ("{{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ 'abc'|first }}{{ []|first }}|", {}),
    ("{{ [1,2,2,3,1]|unique|list }}{{ ['a','A','b']|unique|list }}{{ [1,-2]|map('abs')|list }}{{ ['a','b']|map('upper')|join(',') }}", {}),
    ("{{ 'a\\nb'|indent(2) }}|{{ 'a\\n\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'a\\nb\\n'|indent('--') }}|{{ 'x\\n'|indent(2, blank=true) }}", {}),
    ("{{ '<a href=\"x\">&\\'</a>'|e }}{{ '<a>'|safe }}{{ '<b>'|escape }}", {}),
    ("{{ 42|string }}{{ '42'|int + 1 }}{{ '4.5'|float }}{{ 'x'|int }}{{ '4.5'|int }}{{ 4.9|int }}{{ ' 12 '|int }}{{ 'ff'|int(base=16) }}{{ 'x'|float }}{{ 3|float }}", {}),
    ("{{ 1.0 }} {{ 1.5e300*1e10 }} {{ -0.0 }} {{ 100.0 }} {{ 123456789012345678.0 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 2.5e-7 }} {{ 1e-4 }}", {}),
    ("{% for k, v in {'a':1,'b':2}.items() %}{{k}}={{v}} {{ loop.index }}/{{ loop.length }} {{ loop.revindex }} {{ loop.revindex0 }} {{ loop.first }}{{ loop.last }};{% endfor %}", {}),
    ("{% for x in [1,2,3] if x != 2 %}{{ x }}{{ loop.index }}{{ loop.last }}{% endfor %}", {}),
    ("{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% if x == 3 %}{% break %}{% endif %}{% endfor %}", {}),
    ("{% for x in [1,2,3,4] %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}", {}),
    ("{% for x in 'ab' %}{% for y in [1,2] %}{{ x }}{{ y }}{{ loop.depth }}{{ loop.cycle('a','b') }} {% endfor %}{{ loop.depth }}{% endfor %}", {}),
    ("{% set ns = namespace(a=1, b='x') %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns.c }}", {}),
    ("{% set ns = namespace() %}{% set ns.items = [] %}{{ ns.items|length }}", {}),
    ("{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', 'Hi') }} {{ greet('C', punct='?') }} {{ greet(greeting='Yo', name='D') }}", {}),
    ("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}|{{ m() }}|", {}),
    ("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("{% macro row(x) %}[{{ caller(x * 2) }}]{% endmacro %}{% call(v) row(21) %}v={{ v }}{% endcall %}", {}),
    ("{% set block %}  text {{ 1 }}\n{% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}", {}),
    ("{% filter upper %}hello {{ 'x' }}{% endfilter %}", {}),
    ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ 's' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 's' is iterable }}{{ x is iterable }}{{ [] is sequence }}{{ true is boolean }}{{ 1 is boolean }}", {}),
    ("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 2 is gt 1 }}{{ 2 is lt 1 }}{{ 2 is ge 2 }}{{ 'a' is in 'abc' }}{{ 2 is in [1,2] }}{{ none is sameas none }}{{ false is sameas false }}{{ true is true }}{{ 0 is false }}{{ 'abc' is lower }}{{ 'AB' is upper }}", {}),
    ("{{ x is not defined }}{{ not x is defined }}{{ 1 is not string }}{{ f is callable }}{{ range is callable }}", {"f": 1}),
    ("{{ [{'r':'u'},{'r':'a'},{'r':'u','x':1}]|selectattr('r','equalto','u')|list }}{{ [{'r':'u'},{'r':'a'}]|rejectattr('r','eq','u')|list }}{{ [{'a':0},{'a':1}]|selectattr('a')|list }}{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('gt', 2)|list }}{{ [0,1,'',none,'x']|select|list }}", {}),
    ("{{ [{'a':{'b':1}},{'a':{'b':2}}]|map(attribute='a.b')|list }}{{ [{'a':1},{}]|map(attribute='a', default='z')|list }}{{ [[1,2],[3,4]]|map(attribute='1')|list }}", {}),
    ("{{ [1,2,3]|sum }}{{ [{'v':1.5},{'v':2}]|sum(attribute='v') }}{{ [3,1,2]|min }}{{ [3,1,2]|max }}{{ ['b','A']|min }}{{ [1,2,3]|reverse|list }}{{ 'abc'|reverse }}", {}),
    ("{{ 'a b  c'|wordcount }}{{ 'x'|center(5) }}|{{ 'ab'|center(5) }}|{{ '%s-%d-%.2f-%5s-%-4d|%x %r %%'|format('a', 3, 1.5, 'r', 7, 255, 'q') }}{{ '%(a)s=%(b)d' % {'a': 'k', 'b': 2} }}{{ '%s' % 'one' }}{{ '%s %s' % (1, 2) }}", {}),
    ("{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ '  a '.strip() }}|{{ '--a--'.lstrip('-') }}|{{ '--a--'.rstrip('-') }}|{{ '\\n\\nx\\n'.strip('\\n') }}|{{ '\\u3000a\\xa0'|trim }}", {}),
    ("{{ 'abcabc'.replace('b', 'X') }}{{ 'abcabc'.replace('b', 'X', 1) }}{{ 'aaa'|replace('a', 'b', 2) }}{{ 'ab'.replace('', '-') }}", {}),
    ("{{ 'abc'.startswith('a') }}{{ 'abc'.startswith(('x', 'ab')) }}{{ 'abc'.endswith('bc') }}{{ 'abc'.find('c') }}{{ 'abcb'.rfind('b') }}{{ 'abcb'.count('b') }}{{ 'é'.find('x') }}{{ 'aé'.find('é') }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ 'a1'.isalnum() }}{{ ' '.isspace() }}{{ 'AB'.isupper() }}{{ 'ab'.islower() }}{{ 'xab'.removeprefix('x') }}{{ 'abx'.removesuffix('x') }}{{ '-'.join(['a','b']) }}", {}),
    ("{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 7) }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}{{ d|length }}{{ 'a' in d }}{{ d['a'] }}{{ d.a }}{{ d['zz'] }}|", {"d": {"a": 1, "b": [2]}}),
    ("{% set l = [1, 2] %}{{ l.index(2) }}{{ [1,1,2].count(1) }}", {}),
    ("{{ messages[0]['role'] }}{{ messages[0].content }}{{ messages[1] is defined }}{{ messages[-1].role }}{{ (messages|last).role }}", {"messages": [{"role": "user", "content": "hi"}]}),
    ("{%- for m in messages -%}\n  {{- m.role }}: {{ m.content | trim }}\n{%- endfor -%}\n", {"messages": [{"role": "a", "content": " x "}, {"role": "b", "content": "y"}]}),
    ("  {% if true %}\n    yes\n  {% endif %}\n  {# comment #}\n  after\n{%+ if true %}keep{% endif %}\n{% if true +%}\nkept newline{% endif %}", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e {# x -#}   f  {#- y #} g", {}),
    ("{% raw %}{{ not evaluated }}{% endraw %}|{%- raw -%}  {% x %}  {%- endraw -%}|", {}),
    ("line1\r\nline2\rline3\n", {}),
    ("{{ \"a\" \"b\" 'c' }}{{ 1_000 }}{{ 1.5e3 }}{{ 0 }}", {}),
    ("{{ [1, 2][5] is defined }}{{ {'a': 1}.b is defined }}{{ none.x is defined }}", {}),
    ("{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' < 'b' }}{{ [1,2] < [1,3] }}{{ 1 != 2 }}{{ 2 not in [1] }}{{ not 1 in [1] }}", {}),
    ("{{ 0 or 'x' }}{{ 1 and 'y' }}{{ '' and 'z' }}{{ none or none }}|{{ 0 or [] }}", {}),
    ("{{ [1,2] + [3] }}{{ (1,) + (2,) }}{{ 'a' + 'b' }}{{ 1 + 2.5 }}{{ 10 / 4 }}{{ 2 ** 0.5 }}", {}),
    ("{{ dict(a=1, b='x') }}{{ dict(a=1)['a'] }}", {}),
    ("{{ raise_exception('custom error: ' ~ 42) }}", {}),
    ("{{ strftime_now('%Y-%m-%d %d %b %Y %H:%M') }}", {}),
    ("{{ x.y.z }}", {"x": {}}),
    ("{{ 1 / 0 }}", {}),
    ("{{ none + 1 }}", {}),
    ("{% for x in none %}{% endfor %}", {}),
    ("{{ 5|length }}", {}),
    ("{{ 5|items|list }}", {}),
    ("{{ x | tojson }}", {}),
    ("{{ 'abc' | batch(2) | list }}", {}),
    ("{% set a, b = [1, 2, 3] %}", {}),
]


def render_snippet(src, variables):
    env = ctu._compile_jinja_template(src).environment
    env.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
    try:
        return {"output": ctu._compile_jinja_template(src).render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e), "raised": type(e) is jinja2.exceptions.TemplateError}
    except Exception as e:
        return {"error": "%s: %s" % (type(e).__name__, e), "raised": False}


def write_snippets():
    out = []
    for src, variables in SNIPPETS:
        case = {"template": src, "vars": variables}
        case.update(render_snippet(src, variables))
        out.append(case)
    with open(os.path.join(FIX, "snippets.json"), "w", encoding="utf-8") as fp:
        json.dump(out, fp, ensure_ascii=False, indent=1)
        fp.write("\n")
    print("snippets: %d (%d errors)" % (len(out), sum("error" in c for c in out)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", default="/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp")
    ap.add_argument("--shared", default=os.environ.get("REPRISE_SHARED", os.path.join(HERE, "..", "..", "..", "shared")))
    args = ap.parse_args()
    with open(os.path.join(FIX, "conversations.json"), encoding="utf-8") as fp:
        convs = json.load(fp)
    os.makedirs(os.path.join(FIX, "expected"), exist_ok=True)
    for name, (src, bos, eos) in TEMPLATES.items():
        template = load_template(src, args.llama_cpp, args.shared)
        with open(os.path.join(FIX, name + ".jinja"), "w", encoding="utf-8", newline="") as fp:
            fp.write(template)
        extras = [{}]
        if "enable_thinking" in template:
            extras += [{"enable_thinking": False}, {"enable_thinking": True}]
        cases = []
        n_ok = 0
        for cname, conv in convs.items():
            for agp in (False, True):
                for extra in extras:
                    case = {"conversation": cname, "add_generation_prompt": agp, "extra": extra}
                    try:
                        case["output"] = render(template, conv, agp, bos, eos, extra)
                        n_ok += 1
                    except jinja2.exceptions.TemplateError as e:
                        # raise_exception raises exactly TemplateError; Jinja's own
                        # errors are subclasses (UndefinedError, SecurityError, ...)
                        case["error"] = str(e)
                        case["raised"] = type(e) is jinja2.exceptions.TemplateError
                    except Exception as e:  # TypeError and the like from Python operations
                        case["error"] = "%s: %s" % (type(e).__name__, e)
                        case["raised"] = False
                    cases.append(case)
        doc = {"template": name + ".jinja", "source": src, "bos_token": bos, "eos_token": eos,
               "transformers": transformers.__version__, "jinja2": jinja2.__version__, "cases": cases}
        with open(os.path.join(FIX, "expected", name + ".json"), "w", encoding="utf-8") as fp:
            json.dump(doc, fp, ensure_ascii=False, indent=1)
            fp.write("\n")
        print("%-20s %3d rendered, %3d errors" % (name, n_ok, len(cases) - n_ok))
    write_snippets()


if __name__ == "__main__":
    sys.exit(main())
