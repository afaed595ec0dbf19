"""Small goldens from full logit files (stdlib only; used by
make_real_goldens.sh to write them and by tests/cli/real_models.sh to check
reprise against them).
  write LOGITS.f32 N_VOCAB OUT_PREFIX   -> OUT.top64.bin (per position 64 x
        (int32 id, float32 logit), largest first) and OUT.last.f32 (the last
        row in full)
  check LOGITS.f32 N_VOCAB PREFIX MAX_NMSE MIN_TOP1 -> prints the measures,
        exit 1 when the last row's NMSE or any position's top-64 NMSE passes
        MAX_NMSE or top-1 agreement is under MIN_TOP1 (a fraction)"""
import array
import heapq
import struct
import sys


def rows(path, nv):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return [a[i * nv:(i + 1) * nv] for i in range(len(a) // nv)]


def write(path, nv, out):
    rs = rows(path, nv)
    with open(out + ".top64.bin", "wb") as f:
        for r in rs:
            for i in heapq.nlargest(64, range(nv), key=r.__getitem__):
                f.write(struct.pack("<if", i, r[i]))
    with open(out + ".last.f32", "wb") as f:
        rs[-1].tofile(f)


def nmse(a, b):
    e = sum((x - y) ** 2 for x, y in zip(a, b))
    s = sum(y * y for y in b)
    return e / s if s else e


def check(path, nv, prefix, max_nmse, min_top1):
    rs = rows(path, nv)
    top = open(prefix + ".top64.bin", "rb").read()
    npos = len(top) // (64 * 8)
    if npos != len(rs):
        print(f"positions: {len(rs)}, golden {npos}")
        return 1
    worst, maxd, agree = 0.0, 0.0, 0
    for p, r in enumerate(rs):
        ent = [struct.unpack_from("<if", top, (p * 64 + k) * 8) for k in range(64)]
        mine = [r[i] for i, _ in ent]
        ref = [v for _, v in ent]
        worst = max(worst, nmse(mine, ref))
        maxd = max(maxd, max(abs(x - y) for x, y in zip(mine, ref)))
        best = max(range(nv), key=r.__getitem__)
        agree += best == ent[0][0]
    last = array.array("f")
    last.frombytes(open(prefix + ".last.f32", "rb").read())
    nl = nmse(rs[-1], last)
    frac = agree / len(rs)
    print(f"positions {len(rs)}: top-64 worst nmse {worst:.3g}, max |d| {maxd:.4g}, "
          f"top-1 {agree}/{len(rs)}, last row nmse {nl:.3g}")
    return 0 if worst <= max_nmse and nl <= max_nmse and frac >= min_top1 else 1


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(check(sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]),
                       float(sys.argv[6])))
