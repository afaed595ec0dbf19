# The server's chat page in headless Chromium, driven over the DevTools
# protocol (tests/py/webpage_cdp.py): the picker lists the served models (two
# plans over one copy of the weights), a message typed and sent is answered
# by a stream (partial texts seen in the DOM), the final answer equals the
# greedy answer of /v1/chat/completions for that plan, and Stop ends a long
# answer and frees the slot.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then fail webpage_chromium "chromium is missing (scripts/setup.sh installs it)"; exit 0; fi
# -c 8192: the stop test's long answer must still be running when Stop is pressed
"$BIN" serve -m "$M" --port 0 -t 1 -np 2 -c 8192 --chat-template chatml --plan rys=1,3 > /dev/null 2> "$T/srv.err" &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$T"' EXIT
PORT=""
for _ in $(seq 1 300); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/srv.err" | grep -o '[0-9]*$')
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "$PORT" ] || { fail webpage_server "did not start: $(tail -3 "$T/srv.err")"; exit 0; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
timeout 600 python3 "$ROOT/tests/py/webpage_cdp.py" "$CHROME" "$PORT" "$T/profile" > "$T/cdp.log" 2>&1
rc=$?
cat "$T/cdp.log" | grep -E '^(ok|FAIL) '
[ $rc -eq 0 ] || fail webpage_driver "exit $rc: $(grep -v '^ok ' "$T/cdp.log" | tail -3)"
