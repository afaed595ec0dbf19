#!/usr/bin/env python3
"""Compares `reprise convert` with llama.cpp's own converter on the fixtures.

Runs llama.cpp's convert_hf_to_gguf.py (from a llama.cpp source tree you give;
nothing of it is part of reprise) and `reprise convert` on each checkpoint
under tests/fixtures/hf/, both at --outtype f32, and compares the two GGUF
files with gguf-py: the same metadata keys with the same types and values, the
same tensor names, shapes and types, and tensor data equal bit for bit.

Known, intended differences are listed in EXPECTED and reported, not failed:
 - the fixtures' tiny byte-level tokenizers are unknown to llama.cpp's
   pre-tokenizer hash table, so its get_vocab_base_pre is told the answer
   ("qwen2", what the split regex is) instead of refusing;
 - Gemma 3 without tokenizer.model: llama.cpp falls back to its GPT-2 path
   for the SentencePiece-style tokenizer.json; reprise converts it as the
   SentencePiece vocabulary it is, so tokenizer.* keys differ there;
 - SentencePiece-style scores: llama.cpp's tokenizer.json path writes -1000
   for every piece, reprise scores pieces by merge rank;
 - Gemma's norm weights from an F16 (or BF16 -> F32) checkpoint: reprise adds
   the 1 in F32, as transformers computes 1 + w; llama.cpp adds it in F16
   when the checkpoint is F16, rounding the result;
 - general.* naming keys llama.cpp derives from model cards (size label, ...).

Not part of `make test`. Usage:
    python3 tests/reference/compare_llamacpp_convert.py LLAMA_CPP_DIR [REPRISE_BIN]
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "hf"

# keys whose values may differ for a stated reason (prefix match)
EXPECTED = {
    "general.": "naming metadata",
    "tokenizer.ggml.scores": "merge-rank scores (reprise) vs -1000 placeholders (llama.cpp tokenizer.json path)",
}
GEMMA_VOCAB = "Gemma 3 tokenizer.json converted as SentencePiece (reprise) vs GPT-2 fallback (llama.cpp)"
GEMMA_NORM = ("1 + w computed in F32 as transformers does; llama.cpp adds 1 in the checkpoint's dtype, which "
              "for this F16 checkpoint rounds 1 + w to F16")


def run_llamacpp(lcpp, model_dir, out):
    """convert_hf_to_gguf.py with get_vocab_base_pre answering for tokenizers
    its hash table does not list."""
    code = f"""
import sys
sys.argv = ["convert_hf_to_gguf.py", {str(model_dir)!r}, "--outfile", {str(out)!r}, "--outtype", "f32"]
sys.path.insert(0, {str(lcpp)!r})
import convert_hf_to_gguf as c
base = getattr(c, "TextModel", None)
try:
    from conversion import base as cb
    base = cb.TextModel
except ImportError:
    pass
orig = base.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        return "qwen2"
base.get_vocab_base_pre = pre
c.main()
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=lcpp, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])


def fields(reader):
    out = {}
    for k, f in reader.fields.items():
        if k.startswith("GGUF."):
            continue
        v = f.contents()
        out[k] = (tuple(int(t) for t in f.types), v)
    return out


def compare(name, a_path, b_path):
    import gguf
    a, b = gguf.GGUFReader(a_path), gguf.GGUFReader(b_path)
    fa, fb = fields(a), fields(b)
    problems, notes = [], []
    for k in sorted(set(fa) | set(fb)):
        reason = next((r for p, r in EXPECTED.items() if k.startswith(p)), None)
        if name == "gemma3" and k.startswith("tokenizer."):
            reason = GEMMA_VOCAB
        if k not in fa or k not in fb:
            (notes if reason else problems).append(
                f"{k}: only in {'llama.cpp' if k in fa else 'reprise'}" + (f" ({reason})" if reason else ""))
        elif fa[k] != fb[k]:
            (notes if reason else problems).append(f"{k}: llama.cpp {fa[k][1]!r:.80} vs reprise {fb[k][1]!r:.80}"
                                                   + (f" ({reason})" if reason else ""))
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    for n in sorted(set(ta) | set(tb)):
        if n not in ta or n not in tb:
            problems.append(f"tensor {n}: only in {'llama.cpp' if n in ta else 'reprise'}")
            continue
        x, y = ta[n], tb[n]
        if list(x.shape) != list(y.shape) or x.tensor_type != y.tensor_type:
            problems.append(f"tensor {n}: {x.tensor_type.name}{list(x.shape)} vs {y.tensor_type.name}{list(y.shape)}")
        elif not np.array_equal(np.asarray(x.data).view(np.uint8), np.asarray(y.data).view(np.uint8)):
            d = np.abs(np.asarray(x.data, dtype=np.float64) - np.asarray(y.data, dtype=np.float64)).max()
            if name == "gemma3" and n.endswith("norm.weight"):
                notes.append(f"tensor {n}: max |d| {d:.3g} ({GEMMA_NORM})")
            else:
                problems.append(f"tensor {n}: data differs (max |d| {d:.3g})")
    print(f"{name}: {len(fa)} / {len(fb)} keys, {len(ta)} / {len(tb)} tensors (llama.cpp / reprise): "
          f"{'identical' if not problems and not notes else f'{len(problems)} differences, {len(notes)} expected'}")
    for n in notes:
        print("   expected:", n)
    for p in problems:
        print("   DIFFERS: ", p)
    return problems


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    lcpp = Path(sys.argv[1]).resolve()
    binary = Path(sys.argv[2] if len(sys.argv) > 2 else ROOT / "build" / "reprise").resolve()
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("llama", "qwen2", "qwen3", "gemma3"):
            a, b = Path(tmp) / f"{name}-llamacpp.gguf", Path(tmp) / f"{name}-reprise.gguf"
            run_llamacpp(lcpp, FIX / name, a)
            subprocess.run([str(binary), "convert", str(FIX / name), "-o", str(b), "--outtype", "f32", "-q"],
                           check=True)
            problems += compare(name, a, b)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
