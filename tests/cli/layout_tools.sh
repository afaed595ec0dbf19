# The house rules of tools/ that a grep can check (scripts/check-layout.sh):
# the tools include public headers and their own only, and no function in
# tools/ is over 150 lines; the length check itself sees a long function.
. "$(dirname "$0")/_lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHECK="$ROOT/scripts/check-layout.sh"

if out=$("$CHECK" tool-includes 2>&1); then ok layout_tool_includes
else fail layout_tool_includes "$(echo "$out" | head -5)"; fi

if out=$("$CHECK" fn-length tools 2>&1); then ok layout_tools_fn_length
else fail layout_tools_fn_length "$(echo "$out" | head -5)"; fi

# the check is not blind: a 151-line function is reported, a 150-line one is not
mkdir -p "$T/long"
{ echo "int f(void) {"; for i in $(seq 1 148); do echo "    x();"; done; echo "}"; } > "$T/long/ok.c"
{ echo "static int g(int a,"; echo "             int b) {"; for i in $(seq 1 148); do echo "    x();"; done; echo "}"; } > "$T/long/long.c"
out=$("$CHECK" fn-length "$T/long" 2>&1)
rc=$?
if [ "$rc" -eq 1 ] && echo "$out" | grep -q "long.c:1: function g is 151 lines (max 150)" && ! echo "$out" | grep -q "ok.c"; then
    ok layout_fn_length_sees_long_functions
else
    fail layout_fn_length_sees_long_functions "exit $rc: $out"
fi
