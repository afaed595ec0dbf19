#!/usr/bin/env bash
# Runs the whole suite: unit tests in each build tree, then the CLI tests
# (tests/cli/*.sh) against each tree's binary. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
export REPRISE_SHARED="${REPRISE_SHARED:-$(cd .. && pwd)/shared}"
[ -d "$REPRISE_SHARED" ] || { echo "shared data not found at $REPRISE_SHARED (set REPRISE_SHARED)"; exit 2; }
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$(cd "$(dirname "$0")" && pwd)/lsan.supp}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
pass=0; fail=0; failed_names=()
tmp=$(mktemp -d /tmp/reprise-run.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

count() { # parse "ok"/"FAIL" lines of a log
    local log=$1 tag=$2
    local p f
    p=$(grep -c '^ok ' "$log" || true)
    f=$(grep -c '^FAIL ' "$log" || true)
    pass=$((pass + p)); fail=$((fail + f))
    while IFS= read -r l; do failed_names+=("[$tag] $l"); done < <(grep '^FAIL ' "$log")
}

for tree in "$@"; do
    [ -x "$tree/test-unit" ] || { echo "missing $tree/test-unit"; fail=$((fail + 1)); continue; }
    echo "== unit tests ($tree)"
    log="$tmp/unit-$(basename "$tree").log"
    t0=$SECONDS
    "$tree/test-unit" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    echo "   (unit tests, $tree: $((SECONDS - t0)) s)"
    count "$log" "$tree"
    if [ "$rc" -gt 1 ] || ! grep -q '^unit: ' "$log"; then
        echo "FAIL unit runner crashed (exit $rc)"; fail=$((fail + 1)); failed_names+=("[$tree] unit runner crashed")
    fi
done

for tree in "$@"; do
    for t in tests/cli/[!_]*.sh; do
        [ -e "$t" ] || continue
        echo "== $t ($tree)"
        log="$tmp/cli-$(basename "$tree")-$(basename "$t").log"
        t0=$SECONDS
        BUILD="$tree" bash "$t" > "$log" 2>&1
        rc=$?
        cat "$log"
        echo "   ($t, $tree: $((SECONDS - t0)) s)"
        count "$log" "$tree"
        if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$log"; then
            echo "FAIL $t exited $rc"; fail=$((fail + 1)); failed_names+=("[$tree] $t exited $rc")
        fi
    done
done

if [ ${#failed_names[@]} -gt 0 ]; then
    echo; echo "failures:"; printf '  %s\n' "${failed_names[@]}"
fi
echo
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
