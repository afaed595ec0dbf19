# The tools on a Vulkan device (Mesa's lavapipe when the environment names no
# driver): --list-devices, -ngl / -dev and their refusals, the boot log,
# generation and perplexity / KLD against the CPU (within 0.05 %), bench's
# per-token dispatches and bytes, and a server with --parallel 4 answering
# 4 concurrent greedy requests as the CPU's does. Short runs: lavapipe is slow.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ]; then
    for f in /usr/share/vulkan/icd.d/lvp_icd.x86_64.json /usr/share/vulkan/icd.d/lvp_icd.aarch64.json; do
        [ -r "$f" ] && export VK_ICD_FILENAMES="$f" VK_DRIVER_FILES="$f" && break
    done
fi

# ---- devices and flags
"$BIN" run --list-devices > "$T/list" 2> "$T/err"
if grep -q "^  cpu " "$T/list" && grep -q "^  vulkan0 .*MiB" "$T/list"; then ok device_list
else fail device_list "$(cat "$T/list" "$T/err" | head -c 400)"; fi
for cmd in chat serve perplexity scan bench; do
    "$BIN" $cmd --list-devices > "$T/l2" 2>&1 && grep -q "vulkan0" "$T/l2" && ok "device_list_$cmd" \
        || fail "device_list_$cmd" "$(head -c 300 "$T/l2")"
done
VK_ICD_FILENAMES=/nonexistent.json VK_DRIVER_FILES=/nonexistent.json "$BIN" run --list-devices > "$T/l3" 2>&1
grep -q "mesa-vulkan-drivers" "$T/l3" && ok device_list_no_driver || fail device_list_no_driver "$(cat "$T/l3")"
expect_error device_no_driver "mesa-vulkan-drivers" env VK_ICD_FILENAMES=/nonexistent.json \
    VK_DRIVER_FILES=/nonexistent.json "$BIN" run -m "$M" -p hi -n 1 -dev vulkan0
expect_error device_ngl_partial "partial offload is not supported yet.*-ngl 5 or more" \
    "$BIN" run -m "$M" -p hi -n 1 -ngl 2
expect_error device_ngl0_dev "-ngl 0 runs on the CPU" "$BIN" run -m "$M" -p hi -n 1 -ngl 0 -dev vulkan0
expect_error device_unknown "device 'tpu0': unknown" "$BIN" run -m "$M" -p hi -n 1 -dev tpu0
"$BIN" run -m "$S/models/synth/qwen35-tiny.gguf" -p hi -n 1 -ngl 99 > /dev/null 2> "$T/err"
grep -q "qwen35 forward runs on the CPU only" "$T/err" && ok device_qwen35_refused \
    || fail device_qwen35_refused "$(head -c 300 "$T/err")"

# ---- generation: the boot log, the CPU's greedy tokens
"$BIN" run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 1 > "$T/cpu.txt" 2> /dev/null
"$BIN" run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 1 -ngl 99 > "$T/dev.txt" 2> "$T/dev.err"
if [ -s "$T/cpu.txt" ] && cmp -s "$T/cpu.txt" "$T/dev.txt"; then ok device_run_greedy
else fail device_run_greedy "cpu '$(head -c 200 "$T/cpu.txt")' device '$(head -c 200 "$T/dev.txt")' $(tail -2 "$T/dev.err")"; fi
if grep -q "^device: vulkan0 (.*MiB of memory" "$T/dev.err" &&
    grep -q "on the device: weights .* MiB (.* tensors, each once) + state .* MiB (5 steps x 1 sequences" "$T/dev.err"; then
    ok device_boot_log
else fail device_boot_log "$(grep -i device "$T/dev.err" | head -3)"; fi
"$BIN" run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 1 --repeat-layers 1,3 -dev vulkan0 \
    > "$T/rys.txt" 2> "$T/rys.err"
"$BIN" run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 1 --repeat-layers 1,3 > "$T/rysc.txt" 2> /dev/null
cmp -s "$T/rys.txt" "$T/rysc.txt" && grep -q "(7 steps x 1 sequences" "$T/rys.err" && ok device_run_rys \
    || fail device_run_rys "$(head -c 200 "$T/rys.txt") / $(head -c 200 "$T/rysc.txt")"

# ---- perplexity and KLD within 0.05 % of the CPU's
head -c 6000 "$S/text/war-and-peace.txt" > "$T/text.txt"
P="-f $T/text.txt -c 128 --chunks 4 -t 1"
"$BIN" perplexity -m "$M" $P --kl-divergence-base "$T/base.kld" > "$T/ppl_cpu.txt" 2> /dev/null
"$BIN" perplexity -m "$M" $P -ngl 99 > "$T/ppl_dev.txt" 2> "$T/ppl.err"
"$BIN" perplexity -m "$M" $P --kl-divergence-base "$T/base.kld" --kl-divergence --repeat-layers 1,3 \
    > "$T/kld_cpu.txt" 2> /dev/null
"$BIN" perplexity -m "$M" $P --kl-divergence-base "$T/base.kld" --kl-divergence --repeat-layers 1,3 \
    -ngl 99 > "$T/kld_dev.txt" 2> "$T/kld.err"
python3 - "$T" <<'PY' && ok device_perplexity_kld || fail device_perplexity_kld "$(tail -n 3 "$T/ppl.err" "$T/kld.err")"
import re, sys
d = sys.argv[1]
ppl = lambda f: float(re.search(r'Final estimate: PPL = ([0-9.]+)', open(f).read()).group(1))
kld = lambda f: float(re.search(r'Mean +KLD: +([0-9.]+)', open(f).read()).group(1))
a, b = ppl(d + '/ppl_cpu.txt'), ppl(d + '/ppl_dev.txt')
assert abs(a - b) <= 5e-4 * a, ('ppl', a, b)
a, b = kld(d + '/kld_cpu.txt'), kld(d + '/kld_dev.txt')
assert a > 0 and abs(a - b) <= 5e-4 * a, ('kld', a, b)
print("     ppl and kld on the device within 0.05 % of the CPU", file=sys.stderr)
PY

# ---- bench: pp/tg and the device's work per token
"$BIN" bench -m "$M" -p 16 -n 4 -r 1 -t 1 -dev vulkan0 > "$T/bench.txt" 2> "$T/bench.err"
if grep -q "pp16" "$T/bench.txt" && grep -q "tg4" "$T/bench.txt" &&
    grep -q "^tg4 on vulkan0, per token:" "$T/bench.txt" && grep -q "^matmul .*[0-9]" "$T/bench.txt" &&
    grep -q "dispatches *bytes read" "$T/bench.txt"; then ok device_bench
else fail device_bench "$(head -c 600 "$T/bench.txt") $(tail -2 "$T/bench.err")"; fi

# ---- a server with 4 slots: 4 concurrent greedy requests, the CPU's answers
serve_answers() { # NAME ARGS...: the 4 answers into $T/NAME.ans
    local name=$1; shift
    "$BIN" serve -m "$M" --port 0 -t 1 -np 4 -c 256 -b 32 "$@" > "$T/$name.out" 2> "$T/$name.err" &
    local pid=$! port=""
    for _ in $(seq 1 600); do
        port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/$name.err" 2>/dev/null | grep -o '[0-9]*$')
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; return 1; fi
    local i cpids=()
    for i in 0 1 2 3; do
        curl -s -m 300 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
            -d "{\"prompt\": \"Once upon a time $i\", \"max_tokens\": 12, \"temperature\": 0}" \
            > "$T/$name.$i.json" &
        cpids+=($!)
    done
    wait "${cpids[@]}" 2>/dev/null
    for i in 0 1 2 3; do
        python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' \
            "$T/$name.$i.json" 2>/dev/null || echo "(no answer)"
    done > "$T/$name.ans"
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}
if serve_answers scpu && serve_answers sdev -ngl 99; then
    if ! grep -q "no answer" "$T/scpu.ans" && cmp -s "$T/scpu.ans" "$T/sdev.ans" &&
        grep -q "device: vulkan0" "$T/sdev.err"; then
        ok device_serve_parallel4
    else fail device_serve_parallel4 "cpu: $(tr '\n' '|' < "$T/scpu.ans") device: $(tr '\n' '|' < "$T/sdev.ans")"; fi
else
    fail device_serve_parallel4 "a server did not start: $(tail -n 2 "$T/scpu.err" "$T/sdev.err")"
fi
