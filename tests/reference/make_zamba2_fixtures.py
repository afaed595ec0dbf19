#!/usr/bin/env python3
"""Builds the tiny Zamba2 checkpoints under tests/fixtures/hf/zamba2-*/ and
their reference logits, with PyPI torch + transformers + tokenizers.

Not part of `make test`: run it only to regenerate the fixtures
(`python3 tests/reference/make_zamba2_fixtures.py`), then commit what it
writes. Seeded, so a rerun with the same library versions gives the same
tensors. It reuses the tokenizer builders of make_hf_fixtures.py (same
layout of each directory; see that script for ref/tokens.txt, ref/logits.f32,
ref/vocab.inp/.out).

  zamba2-mem1  num_mem_blocks=1: six layers, hybrid at 1, 4, 5 (two hybrid
               layers in a row), MLP adapters of rank 4 and attention (q/k/v)
               adapters of rank 4 (use_shared_attention_adapter), RoPE over
               the full head (use_mem_rope), one Mamba2 group, no biases,
               tied output, stored as F32.
  zamba2-mem2  num_mem_blocks=2: eight layers, hybrid at 1, 3, 4, 6 (visits
               0..3 alternate between blocks 0 and 1), MLP adapters of rank 6,
               no attention adapters, no RoPE, GQA (4 heads over 2 KV heads),
               two Mamba2 groups of four heads each, add_bias_linear (in/out
               projection and MLP biases), separate output matrix, stored as
               BF16 (the reference is that checkpoint loaded in float32).

The weights are random but not small (embeddings N(0,1) -- N(0, 1/16) in
zamba2-mem1, whose output matrix is the embedding, so that its logits stay
O(1) and float32 rounding in the reference stays well under the tolerance --, matrices
N(0, 1/fan_in) -- the adapter pairs too, so B.A moves gate_up as much as W
does --, norms 1 + N(0, 0.1), biases N(0, 0.1), conv taps N(0, 1/d_conv),
A_log = log U(1, 16), D = 1 + N(0, 0.3), dt_bias as transformers initialises
it: softplus^-1 of a log-uniform step in [time_step_min, time_step_max]).
The logits are O(1): a wrong scale, layout or adapter shows up far above the
1e-4 tolerance.

Tied blocks: transformers saves every hybrid layer's copy of its shared block
and, on load, ties each copy to the block's first hybrid layer (that copy's
values win). The script writes identical copies, as a real checkpoint has.
"""
import shutil
import sys
from pathlib import Path

import torch
from transformers import Zamba2Config, Zamba2ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_hf_fixtures as hf  # noqa: E402  (tokenizers, reference writer)

OUT = hf.OUT


def randomize(model, seed, embed_std):
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "A_log":
                p.copy_(torch.log(1.0 + 15.0 * torch.rand(p.shape, generator=g)))
            elif leaf == "D":
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif leaf == "dt_bias":
                lo, hi = torch.log(torch.tensor(cfg.time_step_min)), torch.log(torch.tensor(cfg.time_step_max))
                dt = torch.exp(lo + (hi - lo) * torch.rand(p.shape, generator=g)).clamp(min=cfg.time_step_floor)
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif "conv1d.weight" in name:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            elif p.dim() == 1 and (name.endswith("norm.weight") or "layernorm" in name):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(embed_std * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
        # each hybrid layer's shared block = its block's first hybrid layer's
        hyb = cfg.hybrid_layer_ids
        first = {}
        params = dict(model.named_parameters())
        for v, layer in enumerate(hyb):
            b = v % cfg.num_mem_blocks
            first.setdefault(b, layer)
            if first[b] == layer:
                continue
            src = f"model.layers.{first[b]}.shared_transformer."
            dst = f"model.layers.{layer}.shared_transformer."
            for n, p in params.items():
                if n.startswith(dst):
                    p.copy_(params[src + n[len(dst):]])


def zamba2_tok(d):
    t = hf.spm_tokenizer(400, ["<unk>", "<s>", "</s>"], "<unk>", prepend=True, bos="<s>")
    return hf.save_tokenizer(t, d, {"add_bos_token": True, "add_eos_token": False},
                             bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def build(name, config, seed, save_dtype, embed_std=1.0):
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    tok = zamba2_tok(d)
    torch.manual_seed(seed)
    config._attn_implementation = "eager"  # as write_refs loads it
    model = Zamba2ForCausalLM(config).eval()
    randomize(model, seed, embed_std)
    model = model.to(save_dtype)
    model.save_pretrained(d)
    model = model.to(torch.float32)
    ids = [tok.bos_token_id] + tok.encode(hf.PROMPT, add_special_tokens=False)[:31]
    hf.write_refs(d, Zamba2ForCausalLM, tok, ids)
    # the saved-and-reloaded model is the model that was randomized
    ref = torch.from_numpy(hf.np.fromfile(d / "ref" / "logits.f32", dtype="<f4")).view(len(ids), -1)
    mem = torch.from_numpy(hf.logits_of(model, ids))
    assert (ref - mem).abs().max().item() < 1e-5, f"{name}: reloaded checkpoint differs"
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"{name}: {len(ids)} tokens, |logits| max {ref.abs().max().item():.2f}, {size} bytes")


def common(**kw):
    base = dict(vocab_size=400, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, max_position_embeddings=512,
                rms_norm_eps=1e-5, hidden_act="gelu", bos_token_id=1, eos_token_id=2, pad_token_id=0,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    base.update(kw)
    return Zamba2Config(**base)


def main():
    if not hf.TEXT.is_file():
        sys.exit(f"shared data not found under {hf.SHARED} (set REPRISE_SHARED)")
    torch.set_num_threads(1)
    M, H = "linear_attention", "hybrid"
    mem1 = common(num_hidden_layers=6, layers_block_type=[M, H, M, M, H, H], num_key_value_heads=4,
                  n_mamba_heads=4, mamba_ngroups=1, num_mem_blocks=1, adapter_rank=4,
                  use_shared_attention_adapter=True, use_mem_rope=True, add_bias_linear=False,
                  tie_word_embeddings=True)
    build("zamba2-mem1", mem1, seed=21, save_dtype=torch.float32, embed_std=0.25)
    mem2 = common(num_hidden_layers=8, layers_block_type=[M, H, M, H, H, M, H, M], num_key_value_heads=2,
                  n_mamba_heads=8, mamba_ngroups=2, num_mem_blocks=2, adapter_rank=6,
                  use_shared_attention_adapter=False, use_mem_rope=False, add_bias_linear=True,
                  tie_word_embeddings=False)
    build("zamba2-mem2", mem2, seed=22, save_dtype=torch.bfloat16)


if __name__ == "__main__":
    main()
