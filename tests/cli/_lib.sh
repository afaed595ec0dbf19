# Helpers for CLI tests: each check prints "ok NAME" or "FAIL NAME: why".
# BUILD (the tree under test) and REPRISE_SHARED are set by tests/run.sh.
BIN="${BUILD:-build}/reprise"
S="${REPRISE_SHARED:-../shared}"
T=$(mktemp -d /tmp/reprise-cli.XXXXXX)
trap 'rm -rf "$T"' EXIT

# SANITIZED=1 in a sanitizer tree: scripts whose checks are numeric (the
# release tree checks every figure) run the same paths on less data there
SANITIZED=0
nm "$BIN" 2> /dev/null | grep -q __asan_init && SANITIZED=1

ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }

# expect_exit NAME CODE CMD...: exit status equals CODE (never a signal)
expect_exit() {
    local name=$1 want=$2; shift 2
    "$@" > "$T/out" 2> "$T/err"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then ok "$name"; else fail "$name" "exit $rc, want $want: $(head -c 300 "$T/err")"; fi
}

# expect_error NAME PATTERN CMD...: exits 1 or 2 and stderr matches PATTERN
expect_error() {
    local name=$1 pat=$2; shift 2
    "$@" > "$T/out" 2> "$T/err"
    local rc=$?
    if [ "$rc" -ge 128 ]; then fail "$name" "killed by signal $((rc - 128))"; return; fi
    if [ "$rc" -eq 0 ]; then fail "$name" "succeeded, expected an error"; return; fi
    if grep -q -- "$pat" "$T/err"; then ok "$name"; else fail "$name" "stderr lacks '$pat': $(head -c 300 "$T/err")"; fi
}
