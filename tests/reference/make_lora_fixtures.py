#!/usr/bin/env python3
"""Builds the LoRA fixtures under tests/fixtures/lora/ and their reference
logits, with PyPI torch + transformers + peft, over the tiny llama checkpoint
tests/fixtures/hf/llama (2 layers, n_embd 64, made by make_hf_fixtures.py).

Not part of `make test` or CI: run it only to regenerate the fixtures
(`/work/pyref/bin/python tests/reference/make_lora_fixtures.py`), then commit
what it writes. Everything is seeded.

It writes tests/fixtures/lora/:
  a/    PEFT adapter: r 4, lora_alpha 8, on q k v o gate up down of both layers
  b/    PEFT adapter: r 2, lora_alpha 4, use_rslora (scaling alpha/sqrt(r)),
        on q_proj, v_proj, down_proj
  rep/  PEFT adapter with layer_replication [[0, 2], [1, 2]] (steps 0, 1, 1):
        r 4, lora_alpha 4, its own LoRA on each copy of layer 1
  a-llamacpp.gguf   a/ converted by llama.cpp's convert_lora_to_gguf.py
                    (--outtype f32), when LLAMA_CPP is set to its tree
  ref/*.f32         logits (float32, n_tokens x n_vocab) of the token ids of
                    tests/fixtures/hf/llama/ref/tokens.txt, one forward pass:
    a           base + a (PEFT)
    a-half      base + a at scale 0.5 (PEFT, every LoRA layer's scaling halved)
    ab          base + a + b, both active (PEFT)
    a-plan      base + a with the layers run as 0, 1, 0, 1 (--repeat-layers
                0,2): the same modules, LoRA included, visited twice
    steps       no global adapter; plan 0, 1, 0, 1 where step 2 carries a
                (scale 1) and residual scale 0.85, step 3 residual scale
                0.707: applied by hand (copies of the steps' layers with
                W + scaling * B @ A merged, o_proj and down_proj multiplied by
                the residual scale)
    rep         the layer_replication model (PEFT)

Random LoRA weights are not small: A ~ N(0, 1/fan_in), B ~ N(0, 1/r) / 2, so
every delta moves the logits well beyond the tolerances.
"""
import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import peft
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "tests" / "fixtures" / "hf" / "llama"
OUT = ROOT / "tests" / "fixtures" / "lora"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def base_model():
    return LlamaForCausalLM.from_pretrained(BASE, dtype=torch.float32, attn_implementation="eager").eval()


def logits_of(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].float().numpy().astype("<f4")


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        if "lora_A" in name:
            p.data = torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1])
        elif "lora_B" in name:
            p.data = torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]) / 2


def make_adapter(name, seed, **cfg):
    torch.manual_seed(seed)
    model = get_peft_model(base_model(), LoraConfig(init_lora_weights=False, **cfg))
    randomize(model, seed)
    model.save_pretrained(OUT / name)
    return model.eval()


def set_layers(model, order):
    inner = model.model if hasattr(model, "model") and hasattr(model.model, "layers") else model.model.model
    layers = list(inner.layers)
    inner.layers = torch.nn.ModuleList([layers[i] for i in order])
    model.config.num_hidden_layers = len(order)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    ref = OUT / "ref"
    ref.mkdir(exist_ok=True)
    ids = [int(x) for x in (BASE / "ref" / "tokens.txt").read_text().split()]

    a = make_adapter("a", 1, r=4, lora_alpha=8, target_modules=TARGETS)
    logits_of(a, ids).tofile(ref / "a.f32")
    make_adapter("b", 2, r=2, lora_alpha=4, use_rslora=True, target_modules=["q_proj", "v_proj", "down_proj"])

    # a at scale 0.5
    m = PeftModel.from_pretrained(base_model(), OUT / "a").eval()
    for mod in m.modules():
        if hasattr(mod, "scaling") and isinstance(mod.scaling, dict) and "default" in mod.scaling:
            mod.scaling["default"] *= 0.5
    logits_of(m, ids).tofile(ref / "a-half.f32")

    # a and b together
    m = PeftModel.from_pretrained(base_model(), OUT / "a").eval()
    m.load_adapter(OUT / "b", adapter_name="b")
    m.base_model.set_adapter(["default", "b"])
    assert set(m.base_model.active_adapters) == {"default", "b"}
    logits_of(m, ids).tofile(ref / "ab.f32")

    # a with the plan 0, 1, 0, 1 (modules shared, LoRA included)
    m = PeftModel.from_pretrained(base_model(), OUT / "a").eval()
    set_layers(m.base_model.model, [0, 1, 0, 1])
    logits_of(m, ids).tofile(ref / "a-plan.f32")

    # per-step deltas by hand: plan 0, 1, 0, 1; step 2 = layer 0 + a (scale 1)
    # with residual scale 0.85; step 3 = layer 1 with residual scale 0.707
    cfg_a = json.loads((OUT / "a" / "adapter_config.json").read_text())
    scaling = cfg_a["lora_alpha"] / cfg_a["r"]
    from safetensors.torch import load_file
    wa = load_file(OUT / "a" / "adapter_model.safetensors")
    m = base_model()
    layers = list(m.model.layers)
    s2 = copy.deepcopy(layers[0])
    s3 = copy.deepcopy(layers[1])
    with torch.no_grad():
        for sub, mods in (("self_attn", ["q_proj", "k_proj", "v_proj", "o_proj"]),
                          ("mlp", ["gate_proj", "up_proj", "down_proj"])):
            for t in mods:
                key = f"base_model.model.model.layers.0.{sub}.{t}"
                A = wa[key + ".lora_A.weight"].double()
                B = wa[key + ".lora_B.weight"].double()
                lin = getattr(getattr(s2, sub), t)
                lin.weight.data = (lin.weight.double() + scaling * (B @ A)).float()
        for lay, s in ((s2, 0.85), (s3, 0.707)):
            lay.self_attn.o_proj.weight.data *= s
            lay.mlp.down_proj.weight.data *= s
    m.model.layers = torch.nn.ModuleList([layers[0], layers[1], s2, s3])
    m.config.num_hidden_layers = 4
    logits_of(m, ids).tofile(ref / "steps.f32")

    # layer_replication: steps 0, 1, 1, a LoRA per copy
    rep = make_adapter("rep", 3, r=4, lora_alpha=4, target_modules=TARGETS, layer_replication=[[0, 2], [1, 2]])
    logits_of(rep, ids).tofile(ref / "rep.f32")
    # the copies share the base weights, not the adapters
    ls = rep.base_model.model.model.layers
    assert ls[1].self_attn.q_proj.base_layer.weight.data_ptr() == ls[2].self_attn.q_proj.base_layer.weight.data_ptr()
    assert not torch.equal(ls[1].self_attn.q_proj.lora_A["default"].weight, ls[2].self_attn.q_proj.lora_A["default"].weight)

    llama_cpp = os.environ.get("LLAMA_CPP")
    if llama_cpp:
        subprocess.run([sys.executable, str(Path(llama_cpp) / "convert_lora_to_gguf.py"), "--base", str(BASE),
                        "--outtype", "f32", "--outfile", str(OUT / "a-llamacpp.gguf"), str(OUT / "a")], check=True)

    (OUT / "README.md").write_text(
        "# LoRA fixtures\n\nMade by `tests/reference/make_lora_fixtures.py` over `tests/fixtures/hf/llama` with "
        f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, "
        f"numpy {np.__version__}; `a-llamacpp.gguf` by llama.cpp's `convert_lora_to_gguf.py` (commit 0c1e570, "
        "llama-cpp-python 0.3.36's vendored tree) from `a/`. See the script for what each file holds.\n")


if __name__ == "__main__":
    main()
