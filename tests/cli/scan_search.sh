# reprise scan 2 on stories260K: blocks on top of a base plan (spec and plan
# file), a beam search of width 2 and depth 2, shards merged into the whole
# scan (by hand and through GNU parallel on localhost), refusals.
. "$(dirname "$0")/_lib.sh"

M="$S/models/stories260K.gguf"
W="-c 64 --chunks 2 -t 1"
head -c 16384 "$S/text/war-and-peace.txt" > "$T/text.txt"
rows() { grep '^[0-9]' "$1" | cut -d, -f1-6,8; } # every column but the seconds
final() { sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$1"; }

# ---- on a base plan
"$BIN" scan -m "$M" -f "$T/text.txt" $W --base-plan 1,2 -o "$T/base.csv" > "$T/base.out" 2> "$T/base.err"
rc=$?
python3 - "$T/base.csv" <<'PY' && [ $rc -eq 0 ] && ok scan_base_rows || fail scan_base_rows "exit $rc: $(tail -3 "$T/base.err")"
import sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == '# reprise scan 2', lines[0]
meta = dict(l[2:].split(': ', 1) for l in lines if l.startswith('# ') and ': ' in l)
assert meta['base'] == '1-2' and 'base-value' in meta, meta
rows = [l.split(',') for l in lines if l[0].isdigit()]
# every block of 5 layers disjoint from [1,2), added to the base
want = {(i, j) for j in range(1, 6) for i in range(j) if j <= 1 or i >= 2}
assert {(int(r[0]), int(r[1])) for r in rows} == want, rows
for r in rows:
    i, j = int(r[0]), int(r[1])
    blocks = sorted([(1, 2), (i, j)])
    assert r[7] == ';'.join(f'{a}-{b}' for a, b in blocks), r
    assert int(r[2]) == 1 + j - i, r
PY
"$BIN" perplexity -m "$M" -f "$T/text.txt" $W --repeat-layers "1,2;2,5" > "$T/p.txt" 2>/dev/null
v=$(grep '^2,5,' "$T/base.csv" | cut -d, -f5)
[ -n "$v" ] && [ "$(printf %.4f "$v")" = "$(final "$T/p.txt")" ] && ok scan_base_matches_perplexity \
    || fail scan_base_matches_perplexity "scan $v, perplexity $(final "$T/p.txt")"
grep -q "^base plan 1-2: ppl " "$T/base.out" && [ -s "$T/base.png" ] && ok scan_base_report \
    || fail scan_base_report "$(head -3 "$T/base.out")"
# the same base from a plan file: the same rows
"$BIN" plan save -m "$M" --repeat-layers 1,2 --name b12 -o "$T/b12.json" > /dev/null 2>&1
"$BIN" scan -m "$M" -f "$T/text.txt" $W --base-plan "$T/b12.json" -o "$T/basef.csv" > /dev/null 2> "$T/err"
cmp -s <(rows "$T/base.csv") <(rows "$T/basef.csv") && ok scan_base_plan_file || fail scan_base_plan_file "$(tail -2 "$T/err")"
# the base with --no-reuse: the same numbers
"$BIN" scan -m "$M" -f "$T/text.txt" $W --base-plan 1,2 --no-reuse -o "$T/basenr.csv" > /dev/null 2> "$T/err"
cmp -s <(rows "$T/base.csv") <(rows "$T/basenr.csv") && ok scan_base_reuse_same || fail scan_base_reuse_same "$(diff <(rows "$T/base.csv") <(rows "$T/basenr.csv") | head -4)"
expect_error scan_base_resume_without "written with base '1-2'; this run has none" \
    "$BIN" scan -m "$M" -f "$T/text.txt" $W -o "$T/base.csv"
expect_error scan_base_other "written for base '1-2'; this run has base '3-4'" \
    "$BIN" scan -m "$M" -f "$T/text.txt" $W --base-plan 3,4 -o "$T/base.csv"
expect_error scan_base_bad "base-plan: plan '1,3;2,4'.*overlaps" \
    "$BIN" scan -m "$M" -f "$T/text.txt" $W --base-plan "1,3;2,4" -o "$T/x.csv"
expect_error scan_base_past "beyond the 5 layers" \
    "$BIN" scan -m "$M" -f "$T/text.txt" $W --base-plan 4,9 -o "$T/x.csv"
expect_error scan_base_covers_all "no block to scan disjoint from the base plan" \
    "$BIN" scan -m "$M" -f "$T/text.txt" $W --base-plan 0,5 -o "$T/x.csv"

# ---- beam search, width 2, depth 2
"$BIN" scan -m "$M" -f "$T/text.txt" $W --beam 2 --depth 2 -o "$T/beam.csv" > "$T/beam.out" 2> "$T/beam.err"
rc=$?
python3 - "$T/beam.csv" <<'PY' && [ $rc -eq 0 ] && ok scan_beam_rounds || fail scan_beam_rounds "exit $rc: $(tail -3 "$T/beam.err")"
import sys
rows = [l.split(',') for l in open(sys.argv[1]).read().splitlines() if l[0].isdigit()]
singles = [r for r in rows if ';' not in r[7]]
doubles = [r for r in rows if r[7].count(';') == 1]
assert len(singles) == 15 and len(singles) + len(doubles) == len(rows), (len(singles), len(rows))
best = sorted(singles, key=lambda r: float(r[5]))[:2]
parents = [(int(r[0]), int(r[1])) for r in best]
want = set()
for a, b in parents:
    for j in range(1, 6):
        for i in range(j):
            if j <= a or i >= b:
                want.add(';'.join(f'{x}-{y}' for x, y in sorted([(a, b), (i, j)])))
assert {r[7] for r in doubles} == want, (sorted(r[7] for r in doubles), sorted(want))
for r in rows:  # extra is the whole plan's
    assert int(r[2]) == sum(int(y) - int(x) for x, y in (b.split('-') for b in r[7].split(';'))), r
PY
"$BIN" scan -m "$M" -f "$T/text.txt" $W --beam 2 --depth 2 --no-reuse -o "$T/beamnr.csv" > /dev/null 2> "$T/err"
cmp -s <(rows "$T/beam.csv") <(rows "$T/beamnr.csv") && ok scan_beam_reuse_same \
    || fail scan_beam_reuse_same "$(diff <(rows "$T/beam.csv") <(rows "$T/beamnr.csv") | head -4)"
plan=$(grep '^[0-9]' "$T/beam.csv" | grep ';' | head -1 | cut -d, -f8)
v=$(grep ",$plan\$" "$T/beam.csv" | cut -d, -f5)
"$BIN" perplexity -m "$M" -f "$T/text.txt" $W --repeat-layers "$plan" > "$T/p.txt" 2>/dev/null
[ -n "$v" ] && [ "$(printf %.4f "$v")" = "$(final "$T/p.txt")" ] && ok scan_beam_matches_perplexity \
    || fail scan_beam_matches_perplexity "plan $plan: scan $v, perplexity $(final "$T/p.txt")"
grep -q "^best plans:" "$T/beam.out" && grep -q "^Pareto list (best plan per extra-layer count" "$T/beam.out" \
    && grep -q "beam: round 2: " "$T/beam.err" && ok scan_beam_report || fail scan_beam_report "$(cat "$T/beam.out")"
# resumed: nothing is run again
"$BIN" scan -m "$M" -f "$T/text.txt" $W --beam 2 --depth 2 -o "$T/beam.csv" > /dev/null 2> "$T/err"
! grep -q '^\[' "$T/err" && cmp -s <(rows "$T/beam.csv") <(rows "$T/beamnr.csv") && ok scan_beam_resume \
    || fail scan_beam_resume "$(grep '^\[' "$T/err" | head -2)"
expect_error scan_depth_no_beam "--depth goes with --beam" "$BIN" scan -m "$M" -f "$T/text.txt" --depth 2
expect_error scan_beam_shard "--shard and --beam" "$BIN" scan -m "$M" -f "$T/text.txt" --beam 2 --shard 1/2

# ---- shards: N shards merged == one whole scan, identical rows and settings
"$BIN" scan -m "$M" -f "$T/text.txt" $W -o "$T/whole.csv" > /dev/null 2> "$T/err"
nosec() { grep -v '^# identity-unc' "$1" | sed 's/^\([0-9]*,[0-9]*,[0-9]*,[a-z]*,[^,]*,[^,]*\),[^,]*,/\1,/'; }
for k in 1 2 3; do
    "$BIN" scan -m "$M" -f "$T/text.txt" $W --shard $k/3 -o "$T/hand$k.csv" > /dev/null 2> "$T/err$k"
done
"$BIN" scan merge "$T/hand2.csv" "$T/hand3.csv" "$T/hand1.csv" -o "$T/hand.csv" --png > "$T/merge.out" 2> "$T/err"
n1=$(grep -c '^[0-9]' "$T/hand1.csv"); n2=$(grep -c '^[0-9]' "$T/hand2.csv"); n3=$(grep -c '^[0-9]' "$T/hand3.csv")
[ "$n1" -gt 0 ] && [ "$n2" -gt 0 ] && [ "$n3" -gt 0 ] && [ $((n1 + n2 + n3)) = 15 ] \
    && grep -q '^# shard: 2/3$' "$T/hand2.csv" && ok scan_shard_split || fail scan_shard_split "$n1 + $n2 + $n3 rows"
cmp -s <(nosec "$T/whole.csv") <(nosec "$T/hand.csv") && [ -s "$T/hand.png" ] && grep -q '^Pareto list' "$T/merge.out" \
    && ok scan_merge_equals_whole || fail scan_merge_equals_whole "$(diff <(nosec "$T/whole.csv") <(nosec "$T/hand.csv") | head -6; tail -2 "$T/err")"
# the GNU parallel recipe of docs/scan.md, on localhost (-S :)
if command -v parallel > /dev/null; then
    parallel --will-cite -S 2/: "'$BIN' scan -m '$M' -f '$T/text.txt' $W -q --shard {}/4 -o '$T/par{}.csv'" ::: 1 2 3 4 \
        > "$T/par.out" 2>&1
    "$BIN" scan merge "$T"/par[1-4].csv -o "$T/par.csv" > /dev/null 2> "$T/err"
    cmp -s <(nosec "$T/whole.csv") <(nosec "$T/par.csv") && ok scan_parallel_shards \
        || fail scan_parallel_shards "$(cat "$T/par.out" | head -3; tail -2 "$T/err"; diff <(nosec "$T/whole.csv") <(nosec "$T/par.csv") | head -4)"
else
    fail scan_parallel_shards "GNU parallel is not installed (scripts/setup.sh installs it)"
fi
expect_error scan_merge_missing "shard 3/3 is missing" "$BIN" scan merge "$T/hand1.csv" "$T/hand2.csv" -o "$T/x.csv"
expect_error scan_merge_twice "shard 1/3 is given twice" "$BIN" scan merge "$T/hand1.csv" "$T/hand1.csv" "$T/hand2.csv" -o "$T/x.csv"
expect_error scan_merge_other_n "is shard 1/4" "$BIN" scan merge "$T/hand1.csv" "$T/par1.csv" -o "$T/x.csv"
sed 's|^# shard: 1/3$|# shard: 2/3|' "$T/hand1.csv" > "$T/dup2.csv"
expect_error scan_merge_same_plan "is in two of the files" "$BIN" scan merge "$T/hand1.csv" "$T/dup2.csv" "$T/hand3.csv" -o "$T/x.csv"
expect_error scan_merge_not_shard "no 'shard: K/N' setting" "$BIN" scan merge "$T/whole.csv" -o "$T/x.csv"
head -c 12000 "$S/text/war-and-peace.txt" > "$T/other.txt"
"$BIN" scan -m "$M" -f "$T/other.txt" $W --shard 3/3 -o "$T/oth3.csv" > /dev/null 2>&1
expect_error scan_merge_other_text "has text '12000 bytes" "$BIN" scan merge "$T/hand1.csv" "$T/hand2.csv" "$T/oth3.csv" -o "$T/x.csv"
"$BIN" scan -m "$M" -f "$T/text.txt" -c 32 --chunks 2 -t 1 --shard 3/3 -o "$T/c32.csv" > /dev/null 2>&1
expect_error scan_merge_other_c "has c '32'" "$BIN" scan merge "$T/hand1.csv" "$T/hand2.csv" "$T/c32.csv" -o "$T/x.csv"
[ ! -e "$T/x.csv" ] && ok scan_merge_no_partial_output || fail scan_merge_no_partial_output "x.csv written"
expect_error scan_merge_no_output "no output" "$BIN" scan merge "$T/hand1.csv"
expect_error scan_shard_bad "--shard '3/2': expected K/N" "$BIN" scan -m "$M" -f "$T/text.txt" --shard 3/2
expect_error scan_shard_resume_other "written for shard '1/3'; this run has shard '2/3'" \
    "$BIN" scan -m "$M" -f "$T/text.txt" $W --shard 2/3 -o "$T/hand1.csv"

# ---- generation probes and the probe metrics (the shipped probe set)
P="$(cd "$(dirname "$0")/../.." && pwd)/probes"
[ "$(grep -c . "$P/math.jsonl")" = 60 ] && [ "$(grep -c . "$P/mc.jsonl")" = 40 ] && ok scan_probe_set_sizes \
    || fail scan_probe_set_sizes "$(wc -l "$P"/*.jsonl)"
head -6 "$P/math.jsonl" > "$T/math6.jsonl"
"$BIN" scan -m "$M" --probes "$T/math6.jsonl" --metric math -t 1 --end 2 -o "$T/math.csv" > "$T/math.out" 2> "$T/math.err"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^[0-9]*,[0-9]*,[0-9]*,math,' "$T/math.csv")" = 3 ] && grep -q '^# identity-math: ' "$T/math.csv" \
    && grep -q "6 probes: 0 multiple-choice, 0 free answers, 6 math, 0 EQ" "$T/math.err" && ok scan_math_metric \
    || fail scan_math_metric "exit $rc: $(tail -3 "$T/math.err")"
"$BIN" scan -m "$M" --probes "$P/mc.jsonl" --metric mc -t 1 --end 2 -o "$T/mc.csv" > /dev/null 2> "$T/mc.err"
"$BIN" scan -m "$M" --probes "$P/mc.jsonl" --metric probe -t 1 --end 2 -o "$T/mcp.csv" > /dev/null 2> "$T/mcp.err"
# mc is the accuracy the probe metric reports
python3 - "$T/mc.csv" "$T/mcp.err" <<'PY' && ok scan_mc_metric || fail scan_mc_metric "$(tail -3 "$T/mc.err")"
import re, sys
rows = {l.split(',')[7].strip(): float(l.split(',')[4]) for l in open(sys.argv[1]) if l[0].isdigit()}
acc = {m.group(1).replace(',', '-'): float(m.group(2)) / 100
       for m in re.finditer(r'block (\d+,\d+) .*accuracy ([0-9.]+)%', open(sys.argv[2]).read())}
assert len(rows) == 3 and rows.keys() == acc.keys(), (rows, acc)
assert all(abs(rows[k] - acc[k]) < 1e-4 for k in rows), (rows, acc)
PY
"$BIN" scan -m "$M" --probes "$P/mc.jsonl" --metric combined -t 1 --end 2 -o "$T/comb.csv" > /dev/null 2> "$T/err"
python3 - "$T/comb.csv" "$T/mc.csv" <<'PY' && ok scan_combined_metric || fail scan_combined_metric "$(tail -3 "$T/err")"
import math, sys
def rows(p):
    return {l.split(',')[7].strip(): float(l.split(',')[5]) for l in open(p) if l[0].isdigit()}
comb, mc = rows(sys.argv[1]), rows(sys.argv[2])
meta = dict(l[2:].split(': ', 1) for l in open(sys.argv[2]) if l.startswith('# ') and ': ' in l)
p0 = float(meta['identity'])
se = max(math.sqrt(p0 * (1 - p0) / 40), 1 / 40)
assert comb.keys() == mc.keys() and all(abs(comb[k] - mc[k] / se) < 1e-6 for k in comb), (comb, mc, se)
PY
printf 'Tom saw a dog.\n1\nHe ran.\nHe sat.\nThe sky.\nA cup.\n' > "$T/hs.txt"
"$BIN" scan -m "$M" --probes "$T/hs.txt" --metric mc -t 1 --end 1 -o "$T/hs.csv" > /dev/null 2> "$T/err" \
    && grep -q "1 probes: 1 multiple-choice" "$T/err" && ok scan_hellaswag_file || fail scan_hellaswag_file "$(tail -2 "$T/err")"
expect_error scan_math_needs_probes "--metric math needs --probes" "$BIN" scan -m "$M" -f "$T/text.txt" --metric math
expect_error scan_math_no_items "needs math (an integer answer) probes" "$BIN" scan -m "$M" --probes "$P/mc.jsonl" --metric math -o "$T/x2.csv"
expect_error scan_combine_alone "--combine goes with --metric combined" "$BIN" scan -m "$M" --probes "$P/mc.jsonl" --combine mc
expect_error scan_combine_bad "--combine 'mc,ppl': combines math, eq and mc" "$BIN" scan -m "$M" --probes "$P/mc.jsonl" --metric combined --combine mc,ppl
expect_error scan_combine_missing "the probe file has no math probes" "$BIN" scan -m "$M" --probes "$P/mc.jsonl" --metric combined --combine math,mc -o "$T/x3.csv"
