"""Whether two GGUF files hold the same tensors byte for byte (names, types,
data); keys present in only one are listed (reprise quantize adds its
content hash). Exit 1 when a tensor differs. Needs the gguf package (the
reference venv); used by make_type_goldens.sh, not by make test.
  gguf_tensors_equal.py A.gguf B.gguf"""
import sys, gguf, numpy as np
a=gguf.GGUFReader(sys.argv[1]); b=gguf.GGUFReader(sys.argv[2])
ka={k:v for k,v in a.fields.items()}; kb={k:v for k,v in b.fields.items()}
for k in set(ka)|set(kb):
    if k not in ka or k not in kb: print("key only in one:",k, k in ka)
ta={t.name:t for t in a.tensors}; tb={t.name:t for t in b.tensors}
bad=0
for n,t in ta.items():
    u=tb.get(n)
    if u is None or t.tensor_type!=u.tensor_type or not np.array_equal(np.asarray(t.data).view(np.uint8),np.asarray(u.data).view(np.uint8)):
        bad+=1; print("tensor differs",n,t.tensor_type, u.tensor_type if u else None)
print("tensors", len(ta), "differ", bad)
sys.exit(1 if bad or len(ta) != len(tb) else 0)
