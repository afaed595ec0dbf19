#!/usr/bin/env bash
# make soak: reprise serve --parallel 4 with two plans under SOAK_CLIENTS
# (default 64) concurrent clients x SOAK_REQUESTS (default 1000) mixed requests
# (tests/soak/soak.py); exits nonzero on a failed valid request, an invalid one
# not answered 4xx, or a server that does not stop cleanly. BUILD picks the tree
# (build-san: the LSan report at exit counts too). make soak SAN=1 builds and
# soaks the ASan+UBSan tree, leaks checked at exit (tests/lsan.supp names the
# third-party ones suppressed).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
SANITIZED=0
[ -n "$(nm "$BUILD/reprise" 2> /dev/null | grep -m1 __asan_init)" ] && SANITIZED=1
S=${REPRISE_SHARED:-../shared}
T=$(mktemp -d /tmp/reprise-soak.XXXXXX)
trap 'rm -rf "$T"' EXIT
"$BUILD/reprise" serve -m "$S/models/stories260K.gguf" --port 0 -np 4 -c 256 --chat-template chatml \
    --plan rys=1,3 --plan deep=map:0..4,2..4 > "$T/out" 2> "$T/err" &
PID=$!
for _ in $(seq 1 300); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/err" | grep -o '[0-9]*$')
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "${PORT:-}" ] || { echo "FAIL soak: the server did not start: $(tail -3 "$T/err")"; exit 1; }
python3 tests/soak/soak.py "$PORT" "$PID" "${SOAK_CLIENTS:-64}" "${SOAK_REQUESTS:-1000}" stories260K.gguf,rys,deep
rc=$?
kill -TERM "$PID"
wait "$PID"
src=$?
grep -E "LeakSanitizer|ERROR: AddressSanitizer|runtime error" -A5 "$T/err" | head -20
[ "$src" -eq 0 ] || { echo "FAIL soak: the server exited $src"; rc=1; }
if [ "$SANITIZED" = 1 ]; then
    if grep -qE "LeakSanitizer|AddressSanitizer|runtime error" "$T/err"; then
        echo "FAIL soak: a sanitizer report (above)"
        rc=1
    else
        echo "soak: ASan/UBSan/LSan: no report at exit$(grep -q 'Suppressions used' "$T/err" && echo ", suppressed: $(sed -n '/Suppressions used/,/^$/p' "$T/err" | grep -v 'Suppressions used\|count' | tr -s ' ' | tr '\n' ';')")"
    fi
fi
[ "$rc" -eq 0 ] && echo "ok soak" || echo "FAIL soak"
exit $rc
