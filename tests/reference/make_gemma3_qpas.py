"""Reference logits of the gemma3 fixture with query_pre_attn_scalar = 16
(not head_dim 32, which llama.cpp's rule would take): transformers, F32,
eager attention, ggml's GELU evaluation (make_hf_fixtures.GgmlGelu), the same
tokens as ref/tokens.txt. Writes ref/logits-qpas16.f32; test_convert's
gemma3_query_pre_attn_scalar checks the converted file against it. Run with
the reference venv (never from make test):
    /work/pyref/bin/python tests/reference/make_gemma3_qpas.py"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from transformers import Gemma3ForCausalLM

sys.path.insert(0, str(Path(__file__).parent))
from make_hf_fixtures import GgmlGelu, logits_of  # noqa: E402

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "gemma3"

with tempfile.TemporaryDirectory() as tmp:
    d = Path(tmp) / "gemma3"
    shutil.copytree(FIX, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["query_pre_attn_scalar"] = 16
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    model = Gemma3ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    for layer in model.model.layers:
        layer.mlp.act_fn = GgmlGelu()
    ids = [int(t) for t in (FIX / "ref" / "tokens.txt").read_text().split()]
    logits_of(model, ids).tofile(FIX / "ref" / "logits-qpas16.f32")
    print("wrote", FIX / "ref" / "logits-qpas16.f32", len(ids), "positions")
