# Hardening (issue 22): outputs that must not be replaced, inputs that must not
# hang or exhaust memory, signals that must not leave temporary files, values
# that must be refused. Each check fails on the code before the fix.
. "$(dirname "$0")/_lib.sh"
Q="$S/models/synth/qwen3-tiny.gguf"
M="$S/models/stories260K.gguf"

# ---- outputs -----------------------------------------------------------------
cp "$Q" "$T/in.gguf"; chmod u+w "$T/in.gguf"
expect_error quantize_in_is_out "input of this command" "$BIN" quantize "$T/in.gguf" "$T/in.gguf" Q8_0
cmp -s "$Q" "$T/in.gguf" && ok quantize_in_is_out_untouched || fail quantize_in_is_out_untouched "the input changed"
ln -s in.gguf "$T/alias.gguf"
expect_error quantize_in_is_out_via_link "input of this command" "$BIN" quantize "$T/in.gguf" "$T/alias.gguf" Q8_0
expect_exit quantize_in_is_out_forced 0 "$BIN" quantize "$T/in.gguf" "$T/in.gguf" Q8_0 --force
expect_error gguf_copy_in_is_out "input of this command" "$BIN" gguf-copy "$M" "$M"
expect_error merge_in_is_out "an input of this command" "$BIN" merge -m "$T/in.gguf" --repeat-layers 0-1 -o "$T/in.gguf"

# a symbolic link output writes its target, which keeps its mode
cp "$M" "$T/target.gguf"; chmod 0640 "$T/target.gguf"; ln -s target.gguf "$T/link.gguf"
"$BIN" gguf-copy "$Q" "$T/link.gguf" 2> "$T/err"
if [ -L "$T/link.gguf" ] && cmp -s "$Q" "$T/target.gguf" && [ "$(stat -c %a "$T/target.gguf")" = 640 ]; then
    ok output_symlink_target_written
else
    fail output_symlink_target_written "link kept: $([ -L "$T/link.gguf" ] && echo yes || echo no), mode $(stat -c %a "$T/target.gguf"): $(cat "$T/err")"
fi
cp "$M" "$T/ro.gguf"; chmod 0444 "$T/ro.gguf"
expect_error output_read_only_refused "read-only" "$BIN" gguf-copy "$Q" "$T/ro.gguf"
mkfifo "$T/out.fifo"
expect_error output_fifo_refused "FIFO" "$BIN" quantize "$M" "$T/out.fifo" Q8_0
[ -p "$T/out.fifo" ] && ok output_fifo_kept || fail output_fifo_kept "the FIFO was replaced"
# a character device is written through (root could otherwise replace /dev/null)
expect_exit output_dev_null 0 "$BIN" quantize "$M" /dev/null Q8_0
[ -c /dev/null ] && ok output_dev_null_kept || fail output_dev_null_kept "/dev/null is no longer a device"

# SIGINT / SIGTERM / SIGHUP during a write leave no temporary file
for sig in INT TERM HUP; do
    rm -f "$T"/sig.gguf*
    "$BIN" quantize -t 1 "$Q" "$T/sig.gguf" IQ4_XS 2> /dev/null &
    pid=$!
    for _ in $(seq 500); do compgen -G "$T/sig.gguf.tmp.*" > /dev/null && break; sleep 0.01; done
    seen=$(compgen -G "$T/sig.gguf.tmp.*" > /dev/null && echo yes || echo no)
    kill -"$sig" "$pid"; wait "$pid" 2> /dev/null
    left=$(ls "$T" | grep -c 'sig.gguf')
    if [ "$seen" = yes ] && [ "$left" -eq 0 ]; then ok "quantize_sig${sig}_no_temp"; else fail "quantize_sig${sig}_no_temp" "temp seen: $seen, left: $(ls "$T" | grep sig.gguf)"; fi
done

# ---- inputs ------------------------------------------------------------------
mkfifo "$T/model.fifo"
expect_error model_fifo_refused "FIFO" timeout 10 "$BIN" run -m "$T/model.fifo" -p hi -n 1
cp "$M" "$T/m.gguf"; chmod u+w "$T/m.gguf"; mkfifo "$T/m.gguf.rphash"
expect_exit rphash_fifo_ignored 0 timeout 20 "$BIN" plan hash "$T/m.gguf"
rm -f "$T/m.gguf.rphash"; ln -s /dev/zero "$T/m.gguf.rphash"
expect_exit rphash_dev_zero_ignored 0 timeout 20 "$BIN" plan hash "$T/m.gguf"
expect_error text_dev_zero_bounded "limit for a text file" timeout 60 "$BIN" run -m "$M" -f /dev/zero -n 1
