# --dump-tensors / REPRISE_TRACE (the trace hook's files) and reprise compare.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
run() { "$BIN" run -m "$M" --tokens 1,403,407,261,378 -ctk f32 -ctv f32 -q "$@"; }

run --dump-logits "$T/a.f32" --dump-tensors "$T/tr" > /dev/null 2> "$T/err"
n=$(($(wc -l < "$T/tr/index.tsv") - 1))
# 5 layers x 13 tensors + inp_embd + result_norm + result_output
[ "$n" = 68 ] && ok trace_index_lines || fail trace_index_lines "$n tensors: $(head -c 200 "$T/err")"
line=$(grep -P '^\d+\tattn_norm\t2\t' "$T/tr/index.tsv")
f=$(echo "$line" | cut -f8)
[ "$(echo "$line" | cut -f5,6,7)" = "$(printf '5\t64\t0,1,2,3,4')" ] && [ "$(stat -c %s "$T/tr/$f")" = $((5 * 64 * 4)) ] \
    && ok trace_tensor_file || fail trace_tensor_file "line '$line'"
f=$(grep -P '\tresult_output\t' "$T/tr/index.tsv" | cut -f8)
cmp -s "$T/tr/$f" "$T/a.f32" && ok trace_result_is_logits || fail trace_result_is_logits "result_output != --dump-logits"

REPRISE_TRACE="$T/tr2" run --dump-logits "$T/b.f32" > /dev/null 2>&1
"$BIN" compare --trace "$T/tr2" "$T/tr" > "$T/out" 2>&1
[ $? = 0 ] && grep -q "every tensor the same" "$T/out" && ok trace_env_same || fail trace_env_same "$(tail -2 "$T/out")"

"$BIN" compare -m "$M" "$T/b.f32" "$T/a.f32" > "$T/out" 2>&1
grep -q "identical: every position bit for bit" "$T/out" && grep -q "top1_agreement 100.00% (5 of 5)" "$T/out" \
    && ok compare_identical || fail compare_identical "$(cat "$T/out")"

# one logit of position 3 changed: the first position that differs is 3; past
# --max-nmse the exit status is 1
python3 - "$T/a.f32" "$T/c.f32" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
i = (3 * 512 + 7) * 4
v = struct.unpack_from("<f", b, i)[0]
struct.pack_into("<f", b, i, v + 5.0)
open(sys.argv[2], "wb").write(b)
PY
"$BIN" compare --n-vocab 512 --max-nmse 1e-6 "$T/c.f32" "$T/a.f32" > "$T/out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "first position that differs: 3" "$T/out" && grep -q "max_abs_diff 5 (position 3)" "$T/out" \
    && ok compare_first_position || fail compare_first_position "rc $rc: $(cat "$T/out")"
# a changed tensor file: compare --trace names it (and nothing before it)
f=$(grep -P '\tffn_up\t3\t' "$T/tr2/index.tsv" | cut -f8)
python3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[100]^=1; open(p,'wb').write(b)" "$T/tr2/$f"
"$BIN" compare --trace "$T/tr2" "$T/tr" > "$T/out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "^ffn_up  *step   3:.*<- differs" "$T/out" && [ "$(grep -c "<- differs" "$T/out")" = 1 ] \
    && ok compare_trace_first_tensor || fail compare_trace_first_tensor "rc $rc: $(cat "$T/out")"

expect_error compare_sizes "not the same rows" "$BIN" compare --n-vocab 512 "$T/a.f32" "$T/tr/$(ls "$T/tr" | head -1)"
expect_error compare_no_vocab "n-vocab" "$BIN" compare "$T/a.f32" "$T/a.f32"
expect_error dump_tensors_bad_dir "cannot create" run --dump-tensors /nonexistent/dir/x
