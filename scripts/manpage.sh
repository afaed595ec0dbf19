#!/usr/bin/env bash
# Writes the man page reprise(1) on stdout, made from the tools' own --help
# texts (`reprise --help`, `reprise COMMAND --help`), so it never drifts from
# them: make install installs it as share/man/man1/reprise.1.
set -euo pipefail
bin=${1:?usage: scripts/manpage.sh path/to/reprise}
ver=$("$bin" --version | sed 's/^reprise //')
# roff escapes: backslashes doubled, a leading '.' or "'" kept literal
esc() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }
cat <<HDR
.TH REPRISE 1 "" "reprise $ver" "User Commands"
.SH NAME
reprise \\- GGUF inference where the layers a model runs are a plan over weights stored once
.SH SYNOPSIS
.B reprise
.I COMMAND
[options]
.SH DESCRIPTION
Each command prints its options with
.BR "reprise COMMAND \\-\\-help" ;
the sections below are those texts.
.PP
.nf
HDR
"$bin" --help | esc
echo ".fi"
echo ".SH COMMANDS"
cmds=$("$bin" --help | sed -n '/^commands:/,$p' | awk 'NR > 1 && NF {print $1}')
for c in $cmds; do
    echo ".SS $c"
    echo ".nf"
    { "$bin" "$c" --help 2>&1 || true; } | sed "s/^reprise $c: usage: /usage: /" | esc
    echo ".fi"
done
cat <<FTR
.SH FILES
.TP
.I include/reprise.h, include/reprise_tools.h
the C API of libreprise (pkg-config name: reprise)
.SH SEE ALSO
The README and docs/ of the reprise source tree.
FTR
