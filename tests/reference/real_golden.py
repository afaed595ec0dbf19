"""Small goldens from full logit files (stdlib only; used by
make_real_goldens.sh to write them and by tests/cli/real_models.sh to check
reprise against them).
  write LOGITS.f32 N_VOCAB OUT_PREFIX [K] -> OUT.topK.bin (per position K
        (default 64) x (int32 id, float32 logit), largest first) and OUT.last.f32 (the last row in full)
  check LOGITS.f32 N_VOCAB PREFIX MAX_NMSE MIN_TOP1 -> prints the measures,
        exit 1 when the last row's NMSE or any position's top-K NMSE passes
        MAX_NMSE or top-1 agreement is under MIN_TOP1 (a fraction); K comes
        from the golden's size. Also prints the first position whose top-K
        values are not bit for bit the golden's (and its NMSE), or "exact".
"""
import array
import glob
import heapq
import struct
import sys


def rows(path, nv):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return [a[i * nv:(i + 1) * nv] for i in range(len(a) // nv)]


def write(path, nv, out, k=64):
    rs = rows(path, nv)
    with open(f"{out}.top{k}.bin", "wb") as f:
        for r in rs:
            for i in heapq.nlargest(k, range(nv), key=r.__getitem__):
                f.write(struct.pack("<if", i, r[i]))
    with open(out + ".last.f32", "wb") as f:
        rs[-1].tofile(f)


def nmse(a, b):
    e = sum((x - y) ** 2 for x, y in zip(a, b))
    s = sum(y * y for y in b)
    return e / s if s else e


def check(path, nv, prefix, max_nmse, min_top1):
    rs = rows(path, nv)
    tops = sorted(glob.glob(glob.escape(prefix) + ".top[0-9]*.bin"))
    if not tops:
        print(f"no golden {prefix}.topK.bin")
        return 1
    top = open(tops[0], "rb").read()
    if not rs or len(top) % (len(rs) * 8):
        print(f"positions: {len(rs)}, golden of {len(top)} bytes")
        return 1
    kk = len(top) // (len(rs) * 8)
    worst, maxd, agree, first = 0.0, 0.0, 0, None
    for p, r in enumerate(rs):
        ent = [struct.unpack_from("<if", top, (p * kk + k) * 8) for k in range(kk)]
        mine = [r[i] for i, _ in ent]
        ref = [v for _, v in ent]
        e = nmse(mine, ref)
        worst = max(worst, e)
        if first is None and mine != ref:
            first = (p, e)
        maxd = max(maxd, max(abs(x - y) for x, y in zip(mine, ref)))
        best = max(range(nv), key=r.__getitem__)
        agree += best == ent[0][0]
    last = array.array("f")
    last.frombytes(open(prefix + ".last.f32", "rb").read())
    nl = nmse(rs[-1], last)
    frac = agree / len(rs)
    print(f"positions {len(rs)}: top-{kk} worst nmse {worst:.3g}, max |d| {maxd:.4g}, "
          f"top-1 {agree}/{len(rs)}, last row nmse {nl:.3g}, "
          + ("exact" if first is None and list(rs[-1]) == list(last) else
             f"first differing position {first[0]} (nmse {first[1]:.3g})" if first else
             "first difference in the last row"))
    return 0 if worst <= max_nmse and nl <= max_nmse and frac >= min_top1 else 1


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]), sys.argv[4],
              int(sys.argv[5]) if len(sys.argv) > 5 else 64)
    else:
        sys.exit(check(sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]),
                       float(sys.argv[6])))
