#!/usr/bin/env bash
# The long fuzz run: builds the targets (tests/fuzz/run.sh, FUZZ_BUILD_ONLY)
# and runs each for FUZZ_SECONDS (default 600), FUZZ_JOBS at a time (default 2)
# at the lowest priority, from the seed corpus plus what earlier runs kept in
# build-fuzz/fuzz/work-NAME. Prints one table row per target (seconds,
# executions, exec/s, corpus entries, coverage, findings) and keeps it in
# build-fuzz/fuzz/long-table.md. FUZZ_TARGETS picks targets as in run.sh.
# Not part of make test or .ci/run: it takes FUZZ_SECONDS x targets / FUZZ_JOBS.
set -uo pipefail
cd "$(dirname "$0")/../.."
SECS=${FUZZ_SECONDS:-600}
JOBS=${FUZZ_JOBS:-2}
B=build-fuzz
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
    FUZZ_BUILD_ONLY=1 tests/fuzz/run.sh > $B-long-build.log 2>&1 || { tail -20 $B-long-build.log; exit 1; }
fi
targets=()
for src in tests/fuzz/fuzz_*.c; do
    kind=$(basename "$src" .c)
    kind=${kind#fuzz_}
    if [ -n "${FUZZ_TARGETS:-}" ] && ! [[ " $FUZZ_TARGETS " == *" $kind "* ]]; then continue; fi
    targets+=("$kind")
done
one() { # kind: runs one target, writes its row to $B/fuzz/long-$kind.row
    local kind=$1 art=$B/fuzz/artifacts-$kind log=$B/fuzz/long-$kind.log t0 rc
    mkdir -p "$art" $B/fuzz/work-$kind $B/fuzz/corpus-$kind
    t0=$(date +%s)
    nice -n 19 $B/fuzz/fuzz_$kind -max_total_time="$SECS" -timeout=30 -rss_limit_mb=4096 -max_len=2000000 \
        -print_final_stats=1 -artifact_prefix="$art/" $B/fuzz/work-$kind $B/fuzz/corpus-$kind > "$log" 2>&1
    rc=$?
    local secs=$(($(date +%s) - t0))
    local execs rate cov ft corp findings
    execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | awk '{print $2}' | tail -1)
    rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | awk '{print $2}' | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
    ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | awk '{print $2}')
    corp=$(ls $B/fuzz/work-$kind | wc -l)
    if [ "$rc" -eq 0 ]; then findings=none; else
        findings="rc $rc: $(grep -m1 -oE 'ERROR: [A-Za-z]+: [^ ]+|runtime error: .*|ERROR: libFuzzer: [a-z-]+' "$log" | head -c 120)"
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$kind" "$secs" "${execs:-?}" "${rate:-?}" \
        "$corp" "${cov:-?}" "${ft:-?}" "$findings" > $B/fuzz/long-$kind.row
}
running=0
for kind in "${targets[@]}"; do
    one "$kind" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
done
wait
{
    echo "| target | seconds | executions | exec/s | corpus | cov (edges) | features | findings |"
    echo "|---|---|---|---|---|---|---|---|"
    for kind in "${targets[@]}"; do cat $B/fuzz/long-$kind.row; done
} | tee $B/fuzz/long-table.md
! grep -q '| rc ' $B/fuzz/long-table.md
