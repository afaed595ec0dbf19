#!/usr/bin/env python3
"""Writes math.jsonl: 60 "guesstimate" arithmetic probes in the manner of RYS
(no chain of thought; the answer is scored with partial credit). The numbers
come from a fixed seed; the prompts are reprise's own. Run from probes/."""
import json
import math
import random

rng = random.Random(26)
items = []


def add(question, answer):
    items.append({"prompt": f"{question} The answer is", "answer": int(answer), "max_tokens": 12})


for _ in range(15):
    a, b = rng.randint(100, 999), rng.randint(10, 99)
    add(f"What is {a} times {b}?", a * b)
for _ in range(10):
    a, b = rng.randint(1000, 9999), rng.randint(100, 999)
    add(f"What is {a} multiplied by {b}?", a * b)
for _ in range(10):
    n = rng.randint(2000, 999999)
    add(f"What is the square root of {n}, rounded to the nearest whole number?", round(math.sqrt(n)))
for _ in range(8):
    n = rng.randint(10000, 99999999)
    add(f"What is the cube root of {n}, rounded to the nearest whole number?", round(n ** (1 / 3)))
for _ in range(9):
    a, b = rng.randint(10000, 999999), rng.randint(10000, 999999)
    add(f"What is {a} plus {b}?", a + b)
for _ in range(8):
    a = rng.randint(100, 9999)
    add(f"What is {a} squared?", a * a)
assert len(items) == 60
with open("math.jsonl", "w") as f:
    for it in items:
        f.write(json.dumps(it) + "\n")
