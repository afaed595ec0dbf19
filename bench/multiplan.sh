#!/usr/bin/env bash
# Several plans served from one copy of the weights: memory and mixed-plan
# throughput of `reprise serve`.
#
# A synthetic llama (N_LAYER layers, n_embd N_EMBD, 8 query / 2 KV heads, Q8_0,
# the stories260K vocabulary) is served twice at once, each entry with
# -np PARALLEL -c CTX -b BATCH:
#   one:   the model alone
#   three: the model plus two plans (--plan s=MID,MID+1 --plan xl=A,B)
# After every model of both servers has answered, the three-plan server's peak
# RSS must exceed the one-model server's by at most the extra plans' state
# (KV) plus SLACK_MIB (their compute scratch, which grows with -b): the weights
# are mapped once. The check refuses a setup where the extra KV plus the slack
# would hide a copy of the weights.
# Then mixed traffic: CLIENTS clients x PER_CLIENT greedy requests of N_TOKENS
# tokens, first against the one-model server, then cycling through the three
# models of the other; every answer must equal that model's reference.
#
#   bench/multiplan.sh                   (BUILD=build, THREADS=1, PARALLEL=4)
#   N_LAYER=32 N_EMBD=1024 CLIENTS=16 bench/multiplan.sh
set -u
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
SHARED="${REPRISE_SHARED:-../shared}"
BIN="$BUILD/reprise"
N_LAYER="${N_LAYER:-16}"
N_EMBD="${N_EMBD:-512}"
THREADS="${THREADS:-1}" # a shared 2-core machine: spinning workers of a 2-thread pool only wait
PARALLEL="${PARALLEL:-4}"
CTX="${CTX:-256}"
BATCH="${BATCH:-64}"
SLACK_MIB="${SLACK_MIB:-8}"
export CLIENTS="${CLIENTS:-8}" PER_CLIENT="${PER_CLIENT:-4}" N_TOKENS="${N_TOKENS:-24}"
[ -x "$BIN" ] || { echo "no $BIN (make BUILD=$BUILD)"; exit 1; }
W=$(mktemp -d /tmp/reprise-multiplan.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$W"' EXIT

MID=$((N_LAYER / 2))
S_SPEC="$MID,$((MID + 1))"
XL_SPEC="$((N_LAYER / 4)),$((3 * N_LAYER / 4))"
echo "synthesizing a ${N_LAYER}-layer llama (n_embd $N_EMBD) at Q8_0 ..." >&2
"$BIN" synth --arch llama --n-embd "$N_EMBD" --n-layer "$N_LAYER" --n-head 8 --n-head-kv 2 --n-ff $((N_EMBD * 11 / 4)) \
    --vocab "$SHARED/models/stories260K.gguf" --type q8_0 -o "$W/base.gguf" 2>/dev/null || { echo "synth failed"; exit 1; }

PORT=""
start() { # NAME ARGS...: sets PORT
    local name=$1; shift
    "$BIN" serve -m "$W/base.gguf" --port 0 -t "$THREADS" -np "$PARALLEL" -c "$CTX" -b "$BATCH" "$@" > /dev/null 2> "$W/$name.err" &
    PIDS+=($!)
    PORT=""
    for _ in $(seq 1 600); do
        PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$W/$name.err" | grep -o '[0-9]*$')
        [ -n "$PORT" ] && return 0
        kill -0 "${PIDS[-1]}" 2>/dev/null || break
        sleep 0.1
    done
    cat "$W/$name.err" >&2
    return 1
}
start one || exit 1
P1=$PORT
start three --plan "s=$S_SPEC" --plan "xl=$XL_SPEC" || exit 1
P3=$PORT
echo "== reprise serve -m base.gguf -np $PARALLEL -c $CTX -b $BATCH -t $THREADS [--plan s=$S_SPEC --plan xl=$XL_SPEC]"
export BIN MODEL="$W/base.gguf"
py() { timeout 3600 python3 tests/py/serve_http.py "$@"; }
out=$(PORT_ONE=$P1 SLACK_MIB=$SLACK_MIB py memory "$P3"; py mixload "$P1"; py mixload "$P3")
echo "$out"
! echo "$out" | grep -q '^FAIL'
