#!/usr/bin/env python3
"""Builds the tiny Hugging Face checkpoints under tests/fixtures/hf/ and their
reference outputs, with PyPI torch + transformers + tokenizers.

Not part of `make test` or CI: run it only to regenerate the fixtures
(`python3 tests/reference/make_hf_fixtures.py`), then commit what it writes.
Everything is seeded, so a rerun with the same library versions gives the same
tensors (the versions used are recorded in tests/fixtures/hf/README.md).

For each architecture it writes tests/fixtures/hf/<name>/:
  config.json, model.safetensors (or shards + model.safetensors.index.json),
  tokenizer.json, tokenizer_config.json   -- what `reprise convert` reads
  ref/tokens.txt        the token ids of the reference sequence (one line)
  ref/logits.f32        raw little-endian float32, n_tokens x n_vocab, row i =
                        logits after token i, the whole sequence in one forward
                        pass of the saved checkpoint loaded in float32 (eager
                        attention)
  ref/logits-f16w.f32   the same with every 2-D weight rounded to float16
  ref/logits-bf16w.f32  the same with every 2-D weight rounded to bfloat16
                        (what --outtype f16 / bf16 store; norms stay float32)
  ref/logits-ggml-act*.f32  (gemma3, instead of the rounded-weight files
                        above) logits, -f16w, -bf16w with the FFN's GELU
                        evaluated as ggml's CPU backend does (through fp16),
                        which llama.cpp and reprise reproduce
  ref/vocab.inp/.out    llama.cpp test-tokenizer-0 format: the inputs of
                        ../shared/vocab/llama.cpp/ggml-vocab-llama-spm.gguf.inp
                        and this tokenizer's ids for them (no BOS/EOS)

The weights are random but not small: embeddings N(0,1), matrices
N(0, 1/fan_in), norms 1 + N(0, 0.1) (Gemma stores the offset from 1), biases
N(0, 0.1), so the logits are O(1) and a wrong layout or transform shows up as
a large difference, not as noise under the tolerance.
"""
import ctypes
import ctypes.util
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "hf"
SHARED = Path(os.environ.get("REPRISE_SHARED", ROOT.parent / "shared"))
TEXT = SHARED / "text" / "war-and-peace.txt"
VOCAB_INP = SHARED / "vocab" / "llama.cpp" / "ggml-vocab-llama-spm.gguf.inp"
PROMPT = "Once upon a time, there was a little girl named Lily. She liked to read books."
SEP = "\n__ggml_vocab_test__\n"

QWEN2_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def training_text(n_chars=200_000):
    with open(TEXT, encoding="utf-8") as f:
        text = f.read(n_chars)
    # a few characters outside plain English so byte fallback and multi-byte
    # merges have something to do
    extra = "naïve café Ünïcödé — “quotes” 3.14 1234567 中文 Привет мир\n" * 20
    return [text[i:i + 2000] for i in range(0, len(text), 2000)] + [extra]


# ---- tokenizers -------------------------------------------------------------

def byte_level_tokenizer(vocab_size, specials):
    """Byte-level BPE split by the Qwen2 regex (tokenizer.ggml.pre = qwen2)."""
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    tok.add_special_tokens(specials)
    return tok


def spm_tokenizer(vocab_size, specials, unk, prepend, bos=None):
    """SentencePiece-style BPE with byte fallback, as transformers converts
    Llama 2 (prepend=True: Prepend + Replace normalizer) and Gemma
    (prepend=False: Replace only) tokenizers: specials, then <0x00>..<0xFF>,
    then the learned pieces; spaces become U+2581."""
    base = Tokenizer(models.BPE(unk_token=unk))
    base.normalizer = normalizers.Replace(" ", "\u2581")
    base.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    n_learned = vocab_size - len(specials) - 256
    trainer = trainers.BpeTrainer(vocab_size=n_learned, show_progress=False)
    base.train_from_iterator(training_text(), trainer)
    learned = json.loads(base.to_str())["model"]
    pieces = sorted(learned["vocab"].items(), key=lambda kv: kv[1])
    vocab = {}
    for s in specials:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in pieces:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    norm = [{"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]
    if prepend:
        norm.insert(0, {"type": "Prepend", "prepend": "\u2581"})
    post = None
    if bos is not None:
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}}}
    decoder = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
               {"type": "ByteFallback"}, {"type": "Fuse"}]
    if prepend:
        decoder.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    spec = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for s in specials],
        "normalizer": {"type": "Sequence", "normalizers": norm},
        "pre_tokenizer": None,
        "post_processor": post,
        "decoder": {"type": "Sequence", "decoders": decoder},
        "model": {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": learned["merges"]},
    }
    return Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))


def save_tokenizer(tok, d, extra_config, **special):
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **special)
    fast.save_pretrained(d)
    # tokenizer_config.json as the real checkpoints write it (add_bos_token,
    # chat_template, ...): the keys the converter reads
    p = Path(d) / "tokenizer_config.json"
    cfg = json.loads(p.read_text(encoding="utf-8"))
    cfg.update(extra_config)
    p.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return PreTrainedTokenizerFast.from_pretrained(d)


# ---- models -----------------------------------------------------------------

def randomize(model, seed, gemma_norms=False):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                if name.endswith("norm.weight"):
                    v = torch.randn(p.shape, generator=g) * 0.1
                    p.copy_(v if gemma_norms else 1.0 + v)
                else:  # bias
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def logits_of(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].float().numpy().astype("<f4")


def rounded_copy(model, dtype):
    m = type(model)(model.config)
    m.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2:
                p.copy_(p.to(dtype).to(torch.float32))
    return m.eval()


def ggml_gelu_table():
    """ggml's GELU table: for every fp16 input h, fp16(gelu(h)) with gelu
    evaluated in float32 operation by operation as ggml's C code does, tanhf
    being the C library's (called through ctypes), so the reference rounds
    exactly where llama.cpp and reprise round."""
    tanhf = ctypes.CDLL(ctypes.util.find_library("m")).tanhf
    tanhf.restype, tanhf.argtypes = ctypes.c_float, [ctypes.c_float]
    f32 = np.float32
    h = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    out = np.zeros(65536, dtype=np.float32)
    for i, x in enumerate(h):
        if not np.isfinite(x):
            continue
        inner = (f32(0.7978845608028654) * x) * (f32(1.0) + (f32(0.044715) * x) * x)
        out[i] = (f32(0.5) * x) * (f32(1.0) + f32(tanhf(float(inner))))
    return torch.from_numpy(out.astype(np.float16).astype(np.float32))


class GgmlGelu(torch.nn.Module):
    """GELU(tanh) as ggml's CPU backend evaluates it on F32 (GGML_GELU_FP16):
    table[fp16(x)] for |x| < 10, 0 below -10, x from 10 up."""
    table = None

    def forward(self, x):
        if GgmlGelu.table is None:
            GgmlGelu.table = ggml_gelu_table()
        idx = x.to(torch.float16).view(torch.int16).to(torch.int64) & 0xFFFF
        g = GgmlGelu.table[idx]
        return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, g))


def write_logits(model, ids, ref, prefix, ggml_act, rounded=True):
    models = [model, rounded_copy(model, torch.float16), rounded_copy(model, torch.bfloat16)]
    for m, suffix in list(zip(models, ["", "-f16w", "-bf16w"]))[:3 if rounded else 1]:
        if ggml_act:
            for layer in m.model.layers:
                layer.mlp.act_fn = GgmlGelu()
        logits_of(m, ids).tofile(ref / f"{prefix}{suffix}.f32")


def write_refs(d, cls, tok, ids, ggml_act=False):
    ref = Path(d) / "ref"
    ref.mkdir(exist_ok=True)
    model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    (ref / "tokens.txt").write_text(" ".join(map(str, ids)) + "\n")
    write_logits(model, ids, ref, "logits", False, rounded=not ggml_act)
    if ggml_act:
        # the same model with the FFN activation evaluated as ggml (and so
        # llama.cpp and reprise) evaluate it: the reference a faithful GGUF
        # runner must match to F32 rounding
        write_logits(model, ids, ref, "logits-ggml-act", True)
    inputs = VOCAB_INP.read_text(encoding="utf-8").split(SEP)[:-1]
    (ref / "vocab.inp").write_text("".join(s + SEP for s in inputs), encoding="utf-8")
    lines = [" ".join(map(str, tok.encode(s, add_special_tokens=False))) for s in inputs]
    (ref / "vocab.out").write_text("".join(" " + l + "\n" if l else "\n" for l in lines), encoding="utf-8")


def build(name, cls, config, tok_fn, seed, save_dtype, shard=None, gemma_norms=False, add_bos=False,
          ggml_act=False):
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    tok = tok_fn(d)
    torch.manual_seed(seed)
    model = cls(config).eval()
    randomize(model, seed, gemma_norms)
    model = model.to(save_dtype)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(d, **kw)
    ids = tok.encode(PROMPT, add_special_tokens=False)[:23]
    if add_bos:
        ids = [tok.bos_token_id] + ids
    write_refs(d, cls, tok, ids, ggml_act)
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"{name}: {len(ids)} tokens, vocab {config.vocab_size}, {size} bytes")


def main():
    if not TEXT.is_file() or not VOCAB_INP.is_file():
        sys.exit(f"shared data not found under {SHARED} (set REPRISE_SHARED)")
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)

    # Llama: SPM-style tokenizer (Llama 2 layout), GQA so Q and K are permuted
    # with different head counts, Llama 3.1 rope scaling (rope_freqs), an FFN
    # width (88) that Q8_0 cannot block so --outtype q8_0 falls back to F16 there.
    def llama_tok(d):
        t = spm_tokenizer(512, ["<unk>", "<s>", "</s>"], "<unk>", prepend=True, bos="<s>")
        return save_tokenizer(t, d, {"add_bos_token": True, "add_eos_token": False},
                              bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    llama = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 64})
    build("llama", LlamaForCausalLM, llama, llama_tok, seed=1, save_dtype=torch.float32, add_bos=True)

    # Qwen2: byte-level BPE, Q/K/V biases, stored as BF16 in two shards.
    def qwen_tok(d):
        t = byte_level_tokenizer(320, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        return save_tokenizer(t, d, {"add_bos_token": False, "chat_template": CHATML},
                              eos_token="<|im_end|>", pad_token="<|endoftext|>")
    qwen2 = Qwen2Config(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                        bos_token_id=317, eos_token_id=319)
    build("qwen2", Qwen2ForCausalLM, qwen2, qwen_tok, seed=2, save_dtype=torch.bfloat16, shard="60KB")

    # Qwen3: per-head Q/K norms, head_dim (32) != hidden/heads (16), tied output.
    qwen3 = Qwen3Config(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                        bos_token_id=317, eos_token_id=319)
    build("qwen3", Qwen3ForCausalLM, qwen3, qwen_tok, seed=3, save_dtype=torch.float32)

    # Gemma 3 (text): five sliding-window layers then a global one, window 4
    # (the sequence is longer), norms stored as the offset from 1, tied output,
    # SPM-style tokenizer without a space prefix, stored as F16.
    def gemma_tok(d):
        t = spm_tokenizer(512, ["<pad>", "<eos>", "<bos>", "<unk>"], "<unk>", prepend=False, bos="<bos>")
        return save_tokenizer(t, d, {"add_bos_token": True, "add_eos_token": False},
                              bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>")
    gemma3 = Gemma3TextConfig(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                              query_pre_attn_scalar=32, sliding_window=4, max_position_embeddings=512,
                              rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1, bos_token_id=2,
                              layer_types=["sliding_attention"] * 5 + ["full_attention"],
                              rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    build("gemma3", Gemma3ForCausalLM, gemma3, gemma_tok, seed=4, save_dtype=torch.float16, gemma_norms=True,
          add_bos=True, ggml_act=True)

    # README.md: this script's paragraph (other fixture scripts add their own)
    readme = OUT / "README.md"
    mine = ("Made by `tests/reference/make_hf_fixtures.py` (random weights, fixed seeds) with "
            f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers "
            f"{tokenizers.__version__}, numpy {np.__version__}. Tokenizers trained on the first 200,000 "
            "characters of `../shared/text/war-and-peace.txt` (public domain). See the script for what "
            "each directory exercises and what `ref/` holds.")
    lines = readme.read_text(encoding="utf-8").split("\n") if readme.is_file() else \
        ["# Tiny Hugging Face checkpoints", "", mine, ""]
    lines = [mine if l.startswith("Made by `tests/reference/make_hf_fixtures.py`") else l for l in lines]
    readme.write_text("\n".join(lines), encoding="utf-8")

if __name__ == "__main__":
    main()
