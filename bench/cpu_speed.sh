#!/usr/bin/env bash
# CPU speed against llama.cpp, every row of issue 24 in one script (the
# successor of quant_speed.sh): ratios reprise / llama-bench measured in the
# same run, engine by engine alternating (A B A B ...: ROUNDS rounds of one
# repetition each), the spread of the per-round ratios, and the memory read
# bandwidth probed before and after every round (the roofline moves on these
# machines without notice; ../shared/PERF.md).
#
#   bench/cpu_speed.sh                        # everything (hours on a quiet machine)
#   SECTIONS="types" TYPES="Q8_0 Q4_K_M" THREADS=2 ROUNDS=2 P=64 N=16 bench/cpu_speed.sh
#
# Sections (SECTIONS, default all):
#   types  every weight type on the Qwen3-0.6B shape (28 layers, n_embd 1024,
#          16/8 heads of 128, n_ff 3072, the Qwen3 vocabulary, tied output),
#          synthesized once and quantized from the F16 file (QUANTIZER=reprise
#          or llama: llama-quantize), pp P and tg N at each of THREADS
#   real   the two real models (REAL), the same tests
#   depth  tg N after a prefill of each of DEPTHS tokens, and pp at PP_LONG,
#          on DEPTH_MODELS; llama.cpp with -fa on and -fa off, the ratio
#          against its better one
#   kv     on the real models, per cache type of KV (K and V both): KV MiB at
#          8192 positions, tg N at depth KV_DEPTH against llama.cpp (-fa on:
#          it needs flash attention for a quantized V), KL divergence and
#          same-top-token rate against the F16 cache (reprise perplexity
#          --kl-divergence on KLD_TEXT)
#   load   tg N at -t 1 and -t 2 with two busy processes on the cores, both
#          engines, on LOAD_MODELS: each engine's -t 2 / -t 1
#   avx2   REPRISE_ISA=avx2 against llama.cpp built without AVX-512
#          (LLAMA_AVX2_BIN, default /work/peer/build-avx2/bin), pp P and tg N
#          on the Qwen3-0.6B shape in AVX2_TYPES (Q8_0 Q4_K_M Q4_0) at
#          AVX2_THREADS (1), or on the files AVX2_FILES
#
# Environment: BUILD (reprise tree, default build), LLAMA_BIN (llama.cpp's
# bin/, default /work/peer/build-native/bin), BENCH_DIR (models and raw
# results, default /tmp/reprise-bench; ~10 GB for the 16 Qwen3 files), ROUNDS
# (default 2), THREADS (default "1 2"), P (512), N (128), TYPES, REAL,
# DEPTHS ("4096 16384"), PP_LONG ("2048 8192"), DEPTH_MODELS (the real
# models), KV ("q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl"), KV_DEPTH (4096), KLD_TEXT,
# KLD_CHUNKS (20), LOAD_MODELS (SmolLM2), QUANTIZER (reprise).
#
# Targets (issue 24): tg >= 1.10x and pp >= 1.25x for every type and real
# model at 1 and 2 threads; tg at depth >= 1.10x llama.cpp's better -fa
# setting and long pp >= 1.25x; under load -t 2 >= 1.0x of -t 1.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN="$BUILD/reprise"
LB=${LLAMA_BIN:-/work/peer/build-native/bin}
S=${REPRISE_SHARED:-../shared}
OUT=${BENCH_DIR:-/tmp/reprise-bench}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-"1 2"}
P=${P:-512}
N=${N:-128}
TYPES=${TYPES:-"F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M Q4_K_S Q4_K_M Q5_K_M Q6_K IQ4_NL IQ4_XS"}
REAL=${REAL:-"$HOME/.cache/reprise/SmolLM2-135M-Instruct.Q4_1.gguf $HOME/.cache/reprise/gemma-3-270m-q4_k_m.gguf"}
DEPTHS=${DEPTHS:-"4096 16384"}
PP_LONG=${PP_LONG:-"2048 8192"}
DEPTH_MODELS=${DEPTH_MODELS:-$REAL}
KV=${KV:-"q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl"}
KV_DEPTH=${KV_DEPTH:-4096}
KLD_TEXT=${KLD_TEXT:-$S/text/war-and-peace.txt}
KLD_CHUNKS=${KLD_CHUNKS:-20}
LOAD_MODELS=${LOAD_MODELS:-$HOME/.cache/reprise/SmolLM2-135M-Instruct.Q4_1.gguf}
QUANTIZER=${QUANTIZER:-reprise}
AVX2_TYPES=${AVX2_TYPES:-"Q8_0 Q4_K_M Q4_0"}
AVX2_THREADS=${AVX2_THREADS:-"1"}
LB_AVX2=${LLAMA_AVX2_BIN:-/work/peer/build-avx2/bin}
SECTIONS=${SECTIONS:-"types real depth kv load avx2"}
[ -x "$BIN" ] || { echo "no $BIN (make BUILD=$BUILD)"; exit 1; }
[ -x "$LB/llama-bench" ] || { echo "no $LB/llama-bench (LLAMA_BIN=...)"; exit 1; }
command -v python3 > /dev/null || { echo "python3 is needed for the summary"; exit 1; }
mkdir -p "$OUT"
RAW="$OUT/raw.$$.tsv" # case, engine, round, test, t/s, bw before, bw after
: > "$RAW"
busy=()
cleanup() { for p in "${busy[@]}"; do kill "$p" 2> /dev/null || true; done; }
trap cleanup EXIT
has() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }

bw() { "$BIN" bench --bandwidth --bandwidth-mib 1024 -t "$1" | awk '{print $2}'; }

# csv_ts ENGINE FILE: "test<TAB>t/s" per row of either engine's CSV
csv_ts() {
    python3 - "$1" "$2" << 'EOF'
import csv, sys
eng, path = sys.argv[1], sys.argv[2]
for r in csv.DictReader(open(path)):
    if eng == "llama":
        np, ng, d = int(r["n_prompt"]), int(r["n_gen"]), int(r.get("n_depth", 0) or 0)
        t = f"pp{np}+tg{ng}" if np and ng else (f"pp{np}" if np else f"tg{ng}")
        if d: t += f" @ d{d}"
        fa = r.get("flash_attn", "")
        t += {"1": " fa", "true": " fa", "on": " fa"}.get(str(fa).lower(), "")
    else:
        t = r["test"]
    print(f"{t}\t{float(r['avg_ts']):.4f}")
EOF
}

# pair CASE THREADS REPRISE_ARGS LLAMA_ARGS: ROUNDS alternations of one
# repetition of each engine, the bandwidth probed before and after each round
# (REPRISE_ENV: variables for reprise, e.g. REPRISE_ISA=avx2; PEER: the
# llama.cpp bin/ for this pair, default LB)
pair() {
    local name=$1 t=$2 ra=$3 la=$4
    for r in $(seq 1 "$ROUNDS"); do
        local b0 b1
        b0=$(bw "$t")
        # shellcheck disable=SC2086
        env ${REPRISE_ENV:-} "$BIN" bench $ra -t "$t" -r 1 --no-probe -q -o csv > "$OUT/r.csv" 2> "$OUT/r.err" ||
            { echo "reprise failed ($name): $(tail -1 "$OUT/r.err")"; continue; }
        # shellcheck disable=SC2086
        "${PEER:-$LB}/llama-bench" $la -t "$t" -r 1 -o csv > "$OUT/l.csv" 2> "$OUT/l.err" ||
            { echo "llama-bench failed ($name): $(tail -1 "$OUT/l.err")"; continue; }
        b1=$(bw "$t")
        csv_ts reprise "$OUT/r.csv" | awk -v c="$name" -v r="$r" -v b0="$b0" -v b1="$b1" -F'\t' \
            '{print c "\treprise\t" r "\t" $1 "\t" $2 "\t" b0 "\t" b1}' >> "$RAW"
        csv_ts llama "$OUT/l.csv" | awk -v c="$name" -v r="$r" -v b0="$b0" -v b1="$b1" -F'\t' \
            '{print c "\tllama\t" r "\t" $1 "\t" $2 "\t" b0 "\t" b1}' >> "$RAW"
    done
}

echo "== machine"
grep -m1 'model name' /proc/cpuinfo || true
echo "cores: $(nproc)   load average: $(cut -d' ' -f1-3 /proc/loadavg)   rounds: $ROUNDS"
echo "reprise: $BIN ($(git rev-parse --short HEAD 2> /dev/null || echo '?'))   llama.cpp: $LB"

# ---- the Qwen3-0.6B shape in every type -----------------------------------
qwen() { echo "$OUT/qwen3-0.6b-$1.gguf"; }
# make_qwen TYPE..: the Qwen3-0.6B-shaped files (synthesized once)
make_qwen() {
    local shape="--arch qwen3 --n-embd 1024 --n-layer 28 --n-head 16 --n-head-kv 8 --head-dim 128 --n-ff 3072
           --tied --vocab $S/vocab/qwen3/ggml-vocab-qwen3.gguf"
    # shellcheck disable=SC2086
    [ -s "$(qwen F16)" ] || "$BIN" synth $shape --type f16 -o "$(qwen F16)"
    for ty in "$@"; do
        f=$(qwen "$ty")
        [ -s "$f" ] && continue
        if [ "$QUANTIZER" = llama ]; then
            "$LB/llama-quantize" "$(qwen F16)" "$f" "$ty" > "$OUT/q.log" 2>&1
        else
            "$BIN" quantize -t 2 "$(qwen F16)" "$f" "$ty" > "$OUT/q.log" 2>&1
        fi || { echo "quantize $ty failed: $(tail -1 "$OUT/q.log")"; rm -f "$f"; }
    done
}
if has types; then
    # shellcheck disable=SC2086
    make_qwen $TYPES
    echo "== types: Qwen3-0.6B shape, pp$P and tg$N, threads $THREADS"
    for ty in $TYPES; do
        f=$(qwen "$ty")
        [ -s "$f" ] || continue
        for t in $THREADS; do pair "qwen3-0.6b $ty t$t" "$t" "-m $f -p $P -n $N" "-m $f -p $P -n $N"; done
    done
fi

# ---- the real models --------------------------------------------------------
if has real; then
    echo "== real models, pp$P and tg$N, threads $THREADS"
    for f in $REAL; do
        [ -s "$f" ] || { echo "missing $f"; continue; }
        for t in $THREADS; do pair "$(basename "$f" .gguf) t$t" "$t" "-m $f -p $P -n $N" "-m $f -p $P -n $N"; done
    done
fi

# ---- long context -------------------------------------------------------------
if has depth; then
    dl=$(echo "$DEPTHS" | tr ' ' ',')
    pl=$(echo "$PP_LONG" | tr ' ' ',')
    echo "== long context: tg$N @ d{$dl}, pp{$pl}; llama.cpp -fa on and off"
    for f in $DEPTH_MODELS; do
        [ -s "$f" ] || { echo "missing $f"; continue; }
        for t in $THREADS; do
            pair "$(basename "$f" .gguf) t$t depth" "$t" "-m $f -p 0 -n $N -d $dl" "-m $f -p 0 -n $N -d $dl -fa on,off"
            pair "$(basename "$f" .gguf) t$t long-pp" "$t" "-m $f -p $pl -n 0 -b 512" "-m $f -p $pl -n 0 -fa on,off"
        done
    done
fi

# ---- quantized KV cache --------------------------------------------------------
if has kv; then
    echo "== KV cache types on the real models: MiB at 8192 positions, tg$N @ d$KV_DEPTH, KLD vs f16"
    t=$(echo "$THREADS" | awk '{print $NF}')
    for f in $REAL; do
        [ -s "$f" ] || continue
        m=$(basename "$f" .gguf)
        "$BIN" perplexity -m "$f" -f "$KLD_TEXT" -c 512 --chunks "$KLD_CHUNKS" -t "$t" -q \
            --kl-divergence-base "$OUT/$m.f16.kld" > /dev/null 2>&1 || echo "kld base failed ($m)"
        for ty in f16 $KV; do
            mib=$("$BIN" run -m "$f" -c 8192 -ctk "$ty" -ctv "$ty" --dump-plan 2>&1 |
                sed -n 's/.*state: .*, \([0-9.]*\) MiB for.*/\1/p')
            kld="-"
            if [ "$ty" != f16 ]; then
                kld=$("$BIN" perplexity -m "$f" -f "$KLD_TEXT" -t "$t" -ctk "$ty" -ctv "$ty" -q \
                    --kl-divergence-base "$OUT/$m.f16.kld" --kl-divergence 2>&1 |
                    awk '/Mean +KLD/ {k=$3} /Same top p/ {s=$4} END {printf "KLD %s, same top %s", k, s}')
            fi
            echo "kv $m $ty: $mib MiB at 8192 positions; $kld"
            pair "$m t$t kv $ty" "$t" "-m $f -p 0 -n $N -d $KV_DEPTH -ctk $ty -ctv $ty" \
                "-m $f -p 0 -n $N -d $KV_DEPTH -ctk $ty -ctv $ty -fa on"
        done
    done
fi

# ---- under a competing load ----------------------------------------------------
if has load; then
    echo "== under load: two busy processes; tg$N at -t 1 and -t 2"
    for _ in 1 2; do
        (while :; do :; done) &
        busy+=($!)
    done
    for f in $LOAD_MODELS; do
        [ -s "$f" ] || continue
        for t in 1 2; do pair "$(basename "$f" .gguf) load t$t" "$t" "-m $f -p 0 -n $N" "-m $f -p 0 -n $N"; done
    done
    cleanup
    busy=()
fi

# ---- AVX2-only machines ----------------------------------------------------------
# reprise with REPRISE_ISA=avx2 against llama.cpp built without AVX-512
# (LLAMA_AVX2_BIN; bench/README.md has its cmake line)
if has avx2; then
    if [ -x "$LB_AVX2/llama-bench" ]; then
        echo "== AVX2: REPRISE_ISA=avx2 vs $LB_AVX2, pp$P and tg$N, threads $AVX2_THREADS"
        files=${AVX2_FILES:-}
        if [ -z "$files" ]; then
            # shellcheck disable=SC2086
            make_qwen $AVX2_TYPES
            for ty in $AVX2_TYPES; do files="$files $(qwen "$ty")"; done
        fi
        for f in $files; do
            [ -s "$f" ] || continue
            for t in $AVX2_THREADS; do
                REPRISE_ENV=REPRISE_ISA=avx2 PEER=$LB_AVX2 \
                    pair "$(basename "$f" .gguf) t$t avx2" "$t" "-m $f -p $P -n $N" "-m $f -p $P -n $N"
            done
        done
    else
        echo "no $LB_AVX2/llama-bench: the avx2 section is skipped (LLAMA_AVX2_BIN=...)"
    fi
fi

echo "== summary (load average now $(cut -d' ' -f1-3 /proc/loadavg); raw rows: $RAW)"
python3 - "$RAW" << 'EOF'
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(lambda: collections.defaultdict(dict))  # (case, test) -> engine -> round -> ts
bwv = collections.defaultdict(list)
for case, eng, rnd, test, ts, b0, b1 in rows:
    by[case, test][eng][int(rnd)] = float(ts)
    bwv[case] += [float(b0), float(b1)]
def med(v): return statistics.median(v) if v else float("nan")
print(f"{'case':44} {'test':22} {'reprise t/s':>12} {'llama t/s':>10} {'ratio':>6} {'spread':>13} {'GB/s':>11}  target")
tests = collections.OrderedDict()
for (case, test) in by:
    tests.setdefault(case, []).append(test)
for case, tl in tests.items():
    for test in tl:
        if test.endswith(" fa"):
            continue
        e = by[case, test]
        rp = e.get("reprise", {})
        # llama.cpp: the same test, with -fa on where it ran both: the better one
        lt = {r: max(by[case, test].get("llama", {}).get(r, 0), by.get((case, test + " fa"), {}).get("llama", {}).get(r, 0))
              for r in set(e.get("llama", {})) | set(by.get((case, test + " fa"), {}).get("llama", {}))}
        if "tg" in test and "pp" not in test and not rp and not lt:
            continue
        ratios = [rp[r] / lt[r] for r in rp if r in lt and lt[r] > 0]
        goal = 1.10 if test.startswith("tg") else 1.25
        if " load " in f" {case} ":
            goal = None
        elif case.endswith(" avx2"):
            goal = 1.0  # issue 24: >= 1.0x on AVX2-only machines
        b = bwv[case]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
        r = med(ratios)
        mark = "" if goal is None else ("ok" if r >= goal else f"BELOW {goal:.2f}")
        # with both -fa settings: the ratio against each (off / on) as well
        fa = by.get((case, test + " fa"), {}).get("llama", {})
        each = ""
        if fa:
            off = e.get("llama", {})
            ro = [rp[k] / off[k] for k in rp if off.get(k)]
            rn = [rp[k] / fa[k] for k in rp if fa.get(k)]
            each = f"  vs fa off {med(ro):.2f} ({med(list(off.values())):.2f} t/s), fa on {med(rn):.2f} ({med(list(fa.values())):.2f} t/s)"
        print(f"{case:44} {test:22} {med(list(rp.values())):12.2f} {med(list(lt.values())):10.2f} {r:6.2f} {spread:>13} {min(b):5.1f}-{max(b):<5.1f} {mark}{each}")
# under load: each engine's -t 2 / -t 1
for eng in ("reprise", "llama"):
    for (case, test), e in by.items():
        if " load t1" in case:
            c2 = case.replace(" load t1", " load t2")
            a, b = e.get(eng, {}), by.get((c2, test), {}).get(eng, {})
            if a and b:
                print(f"under load, {eng:8} {case.replace(' load t1', ''):32} {test}: -t 2 / -t 1 = {med(list(b.values())) / med(list(a.values())):.2f}"
                      f" ({med(list(b.values())):.2f} vs {med(list(a.values())):.2f} t/s)")
EOF
