#!/usr/bin/env bash
# make install / uninstall into a staging DESTDIR, and a C program built
# against the installed tree with `pkg-config --cflags --libs reprise` alone.
source "$(dirname "$0")/_lib.sh"
cd "$(dirname "$0")/../.."
# a sanitizer tree installs a sanitized library (its reprise.pc says so)
san=; nm "$BUILD/reprise" 2>/dev/null | grep -q __asan_init && san="SAN=1"
ST="$T/stage" P=/opt/reprise
mk() { make -s --no-print-directory BUILD="$BUILD" $san PREFIX=$P DESTDIR="$ST" "$@"; }

if mk install > "$T/inst.log" 2>&1; then ok install_runs; else fail install_runs "$(tail -3 "$T/inst.log")"; fi
L=$ST$P/lib
missing=
for f in bin/reprise lib/libreprise.so lib/libreprise.so.0 lib/libreprise.a include/reprise.h \
         include/reprise_tools.h lib/pkgconfig/reprise.pc share/man/man1/reprise.1; do
    [ -e "$ST$P/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok install_files || fail install_files "missing:$missing"
soname=$(readelf -d "$L/libreprise.so" 2>/dev/null | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libreprise.so.0 ] && ok install_soname || fail install_soname "soname '$soname'"

# exported = declared: every exported symbol is named in the public headers,
# every function they declare is exported (nothing internal leaks)
# (ASan's own __odr_asan.* markers of exported data are not API)
nm -D --defined-only "$L/libreprise.so" | awk '$2 ~ /[TDRB]/ && $3 !~ /^__odr_asan\./ {print $3}' | sort -u > "$T/exp"
cc -E -P -Iinclude include/reprise_tools.h > "$T/hdr.i"
grep -ow 'rp_[a-z0-9_]*' "$T/hdr.i" | sort -u > "$T/names"
grep -oP '\brp_[a-z0-9_]+(?=\s*\((?!\s*\*))' "$T/hdr.i" | sort -u > "$T/funcs"
extra=$(comm -23 "$T/exp" "$T/names" | head -5 | tr '\n' ' ')
absent=$(comm -13 "$T/exp" "$T/funcs" | head -5 | tr '\n' ' ')
if [ -z "$extra$absent" ] && [ "$(wc -l < "$T/funcs")" -gt 200 ]; then ok install_exports
else fail install_exports "exported, not public: $extra; declared, not exported: $absent"; fi
grep -qx rp_fail "$T/exp" && fail install_hidden "rp_fail (internal) is exported" || ok install_hidden

flags=$(PKG_CONFIG_PATH=$L/pkgconfig PKG_CONFIG_SYSROOT_DIR=$ST pkg-config --cflags --libs reprise 2>&1)
if cc -std=c11 -Wall -Wextra -Werror -o "$T/hello" tests/cli/install/hello.c $flags 2> "$T/cc.err"; then
    ok install_pkgconfig_build
else fail install_pkgconfig_build "cc $flags: $(head -c 300 "$T/cc.err")"; fi
readelf -d "$T/hello" 2>/dev/null | grep -q 'NEEDED.*\[libreprise.so.0\]' && ok install_linked_shared \
    || fail install_linked_shared "hello does not need libreprise.so.0"
LD_LIBRARY_PATH=$L "$T/hello" models/demo-llama.gguf > "$T/hello.out" 2> "$T/hello.err"
rc=$?
ver=$(sed -n 's/^#define RP_VERSION "\(.*\)"/\1/p' include/reprise.h)
if [ $rc -eq 0 ] && grep -qx "version $ver $ver" "$T/hello.out" && grep -q '^tokens [0-9]* [0-9]* [0-9]* [0-9]*$' "$T/hello.out"; then
    ok install_hello_runs
else fail install_hello_runs "exit $rc: $(head -c 300 "$T/hello.out" "$T/hello.err")"; fi
grep -q "^bad plan: invalid layer plan: .*99" "$T/hello.out" && ok install_hello_error \
    || fail install_hello_error "$(grep '^bad plan' "$T/hello.out")"
[ "$("$ST$P/bin/reprise" --version)" = "reprise $ver" ] && ok install_binary || fail install_binary "$("$ST$P/bin/reprise" --version 2>&1)"

man=$ST$P/share/man/man1/reprise.1
groff -man -Tutf8 -ww -z "$man" > "$T/groff.err" 2>&1
nsec=$(grep -c '^\.SS ' "$man")
ncmd=$("$BIN" --help | sed -n '/^commands:/,$p' | awk 'NR > 1 && NF' | wc -l)
if [ ! -s "$T/groff.err" ] && [ "$nsec" -eq "$ncmd" ] && grep -q -- '--repeat-layers SPEC' "$man"; then ok install_man
else fail install_man "$nsec sections for $ncmd commands; groff: $(head -c 200 "$T/groff.err")"; fi

mk uninstall > "$T/un.log" 2>&1
left=$(find "$ST" ! -type d | head -5 | tr '\n' ' ')
[ -z "$left" ] && ok uninstall_clean || fail uninstall_clean "left behind: $left"
