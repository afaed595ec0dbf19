#!/usr/bin/env bash
# Load test of `reprise serve`: CLIENTS concurrent keep-alive clients each send
# PER_CLIENT requests (a mix of /v1/completions, streamed /v1/completions,
# /completion and /v1/chat/completions, greedy, N_TOKENS each); every answer
# must equal the one-at-a-time reference. Prints requests, failures, p50/p99
# latency, throughput, and the server's RSS before/after and peak (VmHWM).
#
#   bench/serve_load.sh                      # stories260K, 4 slots, 32 x 50
#   MODEL=m.gguf PARALLEL=8 CLIENTS=64 PER_CLIENT=20 N_TOKENS=64 \
#   SERVE_ARGS="--repeat-layers 1,3" bench/serve_load.sh
set -u
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
SHARED="${REPRISE_SHARED:-../shared}"
MODEL="${MODEL:-$SHARED/models/stories260K.gguf}"
PARALLEL="${PARALLEL:-4}"
THREADS="${THREADS:-1}"  # the tiny default model runs best on one thread
export CLIENTS="${CLIENTS:-32}" PER_CLIENT="${PER_CLIENT:-50}" N_TOKENS="${N_TOKENS:-16}"
export RSS_GROWTH_KIB="${RSS_GROWTH_KIB:-16384}"
[ -x "$BUILD/reprise" ] || { echo "no $BUILD/reprise (make BUILD=$BUILD)"; exit 1; }
log=$(mktemp /tmp/reprise-serve-load.XXXXXX)
# shellcheck disable=SC2086
"$BUILD/reprise" serve -m "$MODEL" --port 0 -t "$THREADS" -np "$PARALLEL" -c 512 --chat-template chatml \
    ${SERVE_ARGS:-} 2> "$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 300); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$')
    [ -n "$port" ] && break
    kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
done
[ -n "$port" ] || { echo "server did not start"; exit 1; }
echo "== reprise serve -m $(basename "$MODEL") -np $PARALLEL -t $THREADS ${SERVE_ARGS:-}: $CLIENTS clients x $PER_CLIENT requests, $N_TOKENS tokens each"
out=$(SERVER_PID=$pid timeout 1800 python3 tests/py/serve_http.py load "$port")
echo "$out"
! echo "$out" | grep -q '^FAIL'
