#!/usr/bin/env python3
"""Train a rank-8 "junction" LoRA for a repeated block of the demo llama.

A reference script (PyPI torch, transformers, peft; CPU, a few minutes): never
part of the product, of `make test` or of CI. It loads models/demo-llama.gguf
through transformers' GGUF reader, repeats the block [I, J) with PEFT's
layer_replication (the plan `--repeat-layers I,J`: layers 0..J-1, then I..n-1),
puts a LoRA (r 8, alpha 16, q k v o gate up down) on the steps of the second
pass only (the junction after the seam), trains it on the War and Peace
training split (the first 95%, cut at a line, as train/train.py splits it;
random 256-token windows) and saves the PEFT adapter plus a config.json of the
base, which `reprise convert BASE --lora ADAPTER` turns into a GGUF adapter:

    python3 train/lora_junction.py --block 5,6 --out train/out/junction
    reprise convert train/out/junction/base --lora train/out/junction/adapter -o junction.gguf
    reprise perplexity -m models/demo-llama.gguf --lora junction.gguf -f models/war-and-peace-heldout.txt
"""
import argparse
import json
import math
import os
import random
import time
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoTokenizer, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[1]


def split_text(path):
    text = open(path, encoding="utf-8").read()
    cut = text.rfind("\n", 0, int(len(text) * 0.95)) + 1
    return text[:cut], text[cut:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--block", default="5,6")
    ap.add_argument("--out", default=str(ROOT / "train" / "out" / "junction"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    i, j = (int(x) for x in a.block.split(","))
    out = Path(a.out)
    tok = AutoTokenizer.from_pretrained(ROOT / "models", gguf_file="demo-llama.gguf")
    model = LlamaForCausalLM.from_pretrained(ROOT / "models", gguf_file="demo-llama.gguf", dtype=torch.float32)
    n = model.config.num_hidden_layers
    (out / "base").mkdir(parents=True, exist_ok=True)
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["architectures"] = ["LlamaForCausalLM"]
    (out / "base" / "config.json").write_text(json.dumps(cfg, indent=2))
    # the plan --repeat-layers i,j: [0, j) then [i, n); the second pass of the
    # block is replicated-model layers j .. j + (j - i) - 1
    junction = list(range(j, j + (j - i)))
    lc = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                    layer_replication=[[0, j], [i, n]], layers_to_transform=junction)
    model = get_peft_model(model, lc)
    model.print_trainable_parameters()
    train_text, _ = split_text(ROOT.parent / "shared" / "text" / "war-and-peace.txt"
                               if not os.environ.get("REPRISE_SHARED")
                               else Path(os.environ["REPRISE_SHARED"]) / "text" / "war-and-peace.txt")
    ids = torch.tensor(tok(train_text)["input_ids"], dtype=torch.long)
    print(f"training tokens: {len(ids)}; junction steps {junction} of {n + j - i}")
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=a.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / a.steps)))
    model.train()
    t0 = time.time()
    for step in range(a.steps):
        starts = [random.randrange(0, len(ids) - a.ctx - 1) for _ in range(a.batch)]
        x = torch.stack([ids[s:s + a.ctx] for s in starts])
        loss = model(input_ids=x, labels=x, use_cache=False).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 25 == 0 or step == a.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}  {time.time() - t0:.0f} s", flush=True)
        if time.time() - t0 > a.max_seconds:
            print(f"stopped at step {step} (--max-seconds)")
            break
    model.save_pretrained(out / "adapter")
    print(f"wrote {out / 'adapter'}")


if __name__ == "__main__":
    main()
