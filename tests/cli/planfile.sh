# Plan files: reprise plan save/show/check/hash, --plan FILE where a spec is
# accepted, refusals of the wrong model (architecture, layer count, content
# hash) and --plan-force, malformed files, the content hash in files reprise
# writes and the cache beside other models. (Several plans in one server:
# tests/cli/serve.sh.)
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
Q="$S/models/synth/qwen3-tiny.gguf"
Q8="$S/models/synth/qwen3-tiny-Q8_0.gguf"
P="Once upon a time"

# ---- save, show, round trip
"$BIN" plan save -m "$M" --repeat-layers 1,3 --name rys-1-3 --description "layers 1 and 2 twice" -o "$T/rys.json" -q \
    2> "$T/err" && ok plan_save || fail plan_save "$(cat "$T/err")"
"$BIN" plan show "$T/rys.json" > "$T/show" 2>&1
grep -q "^plan: *rys-1-3$" "$T/show" && grep -q "^spec: *--repeat-layers 1,3$" "$T/show" \
    && grep -q "^eff->src: *0..2 | 1..4$" "$T/show" && grep -q "^steps: *7 on 5 layers" "$T/show" \
    && grep -q "^description: *layers 1 and 2 twice$" "$T/show" && grep -q "^content hash: *xxh3-128:[0-9a-f]\{32\}$" "$T/show" \
    && ok plan_show || fail plan_show "$(cat "$T/show")"
"$BIN" plan show --json "$T/rys.json" > "$T/again.json" && cmp -s "$T/rys.json" "$T/again.json" \
    && ok plan_show_json_round_trip || fail plan_show_json_round_trip "$(diff "$T/rys.json" "$T/again.json")"
python3 - "$T/rys.json" <<'PY' && ok plan_file_fields || fail plan_file_fields "unexpected JSON"
import json, sys
j = json.load(open(sys.argv[1]))
b = j["base_model"]
assert j["format"] == "reprise-plan" and j["version"] == 1 and j["name"] == "rys-1-3"
assert j["repeat_layers"] == "1,3" and j["n_eff"] == 7 and "layer_map" not in j
assert b["architecture"] == "llama" and b["n_layer"] == 5 and b["file"] == "stories260K.gguf"
assert b["content_hash"].startswith("xxh3-128:") and len(b["content_hash"]) == 41
PY
"$BIN" plan save -m "$M" --layer-map "0..4,2..4" --name deep -o "$T/deep.json" -q && ok plan_save_map || fail plan_save_map "exit $?"
expect_error plan_save_bad_name "not usable" "$BIN" plan save -m "$M" --repeat-layers 1,3 --name "a b" -o "$T/x.json"
expect_error plan_save_bad_spec "block 1 '4,9'" "$BIN" plan save -m "$M" --repeat-layers 4,9 --name a -o "$T/x.json"
expect_error plan_save_no_spec "no spec" "$BIN" plan save -m "$M" --name a -o "$T/x.json"
[ ! -e "$T/x.json" ] && ok plan_save_refusal_leaves_nothing || fail plan_save_refusal_leaves_nothing "file written"

# ---- --plan FILE gives exactly what the spec gives
for pair in "rys.json|rys-1-3|--repeat-layers 1,3" "deep.json|deep|--layer-map 0..4,2..4"; do
    f=${pair%%|*}; flags=${pair##*|}; name=${pair#*|}; name=${name%%|*}
    a=$("$BIN" run -m "$M" --plan "$T/$f" -p "$P" -n 40 --temp 0 -t 1 2> "$T/err")
    b=$("$BIN" run -m "$M" $flags -p "$P" -n 40 --temp 0 -t 1 2>/dev/null)
    [ -n "$a" ] && [ "$a" = "$b" ] && grep -q "plan: '$name' from" "$T/err" && ok "run_plan_file_${f%.json}" \
        || fail "run_plan_file_${f%.json}" "'$a' vs '$b': $(head -3 "$T/err")"
done
"$BIN" run -m "$M" --plan "$T/rys.json" --dump-plan 2>/dev/null | grep -q "5 -> 7 layers" && ok dump_plan_file || fail dump_plan_file "no plan"
"$BIN" inspect "$M" --plan "$T/rys.json" 2>/dev/null | grep -q "5 -> 7 layers" && ok inspect_plan_file || fail inspect_plan_file "no plan"
"$BIN" merge -m "$M" --plan "$T/rys.json" -o "$T/m1.gguf" -q && "$BIN" merge -m "$M" --repeat-layers 1,3 -o "$T/m2.gguf" -q \
    && cmp -s "$T/m1.gguf" "$T/m2.gguf" && ok merge_plan_file || fail merge_plan_file "merged files differ"
"$BIN" perplexity -m "$M" --plan "$T/rys.json" --dump-plan 2>&1 | grep -q "5 -> 7 layers" && ok perplexity_plan_file \
    || fail perplexity_plan_file "perplexity does not apply --plan"
expect_error plan_and_spec "alternatives" "$BIN" run -m "$M" --plan "$T/rys.json" --repeat-layers 1,3 -p hi -n 1

# ---- the wrong model: architecture, layer count, content hash
"$BIN" plan save -m "$Q" --repeat-layers 3,5 --name q-3-5 -o "$T/q.json" -q
"$BIN" synth --arch qwen3 --n-embd 128 --n-layer 6 --n-head 4 --n-head-kv 2 --n-ff 256 --vocab "$M" -o "$T/q6.gguf" 2>/dev/null
expect_error refuse_other_arch "architecture differs" "$BIN" run -m "$M" --plan "$T/q.json" -p "$P" -n 1
expect_error refuse_other_arch_forced "architecture differs" "$BIN" run -m "$M" --plan "$T/q.json" --plan-force -p "$P" -n 1
expect_error refuse_other_layers "layer count differs" "$BIN" run -m "$T/q6.gguf" --plan "$T/q.json" -p "$P" -n 1
expect_error refuse_other_layers_forced "layer count differs" "$BIN" run -m "$T/q6.gguf" --plan "$T/q.json" --plan-force -p "$P" -n 1
expect_error refuse_other_hash "content hash differs" "$BIN" run -m "$Q8" --plan "$T/q.json" -p "$P" -n 1
grep -q "plan-force applies it anyway" "$T/err" && ok refuse_other_hash_says_force || fail refuse_other_hash_says_force "$(cat "$T/err")"
a=$("$BIN" run -m "$Q8" --plan "$T/q.json" --plan-force -p "$P" -n 24 --temp 0 -t 1 -q 2> "$T/err" | od -An -tx1)
b=$("$BIN" run -m "$Q8" --repeat-layers 3,5 -p "$P" -n 24 --temp 0 -t 1 -q 2>/dev/null | od -An -tx1)
[ -n "$a" ] && [ "$a" = "$b" ] && grep -q "^warning: --plan-force: plan 'q-3-5'" "$T/err" && ok plan_force_other_quant \
    || fail plan_force_other_quant "'$a' vs '$b': $(cat "$T/err")"
"$BIN" plan check -m "$Q" "$T/q.json" > "$T/out" 2>&1 && grep -q "content hash matches" "$T/out" && ok plan_check_match \
    || fail plan_check_match "$(cat "$T/out")"
expect_error plan_check_other_hash "content hash differs" "$BIN" plan check -m "$Q8" "$T/q.json"
"$BIN" plan check -m "$Q8" "$T/q.json" --plan-force > "$T/out" 2>&1 && grep -q "accepted by --plan-force" "$T/out" \
    && ok plan_check_forced || fail plan_check_forced "$(cat "$T/out")"

# ---- malformed plan files name the JSON field
printf '{"format": "reprise-plan", "version": 1,' > "$T/bad1.json"
expect_error malformed_json "malformed JSON at line 1" "$BIN" run -m "$M" --plan "$T/bad1.json" -p "$P" -n 1
python3 - "$T/rys.json" "$T" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
def put(name, d):
    json.dump(d, open(sys.argv[2] + "/" + name, "w"))
d = json.loads(json.dumps(j)); d["base_model"]["n_layer"] = "5"; put("bad2.json", d)
d = json.loads(json.dumps(j)); d["repeat-layers"] = d.pop("repeat_layers"); put("bad3.json", d)
d = json.loads(json.dumps(j)); d["base_model"]["content_hash"] = "sha256:00"; put("bad4.json", d)
d = json.loads(json.dumps(j)); d["version"] = 2; put("bad5.json", d)
d = json.loads(json.dumps(j)); d["n_eff"] = 9; put("bad6.json", d)
PY
expect_error malformed_field_type "field 'base_model.n_layer' must be an integer, got a string" "$BIN" run -m "$M" --plan "$T/bad2.json" -p "$P" -n 1
expect_error malformed_unknown_field "unknown field 'repeat-layers'" "$BIN" run -m "$M" --plan "$T/bad3.json" -p "$P" -n 1
expect_error malformed_hash "field 'base_model.content_hash'" "$BIN" plan show "$T/bad4.json"
expect_error malformed_version "reads version 1" "$BIN" plan show "$T/bad5.json"
expect_error malformed_n_eff "field 'n_eff' is 9" "$BIN" plan show "$T/bad6.json"
expect_error missing_plan_file "cannot open plan file" "$BIN" run -m "$M" --plan "$T/none.json" -p "$P" -n 1

# ---- content hashes: stamped by reprise's writers, cached beside other models
"$BIN" plan hash "$T/q6.gguf" > "$T/h1" && h=$("$BIN" plan hash --recompute "$T/q6.gguf") \
    && grep -q "(metadata)" "$T/h1" && [ "$(cut -d' ' -f1 "$T/h1")" = "${h%% *}" ] && ok hash_synth_stamped \
    || fail hash_synth_stamped "$(cat "$T/h1") / $h"
"$BIN" merge -m "$T/q6.gguf" --repeat-layers 2,4 -o "$T/q6m.gguf" -q
"$BIN" plan hash "$T/q6m.gguf" > "$T/h2" && h=$("$BIN" plan hash --recompute "$T/q6m.gguf") \
    && grep -q "(metadata)" "$T/h2" && [ "$(cut -d' ' -f1 "$T/h2")" = "${h%% *}" ] \
    && [ "$(cut -d' ' -f1 "$T/h1")" != "${h%% *}" ] && ok hash_merge_stamped || fail hash_merge_stamped "$(cat "$T/h2") / $h"
# quantize stamps the new weights' hash (not the stamp of the input it copies)
"$BIN" quantize "$T/q6.gguf" "$T/q6q8.gguf" Q8_0 > /dev/null 2>&1
"$BIN" plan hash "$T/q6q8.gguf" > "$T/h2q" && h=$("$BIN" plan hash --recompute "$T/q6q8.gguf") \
    && grep -q "(metadata)" "$T/h2q" && [ "$(cut -d' ' -f1 "$T/h2q")" = "${h%% *}" ] \
    && [ "$(cut -d' ' -f1 "$T/h1")" != "${h%% *}" ] && ok hash_quantize_stamped || fail hash_quantize_stamped "$(cat "$T/h2q") / $h"
cp "$M" "$T/copy.gguf"
"$BIN" plan hash "$T/copy.gguf" > "$T/h3" && "$BIN" plan hash "$T/copy.gguf" > "$T/h4" \
    && grep -q "(computed, cached in $T/copy.gguf.rphash)" "$T/h3" && grep -q "(cache)" "$T/h4" \
    && [ -f "$T/copy.gguf.rphash" ] && ok hash_cache_beside || fail hash_cache_beside "$(cat "$T/h3" "$T/h4")"
"$BIN" plan hash "$M" > "$T/h5" 2>&1
[ "$(cut -d' ' -f1 "$T/h5")" = "$(cut -d' ' -f1 "$T/h3")" ] && ok hash_same_weights_same_hash || fail hash_same_weights_same_hash "$(cat "$T/h3" "$T/h5")"
# a copy of the model with a renamed general.name keeps the weights' identity: the plan applies
python3 - "$T/copy.gguf" "$T/renamed.gguf" <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
old = b'\x0c\x00\x00\x00\x00\x00\x00\x00general.name\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00llama'
assert old in b, "general.name not found"
open(sys.argv[2], "wb").write(b.replace(old, old[:-5] + b"LLAMA"))
PY
"$BIN" plan check -m "$T/renamed.gguf" "$T/rys.json" > "$T/out" 2>&1 && ok renamed_model_same_identity || fail renamed_model_same_identity "$(cat "$T/out")"
