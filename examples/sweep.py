#!/usr/bin/env python3
"""Sweep two plan families over one model's weights, loaded once, and plot them.

  family 1  RYS repeats: source layers [i, i+w) run a second time, for every
            start i and each width w up to --max-width (reprise's scan, with
            its prefix reuse: every block ending at j starts from the saved
            residual stream after step j-1)
  family 2  skips: every plan that leaves one layer k out (a --layer-map
            "0..k-1,k+1..n-1"), each one perplexity run over the same weights

Both are measured as the change in perplexity from the identity plan on the
same text windows, and drawn against the layer where the plan departs from
the identity (i for a repeat, k for a skip). Needs matplotlib (not a
dependency of the package):

  python3 -m venv venv && venv/bin/pip install ./python matplotlib
  venv/bin/python examples/sweep.py -m MODEL.gguf -f TEXT -o docs/sweep.png

docs/sweep.png was made with (20 to 36 minutes on 2 threads, load 13-21;
docs/sweep.csv holds its rows, --from-csv draws them again)
  examples/sweep.py -m SmolLM2-135M-Instruct.Q4_1.gguf -f models/war-and-peace-heldout.txt \\
      -c 128 --chunks 4 --max-width 2 -t 2 -o docs/sweep.png --csv docs/sweep.csv
"""
import argparse
import collections
import os
import sys
import time

import reprise


Block = collections.namedtuple("Block", "i j extra delta")


def measure(m, a):
    """(repeat blocks, skips, identity PPL): the scan, then one perplexity run per skip."""
    with open(a.file, encoding="utf-8") as f:
        text = f.read()
    n = m.n_layer
    t0 = time.monotonic()
    scan = list(m.scan(text, n_ctx=a.ctx, n_chunks=a.chunks, max_extra=a.max_width))
    identity = scan[0].value
    print("%s: identity PPL %.4f; %d repeat blocks in %.1f s" % (m.name, identity, len(scan) - 1,
                                                                time.monotonic() - t0), file=sys.stderr)
    skips = []
    t0 = time.monotonic()
    for k in range(n):
        keep = [str(x) for x in range(n) if x != k]
        p = m.with_plan(layer_map=",".join(keep)).perplexity(text, n_ctx=a.ctx, n_chunks=a.chunks)
        skips.append((k, p.ppl - identity))
    print("%d skip plans in %.1f s" % (n, time.monotonic() - t0), file=sys.stderr)
    return [Block(r.i, r.j, r.extra, r.delta) for r in scan[1:]], skips, identity


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", required=True, help="the text")
    ap.add_argument("-c", "--ctx", type=int, default=128, help="tokens per chunk")
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--max-width", type=int, default=2, help="widest repeated block")
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("-o", "--out", default="sweep.png")
    ap.add_argument("--csv", help="also write the rows here")
    ap.add_argument("--from-csv", help="plot the rows of an earlier --csv instead of measuring")
    a = ap.parse_args()
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = reprise.Model(a.model, n_ctx=a.ctx, threads=a.threads)
    n = m.n_layer
    if a.from_csv:  # draw again what an earlier run measured
        rows, skips, identity = [], [], None
        with open(a.from_csv) as f:
            for line in f.read().splitlines()[1:]:
                fam, i, j, d = line.split(",")
                if fam == "identity":
                    identity = float(d)
                elif fam == "repeat":
                    rows.append(Block(int(i), int(j), int(j) - int(i), float(d)))
                else:
                    skips.append((int(i), float(d)))
    else:
        rows, skips, identity = measure(m, a)
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("family,i,j,delta\n")
            f.write("identity,0,0,%.6f\n" % identity)
            for r in rows:
                f.write("repeat,%d,%d,%.6f\n" % (r.i, r.j, r.delta))
            for k, d in skips:
                f.write("skip,%d,%d,%.6f\n" % (k, k + 1, d))

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    for w in range(1, a.max_width + 1):
        pts = [(r.i, r.delta) for r in rows if r.extra == w]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3.5,
                label="repeat [i, i+%d) (+%d step%s)" % (w, w, "s" if w > 1 else ""))
    ax.plot([k for k, _ in skips], [d for _, d in skips], marker="s", ms=3.5, color="0.35",
            ls="--", label="skip layer k (-1 step)")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_yscale("symlog", linthresh=1.0)
    lowest = min([r.delta for r in rows] + [d for _, d in skips])
    ax.set_ylim(bottom=min(-0.5, 2 * lowest))  # no empty negative decades when nothing improves
    ax.set_xlabel("layer where the plan departs from the identity (i, or k)")
    ax.set_ylabel("PPL change from the identity (symlog)")
    ax.set_title("%s, %d layers: two plan families over weights loaded once\n"
                 "identity PPL %.3f on %d chunks of %d tokens of %s" % (
                     os.path.basename(a.model), n, identity, a.chunks, a.ctx,
                     os.path.basename(a.file)), fontsize=10)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    fig.tight_layout()
    tmp = a.out + ".tmp.png"
    fig.savefig(tmp)
    os.replace(tmp, a.out)
    best = min(rows, key=lambda r: r.delta)
    print("wrote %s; best repeat [%d, %d) %+.4f; best skip %d %+.4f" % (
        a.out, best.i, best.j, best.delta, *min(skips, key=lambda s: s[1])), file=sys.stderr)


if __name__ == "__main__":
    main()
