# The library's house rules a grep can check (docs/HACKING.md): no
# architecture name outside src/arch/, no function over 150 lines in src/
# outside the kernels, no include cycle (module includes, file-level calls).
# Sources only: the build tree does not matter.
. "$(dirname "$0")/_lib.sh"
R="$(cd "$(dirname "$0")/../.." && pwd)"

check() { # NAME CMD...: passes when CMD exits 0; its output is the reason otherwise
    local name=$1; shift
    if "$@" > "$T/out" 2>&1; then ok "$name"; else fail "$name" "$(head -c 600 "$T/out" | tr '\n' ';')"; fi
}

check layout_arch_names "$R/scripts/check-layout.sh" arch-names
check layout_fn_length_src "$R/scripts/check-layout.sh" fn-length-src
check layout_include_cycles "$R/scripts/include-cycles.sh"
check layout_call_cycles "$R/scripts/include-cycles.sh" --calls

# the checks themselves can fail: a planted violation in a scratch copy is found
mkdir -p "$T/tree/scripts" "$T/tree/src/core" "$T/tree/src/arch"
cp "$R/scripts/check-layout.sh" "$R/scripts/include-cycles.sh" "$T/tree/scripts/"
printf 'const rp_arch rp_arch_toy = {.name = "toy"};\n' > "$T/tree/src/arch/toy.c"
printf 'static const char *a = "toy";\n' > "$T/tree/src/core/x.c"
{ echo 'int f(void) {'; for i in $(seq 1 160); do echo "    (void)$i;"; done; echo '    return 0;'; echo '}'; } >> "$T/tree/src/core/x.c"
printf '#include "core/y.h"\n' > "$T/tree/src/core/x.h"
printf '#include "core/x.h"\n' > "$T/tree/src/core/y.h"
"$T/tree/scripts/check-layout.sh" arch-names > "$T/a" 2>&1
grep -q 'src/core/x.c:1:.*architecture name' "$T/a" && ok layout_arch_names_finds || fail layout_arch_names_finds "$(cat "$T/a")"
"$T/tree/scripts/check-layout.sh" fn-length-src > "$T/a" 2>&1
grep -q 'function f is 163 lines' "$T/a" && ok layout_fn_length_finds || fail layout_fn_length_finds "$(cat "$T/a")"
"$T/tree/scripts/include-cycles.sh" > "$T/a" 2>&1
grep -q '^core/x <-> core/y$' "$T/a" && ok layout_cycles_find || fail layout_cycles_find "$(cat "$T/a")"
