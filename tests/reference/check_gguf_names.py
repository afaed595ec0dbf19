#!/usr/bin/env python3
"""Checks GGUF files written by `reprise convert` against llama.cpp's own
vocabulary of names, as gguf-py (PyPI `gguf`, llama.cpp's Python package)
defines it: every tensor name must be one llama.cpp's loader knows for the
file's architecture (gguf.MODEL_TENSORS / TENSOR_NAMES), every metadata key a
known key (gguf.Keys) with the value type gguf-py writes, and the file must
parse with gguf-py's reader.

Not part of `make test`. Usage:
    python3 tests/reference/check_gguf_names.py FILE.gguf...
Exit status 1 if any file has an unknown name or key.
"""
import sys

import gguf

def known_keys(arch):
    keys = {}
    for group in (gguf.Keys.General, gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.Rope, gguf.Keys.Tokenizer,
                  gguf.Keys.SSM):
        for name, value in vars(group).items():
            if name.startswith("_") or not isinstance(value, str):
                continue
            try:
                keys[value.format(arch=arch)] = name
            except (KeyError, IndexError):  # templates with other fields ({name}, {id})
                pass
    return keys


def check(path):
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    try:
        march = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    except StopIteration:
        return [f"{path}: architecture {arch!r} unknown to gguf-py"]
    names = set()
    for t in gguf.MODEL_TENSORS[march]:
        n = gguf.TENSOR_NAMES[t]
        for bid in range(1024 if "{bid}" in n else 1):
            names.add(n.format(bid=bid))
    bad = []
    for t in r.tensors:
        base = t.name.rsplit(".", 1)[0]
        if base not in names or t.name.rsplit(".", 1)[1] not in ("weight", "bias"):
            bad.append(f"{path}: tensor {t.name!r} is not a {arch} tensor name")
    keys = known_keys(arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        if k not in keys and not k.startswith("tokenizer.chat_template."):
            bad.append(f"{path}: key {k!r} is not a gguf key")
    print(f"{path}: {arch}, {len(r.tensors)} tensors, {len(r.fields) - 3} keys: "
          f"{'ok' if not bad else f'{len(bad)} problems'}")
    return bad


def main():
    problems = []
    for p in sys.argv[1:]:
        problems += check(p)
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
