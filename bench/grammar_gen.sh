#!/usr/bin/env bash
# Grammar-constrained generation against unconstrained generation, end to end
# through `reprise run` on SmolLM2 (one thread): the same prompt and length
# (N tokens, --ignore-eos; the grammar never ends, so both runs generate
# exactly N), runs alternating A B A B so both see the same machine load.
# Reports per run the generation rate of the timing line (wall clock) and the
# process CPU time per generated token, then the median ratio
# constrained / unconstrained of each.
#
#   bench/grammar_gen.sh   (BUILD=build MODEL=... N=64 RUNS=5)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-$HOME/.cache/reprise/SmolLM2-135M-Instruct.Q4_1.gguf}
N=${N:-64}
RUNS=${RUNS:-5}
[ -f "$MODEL" ] || { echo "model not found: $MODEL"; exit 1; }
# a JSON array of strings that never closes: both runs stop at N tokens
G='root ::= "[" ws str ("," ws str)*
str ::= "\"" ([^"\\\x7F\x00-\x1F] | "\\" ["\\/bfnrt])* "\""
ws ::= [ \n]?'
python3 - "$BUILD/reprise" "$MODEL" "$N" "$RUNS" "$G" <<'PY'
import re, resource, statistics, subprocess, sys
bin_, model, n, runs, grammar = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
base = [bin_, "run", "-m", model, "-t", "1", "-n", str(n), "--ignore-eos", "--temp", "0.8", "-s", "7",
        "-p", "A JSON list of fruit names:\n"]
def one(extra):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(base + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = re.search(r"generation (\d+) tokens in ([\d.]+) ms \(([\d.]+) t/s\)", p.stderr)
    assert m and int(m.group(1)) == n, p.stderr[-300:]
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return float(m.group(3)), cpu, p.stdout
res = {"none": [], "grammar": []}
for i in range(runs):
    for k, extra in (("none", []), ("grammar", ["--grammar", grammar])):
        tps, cpu, out = one(extra)
        res[k].append((tps, cpu))
        print("run %d %-7s %7.2f t/s  %6.2f s CPU" % (i + 1, k, tps, cpu), flush=True)
        if k == "grammar":
            assert re.fullmatch(r'\[( ?\n?)"([^"\\\x00-\x1f\x7f]|\\["\\/bfnrt])*"(, ?\n?"([^"\\\x00-\x1f\x7f]|\\["\\/bfnrt])*")*("([^"\\\x00-\x1f\x7f]|\\["\\/bfnrt])*)?\n?', out) or out.startswith("["), out[:80]
rate = [g[0] / u[0] for u, g in zip(res["none"], res["grammar"])]
cpu = [g[1] / u[1] for u, g in zip(res["none"], res["grammar"])]
print("tokens/s grammar / none: median %.3f (min %.3f, max %.3f)" % (statistics.median(rate), min(rate), max(rate)))
print("CPU time grammar / none: median %.3f (min %.3f, max %.3f)" % (statistics.median(cpu), min(cpu), max(cpu)))
PY
