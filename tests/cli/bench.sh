# reprise bench speaks llama-bench: comma lists of -p -n -t -ctk -ctv -d, -pg,
# -r, -o md|csv|json, the plan column, the bandwidth probe around each row.
# Only the shape of the report is checked here, never a timing.
. "$(dirname "$0")/_lib.sh"
Q="$S/models/synth/qwen3-tiny.gguf"
B=("$BIN" bench -m "$Q" -q -r 2)

# csv: every combination of -t and -ctk runs every test, in llama-bench's order
"${B[@]}" -p 8,16 -n 4 -pg 8,2 -t 1,2 -ctk f16,q8_0 -d 0,8 --no-probe -o csv > "$T/c" 2> "$T/err"
head -1 "$T/c" | grep -q '^model_filename,model_type,model_size,model_n_params,plan,n_eff,n_batch,n_threads,type_k,type_v,n_prompt,n_gen,n_depth,test,avg_ns,stddev_ns,avg_ts,stddev_ts,samples_ts,bw_before_gbs,bw_after_gbs$' &&
    ok bench_csv_header || fail bench_csv_header "$(head -c 300 "$T/c") $(tail -1 "$T/err")"
rows=$(tail -n +2 "$T/c" | wc -l)
[ "$rows" -eq 32 ] && ok bench_csv_rows || fail bench_csv_rows "$rows rows, want 2 threads x 2 types x 2 depths x 4 tests = 32"
order=$(tail -n +2 "$T/c" | head -8 | awk -F, '{printf "%s/%s/%s;", $8, $9, $14}')
[ "$order" = "1/f16/pp8;1/f16/pp16;1/f16/tg4;1/f16/pp8+tg2;1/f16/pp8 @ d8;1/f16/pp16 @ d8;1/f16/tg4 @ d8;1/f16/pp8+tg2 @ d8;" ] &&
    ok bench_csv_order || fail bench_csv_order "$order"
tail -1 "$T/c" | grep -q '^[^,]*,qwen3 [0-9.]*M f32,[0-9]*,[0-9]*,identity,8,16,2,q8_0,f16,8,2,8,pp8+tg2 @ d8,[0-9]*,[0-9]*,[0-9.]*,[0-9.]*,"[0-9.]* [0-9.]*",0.00,0.00$' &&
    ok bench_csv_row || fail bench_csv_row "$(tail -1 "$T/c")"

# json: an array of objects with the same fields; the bandwidth probed
"${B[@]}" -p 8 -n 0 -ctv q4_0 --repeat-layers 2,4 --probe-mib 16 -o json > "$T/j" 2> "$T/err"
if command -v python3 > /dev/null; then
    python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
r = rows[0]
assert len(rows) == 1 and r["test"] == "pp8" and r["n_prompt"] == 8 and r["n_gen"] == 0
assert r["plan"] == "repeat 2,4" and r["n_eff"] == 10 and r["type_v"] == "q4_0" and r["type_k"] == "f16"
assert len(r["samples_ts"]) == 2 and r["avg_ts"] > 0 and r["bw_before_gbs"] > 0 and r["bw_after_gbs"] > 0
' "$T/j" && ok bench_json || fail bench_json "$(head -c 400 "$T/j") $(tail -1 "$T/err")"
else
    grep -q '"plan": "repeat 2,4", "n_eff": 10' "$T/j" && grep -q '"samples_ts": \[[0-9.]*, [0-9.]*\]' "$T/j" &&
        ok bench_json || fail bench_json "$(head -c 400 "$T/j")"
fi

# md: the plan column, the depth in the test name, the probe's readings
"${B[@]}" -p 0 -n 4 -d 8 -ctk q8_0 --probe-mib 16 > "$T/m" 2> "$T/err"
grep -q '| *plan *| *layers *| *threads *| *type_k *| *type_v *| *test *| *t/s *| *GB/s pre/post *|' "$T/m" &&
    grep -q '| *identity *| *8 |.*| *q8_0 | *f16 | *tg4 @ d8 | *[0-9.]* ± [0-9.]* | *[0-9.]* / [0-9.]* |' "$T/m" &&
    ok bench_md || fail bench_md "$(cat "$T/m" | head -c 600)"

# refusals name the flag and the value
expect_error bench_bad_list "\-p: 'x' in '8,x' is not an integer" "${B[@]}" -p 8,x
expect_error bench_bad_type "\-ctk: 'q4_K' in 'f16,q4_K' is not a KV cache type" "${B[@]}" -ctk f16,q4_K
expect_error bench_bad_pg "\-pg: '8' is not PP,TG" "${B[@]}" -pg 8
expect_error bench_bad_fmt "\-o: 'xml' is not md, csv or json" "${B[@]}" -o xml
expect_error bench_bad_threads "\-t: '0' in '1,0' is not an integer in 1..512" "${B[@]}" -t 1,0
