"""reprise's greedy continuation decoded as a user's generation runs it (the
prompt as one batch, then one token at a time, F32 cache) against llama.cpp's
(tests/reference/make_real_goldens.sh: llama_logits.c with GREEDY=64, the same
one-token decodes). Prints how many ids agree; exit 1 if not all.

  REPRISE_LIB=build/libreprise.so python3 tests/cli/greedy_decode.py \\
      MODEL PROMPT.tokens.txt GREEDY.txt [REPEAT-SPEC]
"""
import ctypes as C
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import reprise  # noqa: E402
from reprise import _lib  # noqa: E402

model, prompt_file, greedy_file = sys.argv[1:4]
plan = sys.argv[4] if len(sys.argv) > 4 else None
prompt = [int(t) for t in open(prompt_file).read().split()]
want = [int(t) for t in open(greedy_file).read().split()]
m = reprise.Model(model, plan, n_ctx=512, kv_type="f32", threads=2)
lib, nv = _lib.lib, m.n_vocab
lib.rp_kv_clear(m._ctx)
m._decode(prompt, False)
logits = lib.rp_get_logits(m._ctx, len(prompt) - 1)
one = (C.c_int32 * 1)()
got = []
for _ in want:
    row = (C.c_float * nv).from_address(C.addressof(logits.contents))
    best = max(range(nv), key=row.__getitem__)
    got.append(best)
    one[0] = best
    b = _lib.Batch(n_tokens=1, token=one)
    if lib.rp_decode(m._ctx, C.byref(b)) != 0:
        sys.exit("rp_decode failed")
    logits = lib.rp_get_logits(m._ctx, 0)
same = 0
while same < len(want) and got[same] == want[same]:
    same += 1
print(f"{same}/{len(want)} ids as llama.cpp's greedy decode"
      + ("" if same == len(want) else f", then {got[same]} where it chose {want[same]}"))
sys.exit(0 if same == len(want) else 1)
