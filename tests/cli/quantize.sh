# reprise quantize: llama.cpp-identical tensors, every listed type, mixtures,
# overrides, fallbacks, adapters, dry runs, errors; reprise bench output.
. "$(dirname "$0")/_lib.sh"
F32="$S/models/synth/qwen3-tiny.gguf"

# GGUF tensor table and data, compared tensor by tensor (types and bytes)
cat > "$T/gguf_cmp.py" <<'PY'
import struct, sys
def read(path):
    d = open(path, 'rb').read(); o = 4
    def u(f):
        nonlocal o; v = struct.unpack_from('<' + f, d, o)[0]; o += struct.calcsize('<' + f); return v
    def s():
        nonlocal o; n = u('Q'); v = d[o:o + n].decode(); o += n; return v
    size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def val(t):
        nonlocal o
        if t == 8: return s()
        if t == 9:
            et = u('I'); return [val(et) for _ in range(u('Q'))]
        v = d[o:o + size[t]]; o += size[t]; return v
    u('I'); nt = u('Q'); nkv = u('Q'); align = 32
    for _ in range(nkv):
        k = s(); v = val(u('I'))
        if k == 'general.alignment': align = struct.unpack('<I', v)[0]
    ts = []
    for _ in range(nt):
        name = s(); nd = u('I'); ne = [u('Q') for _ in range(nd)]; ts.append((name, u('I'), u('Q')))
    base = (o + align - 1) // align * align
    offs = sorted(t[2] for t in ts) + [len(d) - base]
    return {n: (t, d[base + off: base + offs[offs.index(off) + 1]]) for n, t, off in ts}
a, b = read(sys.argv[1]), read(sys.argv[2])
bad = [n for n in a if n not in b or a[n][0] != b[n][0] or a[n][1][:len(b[n][1])] != b[n][1][:len(a[n][1])]]
print('%d tensors, %d differ %s' % (len(a), len(bad), ' '.join(bad[:5])))
sys.exit(1 if bad or len(a) != len(b) else 0)
PY

# from the same F32 source, llama.cpp's files and ours hold the same tensors
for t in Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K; do
    "$BIN" quantize "$F32" "$T/q-$t.gguf" "$t" > /dev/null 2> "$T/err"
    if python3 "$T/gguf_cmp.py" "$T/q-$t.gguf" "$S/models/synth/qwen3-tiny-$t.gguf" > "$T/cmp"; then
        ok "quantize_same_as_llama_$t"
    else
        fail "quantize_same_as_llama_$t" "$(cat "$T/cmp" "$T/err" | head -c 300)"
    fi
done

# every listed type writes a file that loads and runs (a 2-layer model keeps this quick)
"$BIN" synth --arch qwen3 --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 --n-ff 512 --tied -o "$T/small.gguf" 2> /dev/null
n_bad=""
for t in Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS F16 BF16 F32; do
    "$BIN" quantize "$T/small.gguf" "$T/all.gguf" "$t" > /dev/null 2> "$T/err" &&
        "$BIN" run -m "$T/all.gguf" --tokens 1,50,60,70 --dump-logits "$T/l.f32" -ctk f32 -ctv f32 > /dev/null 2>> "$T/err" &&
        [ "$(stat -c %s "$T/l.f32")" = 8192 ] || n_bad="$n_bad $t"
done
[ -z "$n_bad" ] && ok quantize_every_type || fail quantize_every_type "failed:$n_bad $(head -c 300 "$T/err")"

# the mixture: attn_v and ffn_down of layers 0, 3, 6, 7 (the "more bits" layers of 8) and the tied embedding in Q6_K
"$BIN" quantize "$F32" Q4_K_M --dry-run > "$T/plan" 2> /dev/null
miss=""
for pair in blk.0.attn_v.weight:q6_K blk.1.attn_v.weight:q4_K blk.3.ffn_down.weight:q6_K blk.4.ffn_down.weight:q4_K \
    blk.7.attn_v.weight:q6_K token_embd.weight:q6_K blk.2.ffn_up.weight:q4_K output_norm.weight:f32; do
    grep -q "^${pair%%:*} .* -> ${pair##*:} " "$T/plan" || miss="$miss $pair"
done
[ -z "$miss" ] && grep -q "MiB -> .* MiB (Q4_K_M)" "$T/plan" && ok quantize_dry_run_mixture || fail quantize_dry_run_mixture "missing$miss"
[ ! -e "$T/Q4_K_M" ] && ok quantize_dry_run_writes_nothing || fail quantize_dry_run_writes_nothing "wrote a file"

# --pure: one type everywhere; --tensor-type wins over the mixture
"$BIN" quantize "$F32" Q4_K_M --dry-run --pure > "$T/plan" 2> /dev/null
n=$(grep -c -E ' -> q6_K' "$T/plan")
[ "$n" = 0 ] && grep -q 'token_embd.weight .* -> q4_K' "$T/plan" && ok quantize_pure || fail quantize_pure "$n q6_K tensors"
"$BIN" quantize "$F32" Q4_K_M --dry-run --tensor-type 'attn_(q|k)\.weight$=q8_0' --tensor-type 'ffn_down=Q5_K' > "$T/plan" 2> /dev/null
nq=$(grep -c -E 'attn_[qk]\.weight .* -> q8_0' "$T/plan"); nd=$(grep -c 'ffn_down.weight .* -> q5_K' "$T/plan")
[ "$nq" = 16 ] && [ "$nd" = 8 ] && ok quantize_tensor_type || fail quantize_tensor_type "attn_q/k q8_0: $nq, ffn_down q5_K: $nd"

# rows that do not divide into blocks fall back, and the tool says so
"$BIN" synth --arch llama --n-embd 96 --n-layer 2 --n-head 4 --n-ff 160 -o "$T/odd.gguf" 2> /dev/null
"$BIN" quantize "$T/odd.gguf" "$T/odd-q4k.gguf" Q4_K_M > /dev/null 2> "$T/err"
grep -q "blk.1.ffn_down.weight has rows of 160, not a multiple of q6_K.s 256: using q8_0" "$T/err" &&
    grep -q "blk.0.ffn_down.weight has rows of 160, not a multiple of q4_K.s 256: using q5_0" "$T/err" &&
    grep -q "blk.0.attn_q.weight has rows of 96, not a multiple of q4_K's 256: using q5_0" "$T/err" &&
    "$BIN" run -m "$T/odd-q4k.gguf" -p "Once" -n 2 > /dev/null 2>&1 && ok quantize_fallback || fail quantize_fallback "$(head -c 300 "$T/err")"

# adapters stay F16 unless --pure (where rank-8 rows fall back to F16 anyway) or --tensor-type names them
"$BIN" synth --arch zamba2 --n-embd 64 --n-layer 6 --n-head 4 --n-ff 256 --adapter-rank 8 -o "$T/z.gguf" 2> /dev/null
"$BIN" quantize "$T/z.gguf" Q8_0 --dry-run > "$T/plan" 2> /dev/null
"$BIN" quantize "$T/z.gguf" Q8_0 --dry-run --pure > "$T/plan2" 2> /dev/null
"$BIN" quantize "$T/z.gguf" Q8_0 --dry-run --tensor-type 'adapter_a=q8_0' > "$T/plan3" 2> /dev/null
if grep -q 'ffn_gate_up_adapter_a.weight .* -> f16' "$T/plan" && grep -q 'ffn_gate_up_adapter_a.weight .* -> q8_0' "$T/plan2" &&
    grep -q 'ffn_gate_up_adapter_a.weight .* -> q8_0' "$T/plan3" && grep -q 'ffn_gate_up_adapter_b.weight .* -> f16' "$T/plan3"; then
    ok quantize_adapters_f16
else
    fail quantize_adapters_f16 "$(grep adapter "$T/plan" "$T/plan2" | head -4)"
fi

# errors name the problem; a failed write leaves nothing
expect_error quantize_unknown_type "unknown type 'Q9_9'" "$BIN" quantize "$F32" "$T/x.gguf" Q9_9
expect_error quantize_bad_regex "bad regular expression" "$BIN" quantize "$F32" "$T/x.gguf" Q8_0 --tensor-type '(=q8_0'
expect_error quantize_bad_override "not a type reprise can write" "$BIN" quantize "$F32" "$T/x.gguf" Q8_0 --tensor-type 'attn=iq2_xxs'
expect_error quantize_requant "is already q6_K: quantizing it again" "$BIN" quantize "$S/models/synth/qwen3-tiny-Q4_K_M.gguf" "$T/x.gguf" Q8_0
expect_error quantize_missing_input "cannot open" "$BIN" quantize "$T/none.gguf" "$T/x.gguf" Q8_0
expect_error quantize_unwritable "$T/no/dir/x.gguf" "$BIN" quantize "$F32" "$T/no/dir/x.gguf" Q8_0
[ -z "$(ls "$T"/x.gguf* 2> /dev/null)" ] && ok quantize_leaves_nothing || fail quantize_leaves_nothing "$(ls "$T"/x.gguf*)"
"$BIN" quantize "$S/models/synth/qwen3-tiny-Q8_0.gguf" "$T/rq.gguf" Q4_0 --allow-requantize > /dev/null 2>&1 &&
    "$BIN" run -m "$T/rq.gguf" -p "Once" -n 2 > /dev/null 2>&1 && ok quantize_allow_requantize || fail quantize_allow_requantize "exit $?"

# bench: a llama-bench style table with both tests, and the bandwidth probe
"$BIN" bench -m "$T/q-Q4_K_M.gguf" -p 16 -n 4 -r 2 -t 2 > "$T/bench" 2> /dev/null
grep -q '| *model *| *size *| *params *| *plan *| *layers *| *threads *| *type_k *| *type_v *| *test *| *t/s *|' "$T/bench" &&
    grep -q '| *qwen3 [0-9.]*M q4_K+ .*| *identity *| *8 | *2 | *f16 | *f16 | *pp16 | *[0-9.]* ± [0-9.]* |' "$T/bench" &&
    grep -q '| *tg4 |' "$T/bench" && ok bench_table || fail bench_table "$(cat "$T/bench" | head -c 400)"
"$BIN" bench -m "$T/q-Q4_K_M.gguf" -p 16 -n 0 -r 1 --repeat-layers 3,5 > "$T/bench" 2> /dev/null
grep -q '| *repeat 3,5 *| *10 |.*| *pp16 |' "$T/bench" && ok bench_repeat_layers || fail bench_repeat_layers "$(cat "$T/bench" | head -c 300)"
"$BIN" bench --bandwidth --bandwidth-mib 64 -t 1 > "$T/bw" 2> /dev/null
grep -q '^bandwidth: [0-9.]* GB/s read, 1 threads' "$T/bw" && ok bench_bandwidth || fail bench_bandwidth "$(cat "$T/bw")"
expect_error bench_no_model "no model given" "$BIN" bench -p 8
