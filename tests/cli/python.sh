#!/usr/bin/env bash
# The Python package (python/, ctypes over libreprise.so): its pytest suite
# (python/tests) against this tree's library and binary, one ok/FAIL line per
# test. The venv is build/venv (scripts/setup.sh: pytest, numpy). In a
# sanitizer tree the library is ASan+UBSan-instrumented and Python runs with
# the ASan runtime preloaded (leak detection off: the interpreter's own
# allocations outlive it).
source "$(dirname "$0")/_lib.sh"
cd "$(dirname "$0")/../.."
PY=build/venv/bin/python
if ! "$PY" -c "import pytest, numpy" > /dev/null 2>&1; then
    fail python_venv "$PY lacks pytest or numpy: run scripts/setup.sh"
    exit 0
fi
export REPRISE_LIB="$PWD/$BUILD/libreprise.so" REPRISE_BIN="$PWD/$BUILD/reprise"
if nm "$BUILD/reprise" 2>/dev/null | grep -q __asan_init; then
    export LD_PRELOAD="$(cc -print-file-name=libasan.so)"
    export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:allocator_may_return_null=1"
fi
"$PY" -m pytest -q -rA -p no:cacheprovider python/tests > "$T/log" 2>&1
rc=$?
sed -n 's/^PASSED python\/tests\/\([^ ]*\).*/ok py:\1/p' "$T/log"
sed -n 's/^\(FAILED\|ERROR\) python\/tests\/\([^ ]*\)\(.*\)/FAIL py:\2:\3/p' "$T/log"
n=$(grep -c '^PASSED python/tests/' "$T/log")
if [ "$rc" -ne 0 ] && ! grep -q '^\(FAILED\|ERROR\) ' "$T/log"; then
    fail python_pytest "pytest exited $rc: $(tail -c 400 "$T/log")"
elif [ "$rc" -eq 0 ] && [ "$n" -lt 30 ]; then
    fail python_pytest "only $n tests ran"
fi
