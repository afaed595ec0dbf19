#!/usr/bin/env bash
# Speculative decoding from the same weights: acceptance rate and generation
# speed of a few draft plans, for the identity plan and for a +k repeat plan.
#
# For each (target plan, draft plan) pair, `reprise bench` times greedy
# generation of N tokens after a prompt, plain and speculative, in one run
# (alternating repetitions, so load on the machine hits both alike), checks
# that both give the same tokens, and reports the acceptance rate, the tokens
# per verification and the speed-up. Draft plans keep the first and the last
# layer and skip 1, 2, a quarter or half of the middle ones; for the repeat
# target the plain stack (the default draft) is measured too. The table ends
# with the best draft plan for each target.
#
#   bench/spec.sh     (BIN=build/reprise, MODEL=the demo llama model under models/ if there is
#                      one, else stories260K; THREADS=1, N=128, REPS=3, DRAFT_MAX=8,
#                      P_MIN=0.75, PROMPT="...")
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/reprise}
THREADS=${THREADS:-1}
N=${N:-128}
REPS=${REPS:-3}
DRAFT_MAX=${DRAFT_MAX:-8}
P_MIN=${P_MIN:-0.75}
PROMPT=${PROMPT:-"Well, Prince, so Genoa and Lucca are now just family estates of the"}
SHARED=${REPRISE_SHARED:-../shared}
if [ -z "${MODEL:-}" ]; then
    for f in models/*.gguf; do
        [ -e "$f" ] && "$BIN" inspect "$f" 2>/dev/null | grep -q 'general.architecture .*"llama"' && { MODEL=$f; break; }
    done
fi
MODEL=${MODEL:-$SHARED/models/stories260K.gguf}
W=$(mktemp -d /tmp/reprise-specbench.XXXXXX)
trap 'rm -rf "$W"' EXIT

L=$("$BIN" run -m "$MODEL" -p x --dump-plan 2>/dev/null | sed -n 's/^plan: identity, \([0-9]*\) layers.*/\1/p')
[ -n "$L" ] || { echo "cannot read the layer count of $MODEL" >&2; exit 1; }
last=$((L - 1))

# skip S middle layers: the map without layers [a, a+S)
skip_map() {
    local s=$1 a=$(((L - $1) / 2))
    local b=$((a + s))
    if [ "$a" -le 1 ]; then a=1; b=$((1 + s)); fi
    [ "$b" -gt "$last" ] && { echo ""; return; }
    local left right
    left=$([ "$a" -gt 1 ] && echo "0..$((a - 1))" || echo "0")
    right=$([ "$b" -lt "$last" ] && echo "$b..$last" || echo "$last")
    echo "$left,$right"
}
declare -a DRAFTS=()
for s in 1 2 $((L / 4)) $((L / 2)); do
    [ "$s" -ge 1 ] || continue
    m=$(skip_map "$s")
    [ -n "$m" ] || continue
    case " ${DRAFTS[*]:-} " in *" $m "*) continue ;; esac
    DRAFTS+=("$m")
done
K=$((L / 4 > 1 ? L / 4 : 1))
RI=$(((L - K) / 2))
REPEAT="$RI,$((RI + K))"

echo "model: $MODEL ($L layers); greedy generation of $N tokens after \"$PROMPT\""
echo "threads $THREADS, $REPS repetitions, draft-max $DRAFT_MAX, draft-p-min $P_MIN; t/s are means, the speed-up is measured in the same run"
echo
echo "| target plan | draft plan | draft steps | accepted | tokens / verification | plain t/s | speculative t/s | speed-up |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"

measure() { # TARGET-LABEL REPEAT-OR-EMPTY DRAFT-LABEL DRAFT-FLAGS...
    local tl=$1 rep=$2 dl=$3; shift 3
    if ! "$BIN" bench -m "$MODEL" -p 0 -n "$N" -r "$REPS" -t "$THREADS" --gen-prompt "$PROMPT" \
        ${rep:+--repeat-layers "$rep"} --draft-max "$DRAFT_MAX" --draft-p-min "$P_MIN" "$@" > "$W/out" 2> "$W/err"; then
        echo "| $tl | $dl | failed: $(tail -1 "$W/err") |||||"
        return
    fi
    local plain spec acc tpv up steps
    plain=$(awk -F'|' -v t="gen$N" '{ gsub(/ /, "", $7) } $7 == t { split($8, a, "±"); gsub(/ /, "", a[1]); print a[1] }' "$W/out")
    spec=$(awk -F'|' -v t="gen$N+spec" '{ gsub(/ /, "", $7) } $7 == t { split($8, a, "±"); gsub(/ /, "", a[1]); print a[1] }' "$W/out")
    acc=$(sed -n 's/.*accepted (\([0-9.]*%\)).*/\1/p' "$W/out")
    tpv=$(sed -n 's/.*, \([0-9.]*\) tokens per verification.*/\1/p' "$W/out")
    up=$(sed -n 's/^speed-up: \([0-9.]*x\).*/\1/p' "$W/out")
    steps=$(sed -n "s/^draft: .*(\([0-9]*\) of the target's \([0-9]*\) steps.*/\1 of \2/p" "$W/out")
    echo "| $tl | $dl | $steps | $acc | $tpv | $plain | $spec | $up |"
    echo "$tl|$dl|$up" >> "$W/ups"
}

for d in "${DRAFTS[@]}"; do measure "identity ($L)" "" "$d" --draft-plan "$d"; done
measure "+$K: $REPEAT" "$REPEAT" "plain stack (default)" --spec
for d in "${DRAFTS[@]}"; do measure "+$K: $REPEAT" "$REPEAT" "$d" --draft-plan "$d"; done

echo
python3 - "$W/ups" <<'PY'
import sys
best = {}
for line in open(sys.argv[1]):
    t, d, up = line.rstrip("\n").split("|")
    if not up:
        continue
    v = float(up.rstrip("x"))
    if t not in best or v > best[t][1]:
        best[t] = (d, v)
for t, (d, v) in best.items():
    print(f"best draft for {t}: {d} ({v:.2f}x)")
PY
