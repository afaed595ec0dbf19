#!/usr/bin/env python3
"""Train reprise's small demo models on War and Peace.

A reference script (PyPI torch, transformers, tokenizers): never part of the
product, of `make test` or of CI. It trains a byte-level BPE tokenizer, then a
model, with fixed seeds, holding out the last 5% of the text for validation;
prints the training and validation loss curve; writes a Hugging Face checkpoint
that `reprise convert` turns into GGUF.

    python3 train/train.py --arch llama  --out train/out/llama
    python3 train/train.py --arch zamba2 --out train/out/zamba2 --tokenizer train/out/llama
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch


def split_text(path):
    text = open(path, encoding="utf-8").read()
    cut = text.rfind("\n", 0, int(len(text) * 0.95)) + 1  # last 5% held out, cut at a line
    return text[:cut], text[cut:]


def train_tokenizer(train_text, vocab_size, out_dir):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([train_text[i:i + 65536] for i in range(0, len(train_text), 65536)], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token=None)
    os.makedirs(out_dir, exist_ok=True)
    fast.save_pretrained(out_dir)
    return fast


def load_tokenizer(path):
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast.from_pretrained(path)


def make_model(arch, vocab, eos, args):
    import transformers as tf
    common = dict(vocab_size=vocab, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=True)
    if arch == "llama":
        cfg = tf.LlamaConfig(hidden_size=args.hidden, intermediate_size=args.ff, num_hidden_layers=args.layers,
                             num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                             max_position_embeddings=args.ctx, rms_norm_eps=1e-5, rope_theta=10000.0, **common)
        return tf.LlamaForCausalLM(cfg)
    if arch == "qwen3":
        cfg = tf.Qwen3Config(hidden_size=args.hidden, intermediate_size=args.ff, num_hidden_layers=args.layers,
                             num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                             head_dim=args.hidden // args.heads, max_position_embeddings=args.ctx,
                             rms_norm_eps=1e-6, rope_theta=10000.0, **common)
        return tf.Qwen3ForCausalLM(cfg)
    if arch == "zamba2":
        # Mamba2 layers with a hybrid (shared-block) visit every third layer,
        # two shared blocks alternating, rank-r MLP adapters per visit.
        kinds = ["hybrid" if (i % 3) == 2 else "mamba" for i in range(args.layers)]
        cfg = tf.Zamba2Config(hidden_size=args.hidden, intermediate_size=args.ff, num_hidden_layers=args.layers,
                              layers_block_type=kinds, num_attention_heads=args.heads,
                              num_key_value_heads=args.heads, n_mamba_heads=args.mamba_heads,
                              mamba_d_state=args.d_state, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1,
                              num_mem_blocks=2, adapter_rank=args.rank, use_shared_attention_adapter=False,
                              use_mem_rope=True, max_position_embeddings=args.ctx, use_mamba_kernels=False,
                              chunk_size=args.chunk, **common)
        return tf.Zamba2ForCausalLM(cfg)
    raise SystemExit(f"unknown arch {arch}")


def batches(ids, seq, batch, gen):
    n = len(ids) - seq - 1
    while True:
        starts = torch.randint(0, n, (batch,), generator=gen)
        x = torch.stack([ids[s:s + seq] for s in starts.tolist()])
        y = torch.stack([ids[s + 1:s + seq + 1] for s in starts.tolist()])
        yield x, y


@torch.no_grad()
def evaluate(model, ids, seq, max_windows):
    model.eval()
    losses = []
    for k, s in enumerate(range(0, len(ids) - seq - 1, seq)):
        if k >= max_windows:
            break
        x = ids[s:s + seq].unsqueeze(0)
        y = ids[s + 1:s + seq + 1].unsqueeze(0)
        logits = model(input_ids=x).logits
        losses.append(torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)).item())
    model.train()
    return sum(losses) / len(losses)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, choices=["llama", "qwen3", "zamba2"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--text", default=os.path.join(os.environ.get("REPRISE_SHARED", "../shared"), "text/war-and-peace.txt"))
    ap.add_argument("--tokenizer", help="reuse the tokenizer saved in this directory")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--ff", type=int, default=512)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--mamba-heads", type=int, default=6)
    ap.add_argument("--d-state", type=int, default=32)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=64, help="Mamba2 scan chunk (zamba2)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-windows", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-minutes", type=float, default=55.0, help="stop early to stay within the budget")
    args = ap.parse_args()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    train_text, val_text = split_text(args.text)
    tok = load_tokenizer(args.tokenizer) if args.tokenizer else train_tokenizer(train_text, args.vocab, args.out)
    if args.tokenizer:
        tok.save_pretrained(args.out)
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    train_ids = torch.tensor(tok(train_text)["input_ids"], dtype=torch.long)
    val_ids = torch.tensor(tok(val_text)["input_ids"], dtype=torch.long)
    print(f"text: {len(train_text)} + {len(val_text)} chars -> {len(train_ids)} train / {len(val_ids)} val tokens, "
          f"vocab {len(tok)}", flush=True)

    model = make_model(args.arch, len(tok), eos, args)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.arch}: {n_params / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    gen = torch.Generator().manual_seed(args.seed)
    it = batches(train_ids, args.seq, args.batch, gen)
    curve = []
    t0 = time.time()
    run_loss = None
    for step in range(1, args.steps + 1):
        x, y = next(it)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        run_loss = loss.item() if run_loss is None else 0.98 * run_loss + 0.02 * loss.item()
        minutes = (time.time() - t0) / 60
        last = step == args.steps or minutes > args.max_minutes
        if step % args.eval_every == 0 or last:
            val = evaluate(model, val_ids, args.seq, args.eval_windows)
            curve.append({"step": step, "train_loss": run_loss, "val_loss": val, "minutes": minutes})
            print(f"step {step:5d}  train {run_loss:.4f}  val {val:.4f}  ({minutes:.1f} min)", flush=True)
        if last:
            break
    model.config.use_cache = True
    model.save_pretrained(args.out, safe_serialization=True)
    final = evaluate(model, val_ids, args.seq, 10 ** 9)
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump({"args": vars(args), "params": n_params, "curve": curve, "final_val_loss": final,
                   "train_tokens": len(train_ids), "val_tokens": len(val_ids)}, f, indent=1)
    print(f"final validation loss {final:.4f} (ppl {math.exp(final):.2f}) over the whole held-out text", flush=True)


if __name__ == "__main__":
    sys.exit(main())
