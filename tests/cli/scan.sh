# reprise scan: a full scan at a small window (CSV, heatmap, Pareto list),
# prefix reuse gives the numbers of whole plans and of reprise perplexity,
# resuming (truncated file, wider range, Ctrl-C), the kld and probe metrics,
# an architecture without step ranges, refusals.
. "$(dirname "$0")/_lib.sh"

# The model of the full scan, set here only: the trained 12-layer demo llama
# (models/, issue 12); stories260K where a checkout has no demo model yet.
SCAN_MODEL="${SCAN_MODEL:-$(cd "$(dirname "$0")/../.." && pwd)/models/demo-llama.gguf}"
[ -f "$SCAN_MODEL" ] || SCAN_MODEL="$S/models/stories260K.gguf"
echo "scan tests on $SCAN_MODEL"
M="$SCAN_MODEL"
W="-c 64 --chunks 2 -t 1"
SUB="--end 3" # the part of the range the checks beyond the full scan run over (6 blocks)
head -c 16384 "$S/text/war-and-peace.txt" > "$T/text.txt"
head -c 12000 "$S/text/war-and-peace.txt" > "$T/other.txt"
N=$("$BIN" inspect "$M" 2>/dev/null | sed -n 's/^ *[a-z0-9]*\.block_count  *u32  *\([0-9]*\).*/\1/p' | head -1)
[ -n "$N" ] && [ "$N" -ge 5 ] && ok scan_model_layers || fail scan_model_layers "no block_count in $M"
NB=$((N * (N + 1) / 2))

# the full scan
"$BIN" scan -m "$M" -f "$T/text.txt" $W -o "$T/full.csv" > "$T/full.out" 2> "$T/full.err"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^[0-9]*,[0-9]*,[0-9]*,ppl,' "$T/full.csv")" = "$NB" ] && ok scan_full_rows \
    || fail scan_full_rows "exit $rc, $(grep -c ',ppl,' "$T/full.csv" 2>/dev/null) rows, want $NB: $(tail -3 "$T/full.err")"
python3 - "$T/full.csv" "$N" <<'PY' && ok scan_csv_blocks || fail scan_csv_blocks "$(head -14 "$T/full.csv")"
import sys
rows = [l.split(',') for l in open(sys.argv[1]) if l[0].isdigit()]
n = int(sys.argv[2])
got = {(int(r[0]), int(r[1])) for r in rows}
assert got == {(i, j) for j in range(1, n + 1) for i in range(j)}, got
assert all(int(r[2]) == int(r[1]) - int(r[0]) and float(r[6]) >= 0 for r in rows)
ident = float([l for l in open(sys.argv[1]) if l.startswith('# identity: ')][0].split()[2])
assert all(abs(float(r[4]) - ident - float(r[5])) <= 1e-6 * ident for r in rows)
PY
grep -q "^best blocks:" "$T/full.out" && grep -q "^Pareto list" "$T/full.out" \
    && [ "$(sed -n '/^Pareto list/,$p' "$T/full.out" | grep -c '^ *[0-9]\+  [0-9]\+,[0-9]\+ ')" = "$N" ] \
    && ok scan_pareto_list || fail scan_pareto_list "$(cat "$T/full.out")"
grep -q "^\[$NB/$NB\] block $((N - 1)),$N (+1): ppl " "$T/full.err" && grep -q "left$" "$T/full.err" \
    && ok scan_progress_lines || fail scan_progress_lines "$(tail -3 "$T/full.err")"
# the heatmap: a PNG of a plausible size beside the CSV
python3 - "$T/full.png" <<'PY' && ok scan_png || fail scan_png "$(od -A d -t x1 "$T/full.png" 2>&1 | head -3)"
import struct, sys
d = open(sys.argv[1], 'rb').read()
assert d[:8] == b'\x89PNG\r\n\x1a\n' and d[12:16] == b'IHDR', d[:16]
w, h, depth, colour = struct.unpack('>IIBB', d[16:26])
assert 400 <= w <= 4000 and 300 <= h <= 4000 and depth == 8 and colour == 2, (w, h, depth, colour)
PY

# a part of the range gives the same numbers as the full scan; so does running
# every plan whole; and reprise perplexity agrees
"$BIN" scan -m "$M" -f "$T/text.txt" $W $SUB -o "$T/sub.csv" > /dev/null 2> "$T/err"
NS=$(grep -c '^[0-9]' "$T/sub.csv" 2>/dev/null)
[ "$NS" = 6 ] && cmp -s <(grep '^[0-9]' "$T/sub.csv" | cut -d, -f1-6) <(grep '^[0-9]' "$T/full.csv" | awk -F, '$2 <= 3' | cut -d, -f1-6) \
    && ok scan_subrange_same_numbers || fail scan_subrange_same_numbers "$NS rows: $(tail -2 "$T/err")"
"$BIN" scan -m "$M" -f "$T/text.txt" $W $SUB -o "$T/whole.csv" --no-reuse > /dev/null 2> "$T/err"
[ "$(grep -c '^[0-9]' "$T/whole.csv" 2>/dev/null)" = "$NS" ] \
    && cmp -s <(grep -v '^# identity' "$T/sub.csv" | cut -d, -f1-6) <(grep -v '^# identity' "$T/whole.csv" | cut -d, -f1-6) \
    && cmp -s <(grep '^# identity:' "$T/sub.csv") <(grep '^# identity:' "$T/whole.csv") \
    && grep -q "prefix reuse off" "$T/err" && ok scan_reuse_same_numbers || fail scan_reuse_same_numbers "$(diff "$T/sub.csv" "$T/whole.csv" | head -6)"
"$BIN" perplexity -m "$M" -f "$T/text.txt" $W > "$T/ppl0.txt" 2>/dev/null
"$BIN" perplexity -m "$M" -f "$T/text.txt" $W --repeat-layers 1,3 > "$T/ppl1.txt" 2>/dev/null
python3 - "$T/full.csv" "$T/ppl0.txt" "$T/ppl1.txt" <<'PY' && ok scan_matches_perplexity || fail scan_matches_perplexity "$(tail -1 "$T/ppl0.txt") $(tail -1 "$T/ppl1.txt")"
import re, sys
csv = open(sys.argv[1]).read()
final = lambda p: float(re.search(r'Final estimate: PPL = ([0-9.]+)', open(p).read()).group(1))
ident = float(re.search(r'^# identity: (\S+)', csv, re.M).group(1))
row = re.search(r'^1,3,2,ppl,([^,]+),', csv, re.M)
assert f'{ident:.4f}' == f'{final(sys.argv[2]):.4f}', (ident, final(sys.argv[2]))
assert f'{float(row.group(1)):.4f}' == f'{final(sys.argv[3]):.4f}', (row.group(1), final(sys.argv[3]))
PY

# resuming: a file cut after 2 rows gets the rest; the 2 rows are not recomputed
{ grep '^#\|^i,' "$T/sub.csv"; grep '^[0-9]' "$T/sub.csv" | head -2; } > "$T/cut.csv"
"$BIN" scan -m "$M" -f "$T/text.txt" $W $SUB -o "$T/cut.csv" > /dev/null 2> "$T/err"
grep -q "resuming .*cut.csv: 2 of the $NS blocks are there, $((NS - 2)) to run" "$T/err" \
    && grep -q "^\[$((NS - 2))/$((NS - 2))\]" "$T/err" && cmp -s <(cut -d, -f1-6 "$T/sub.csv") <(cut -d, -f1-6 "$T/cut.csv") \
    && cmp -s <(grep '^[0-9]' "$T/sub.csv" | head -2) <(grep '^[0-9]' "$T/cut.csv" | head -2) \
    && ok scan_resume_rows || fail scan_resume_rows "$(grep -v '^\[' "$T/err" | tail -3; diff "$T/sub.csv" "$T/cut.csv" | head -4)"
cp "$T/full.png" "$T/full0.png"
"$BIN" scan -m "$M" -f "$T/text.txt" $W -o "$T/full.csv" > "$T/again.out" 2> "$T/err"
grep -q "$NB of the $NB blocks are there, 0 to run" "$T/err" && ! grep -q '^\[1/' "$T/err" \
    && ! grep -q '^identity:' "$T/err" && cmp -s "$T/full.out" "$T/again.out" && cmp -s "$T/full.png" "$T/full0.png" \
    && ok scan_resume_complete || fail scan_resume_complete "$(tail -3 "$T/err")"
# a wider range later: only the new blocks run
"$BIN" scan -m "$M" -f "$T/text.txt" $W --end 4 -o "$T/cut.csv" > /dev/null 2> "$T/err"
grep -q "$NS of the 10 blocks are there, 4 to run" "$T/err" \
    && cmp -s <(grep '^[0-9]' "$T/full.csv" | awk -F, '$2 <= 4' | cut -d, -f1-6 | sort) <(grep '^[0-9]' "$T/cut.csv" | cut -d, -f1-6 | sort) \
    && ok scan_resume_wider || fail scan_resume_wider "$(grep resuming "$T/err")"
# Ctrl-C: the blocks done stay in the file; the same command continues. The
# window is sized from the full scan's block times so that a block takes about
# 0.3 s whatever the model and build: the signal lands while blocks remain.
IC=$(awk -F, '/^[0-9]/ { s += $7; n++ } END { k = n && s > 0 ? int(0.3 / (s / n) * 2 + 1) : 16; print (k < 2 ? 2 : k > 16 ? 16 : k) }' "$T/full.csv")
"$BIN" scan -m "$M" -f "$T/text.txt" -c 64 --chunks "$IC" -t 1 $SUB -o "$T/int.csv" > /dev/null 2> "$T/int.err" &
pid=$!
for _ in $(seq 1 6000); do
    [ "$(grep -c '^[0-9]' "$T/int.csv" 2>/dev/null)" -ge 1 ] 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.02
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
have=$(grep -c '^[0-9]' "$T/int.csv" 2>/dev/null)
[ $rc -eq 130 ] && grep -q "interrupted; .*int.csv holds $have of the $NS blocks" "$T/int.err" && [ "$have" -lt "$NS" ] \
    && ok scan_interrupt || fail scan_interrupt "exit $rc, $have rows (--chunks $IC): $(tail -2 "$T/int.err")"
"$BIN" scan -m "$M" -f "$T/text.txt" -c 64 --chunks "$IC" -t 1 $SUB -o "$T/int.csv" > /dev/null 2> "$T/err"
[ $? -eq 0 ] && [ "$(grep -c '^[0-9]' "$T/int.csv")" = "$NS" ] && grep -q "resuming .*: $have of the $NS" "$T/err" \
    && [ -z "$(ls "$T" | grep 'int.csv.tmp')" ] && ok scan_interrupt_resume || fail scan_interrupt_resume "$(tail -2 "$T/err")"

# refusals of a file from other settings, naming the setting
expect_error scan_refuse_c "written for c '64'; this run has c '32'" "$BIN" scan -m "$M" -f "$T/text.txt" -c 32 --chunks 2 -o "$T/full.csv"
expect_error scan_refuse_text "written for text" "$BIN" scan -m "$M" -f "$T/other.txt" $W -o "$T/full.csv"
expect_error scan_refuse_metric "metric 'ppl'; this run has metric 'kld'" "$BIN" scan -m "$M" -f "$T/text.txt" $W --metric kld -o "$T/full.csv"
expect_error scan_refuse_cache "cache 'f16/f16'" "$BIN" scan -m "$M" -f "$T/text.txt" $W -ctk f32 -o "$T/full.csv"
expect_error scan_refuse_other_file "not a reprise scan CSV" "$BIN" scan -m "$M" -f "$T/text.txt" $W -o "$T/text.txt"

# kld: the block's KL divergence is reprise perplexity's
"$BIN" scan -m "$M" -f "$T/text.txt" $W --metric kld --start 1 --end 3 -o "$T/kld.csv" > "$T/kld.out" 2> "$T/err"
"$BIN" perplexity -m "$M" -f "$T/text.txt" $W --kl-divergence-base "$T/base.kld" > /dev/null 2>&1
"$BIN" perplexity -m "$M" $W --repeat-layers 1,3 --kl-divergence-base "$T/base.kld" --kl-divergence > "$T/kld.txt" 2>/dev/null
python3 - "$T/kld.csv" "$T/kld.txt" <<'PY' && ok scan_kld_metric || fail scan_kld_metric "$(cat "$T/kld.csv" | tail -3) $(grep 'Mean    KLD' "$T/kld.txt")"
import re, sys
rows = {(int(r[0]), int(r[1])): r for r in (l.split(',') for l in open(sys.argv[1]) if l[0].isdigit())}
assert set(rows) == {(1, 2), (1, 3), (2, 3)}, rows
assert all(r[3] == 'kld' and float(r[4]) > 0 and float(r[4]) == float(r[5]) for r in rows.values())
ref = float(re.search(r'Mean    KLD: +([0-9.]+)', open(sys.argv[2]).read()).group(1))
assert f'{float(rows[(1, 3)][4]):.6f}' == f'{ref:.6f}', (rows[(1, 3)][4], ref)
PY

# probes: free answers and multiple choice, scored by log-probability
cat > "$T/probes.jsonl" <<'EOF'
{"prompt": "Once upon a time, there was a little", "answer": " girl"}
{"prompt": "The cat sat on the", "choices": [" mat", " moon", " idea"], "answer": " mat"}
{"prompt": "Tom and Lily went to the", "choices": [" park", " sky"], "answer": 0}
EOF
"$BIN" scan -m "$M" --probes "$T/probes.jsonl" --max-extra 1 --end 4 -t 1 -o "$T/probe.csv" > "$T/probe.out" 2> "$T/err"
[ $? -eq 0 ] && [ "$(grep -c '^[0-9]*,[0-9]*,1,probe,' "$T/probe.csv")" = 4 ] && grep -q "^# probes: .*probes.jsonl" "$T/probe.csv" \
    && grep -q "^identity: probe -[0-9.]*, accuracy [0-9.]*%" "$T/err" && grep -q "higher = better" "$T/probe.out" \
    && grep -q "^scan: 3 probes: 2 multiple-choice, 1 free answers, 0 math, 0 EQ (6 log-likelihood sequences" "$T/err" \
    && ok scan_probe_metric || fail scan_probe_metric "$(tail -3 "$T/err") $(tail -2 "$T/probe.csv")"
printf '{"prompt": "a", "answer": " b"}\n{"prompt": "a", "choices": [" b"], "answer": 0}\n' > "$T/bad.jsonl"
expect_error scan_probe_bad_line "bad.jsonl:2: \"choices\" must be an array of 2 to 64" "$BIN" scan -m "$M" --probes "$T/bad.jsonl" -o "$T/bad.csv"
[ ! -e "$T/bad.csv" ] && ok scan_probe_bad_no_file || fail scan_probe_bad_no_file "a refused scan wrote a CSV"

# an architecture whose forward runs whole plans only: no reuse, same scan
Q="$S/models/synth/qwen35-tiny.gguf"
"$BIN" scan -m "$Q" -f "$T/text.txt" -c 16 --chunks 2 -t 1 --start 3 --end 6 --max-extra 1 -o "$T/q.csv" > /dev/null 2> "$T/err"
[ $? -eq 0 ] && grep -q "runs whole plans only: no prefix reuse" "$T/err" && [ "$(grep -c '^[0-9]' "$T/q.csv")" = 3 ] \
    && ok scan_no_ranges_arch || fail scan_no_ranges_arch "$(tail -2 "$T/err")"

# bad input
expect_error scan_bad_metric "'bogus' is not one of ppl, kld, probe" "$BIN" scan -m "$M" -f "$T/text.txt" --metric bogus
expect_error scan_probe_needs_file "needs --probes" "$BIN" scan -m "$M" --metric probe
expect_error scan_probe_and_text "-f goes with" "$BIN" scan -m "$M" -f "$T/text.txt" --probes "$T/probes.jsonl"
expect_error scan_no_text "no text" "$BIN" scan -m "$M"
expect_error scan_no_model "no model" "$BIN" scan -f "$T/text.txt"
expect_error scan_end_past "--end $((N + 4)): must satisfy 0 <= start < end <= $N" "$BIN" scan -m "$M" -f "$T/text.txt" $W --end $((N + 4)) -o "$T/x.csv"
expect_error scan_start_end "greater than --start" "$BIN" scan -m "$M" -f "$T/text.txt" --start 3 --end 3
expect_error scan_bad_extra "positive" "$BIN" scan -m "$M" -f "$T/text.txt" --max-extra -1
expect_error scan_no_plan_flags "unknown option '--repeat-layers'" "$BIN" scan -m "$M" -f "$T/text.txt" --repeat-layers 1,2
printf 'Once upon a time there was a cat.' > "$T/short.txt"
expect_error scan_short_text "two chunks' worth" "$BIN" scan -m "$M" -f "$T/short.txt" -c 128
"$BIN" scan --help > "$T/help.txt" && grep -q -- "--max-extra" "$T/help.txt" && grep -q -- "--no-reuse" "$T/help.txt" \
    && ok scan_help || fail scan_help "no help"
