#!/usr/bin/env bash
# Time of a full block scan with and without prefix reuse, in one run.
#
# A 12-layer synthetic llama shaped like the demo model (vocabulary 4096) is
# scanned over all 78 blocks twice: with prefix reuse (layers 0..j-1 computed
# once per end layer j) and with --no-reuse (every plan from its first layer).
# Prints CPU seconds of both, their ratio, and checks that the two CSVs hold the
# same numbers. Expected ratio: close to the layer-step ratio 1300 / 662 = 1.96,
# a little less because the output matrix and the identity's pass are not
# shared.
#
#   bench/scan.sh            (BIN=build/reprise, THREADS=1, C=128, CHUNKS=8, MODEL=synthesized)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/reprise}
SHARED=${REPRISE_SHARED:-../shared}
THREADS=${THREADS:-1}
C=${C:-128}
CHUNKS=${CHUNKS:-8}
W=$(mktemp -d /tmp/reprise-scanbench.XXXXXX)
trap 'rm -rf "$W"' EXIT

MODEL=${MODEL:-}
if [ -z "$MODEL" ]; then
    echo "synthesizing a 12-layer llama (n_embd 256, n_ff 688, vocabulary 4096) ..." >&2
    "$BIN" synth --arch llama --n-layer 12 --n-vocab 4096 -o "$W/m.gguf" 2>/dev/null
    MODEL="$W/m.gguf"
fi
TEXT="$SHARED/text/war-and-peace.txt"

run() { # OUT [--no-reuse]
    /usr/bin/time -f "%U %S %e" "$BIN" scan -m "$MODEL" -f "$TEXT" -c "$C" --chunks "$CHUNKS" -t "$THREADS" \
        -o "$W/$1.csv" -q "${@:2}" > /dev/null 2> "$W/$1.time"
    tail -1 "$W/$1.time"
}
read -r ru rs rw <<< "$(run reuse)"
read -r wu ws ww <<< "$(run whole --no-reuse)"
blocks=$(grep -c '^[0-9]' "$W/reuse.csv")
same=no
cmp -s <(cut -d, -f1-6 "$W/reuse.csv") <(cut -d, -f1-6 "$W/whole.csv") && same=yes
python3 - "$ru" "$rs" "$rw" "$wu" "$ws" "$ww" "$blocks" "$same" <<'PY'
import sys
ru, rs, rw, wu, ws, ww = map(float, sys.argv[1:7])
blocks, same = sys.argv[7], sys.argv[8]
print(f"{'':14} {'CPU s':>8} {'wall s':>8}")
print(f"{'prefix reuse':14} {ru + rs:8.2f} {rw:8.2f}")
print(f"{'--no-reuse':14} {wu + ws:8.2f} {ww:8.2f}")
print(f"{blocks} blocks; whole plans / reuse = {(wu + ws) / (ru + rs):.2f}x CPU, {ww / rw:.2f}x wall; same numbers: {same}")
PY
[ "$same" = yes ]
