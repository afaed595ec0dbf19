# The server's chat page in headless Chromium: the page lists the served
# models (two plans over one copy of the weights), a message sent from it
# (the page's ?q= link) is answered by a stream, and the answer read from the
# DOM equals the greedy answer of /v1/chat/completions for the same plan.
. "$(dirname "$0")/_lib.sh"
M="$S/models/stories260K.gguf"
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then fail webpage_chromium "chromium is missing (scripts/setup.sh installs it)"; exit 0; fi
"$BIN" serve -m "$M" --port 0 -t 1 -np 2 -c 512 --chat-template chatml --plan rys=1,3 > /dev/null 2> "$T/srv.err" &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$T"' EXIT
PORT=""
for _ in $(seq 1 300); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/srv.err" | grep -o '[0-9]*$')
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "$PORT" ] || { fail webpage_server "did not start: $(tail -3 "$T/srv.err")"; exit 0; }
dom() { # URL-QUERY: the DOM once the page settled (virtual time lets the stream finish)
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --user-data-dir="$T/profile" \
        --virtual-time-budget=30000 --dump-dom "http://127.0.0.1:$PORT/?$1" 2> /dev/null
}
for model in stories260K.gguf rys; do
    dom "temperature=0&max_tokens=24&model=$model&q=Once%20upon%20a%20time" > "$T/dom.html"
    python3 - "$T/dom.html" "$PORT" "$model" > "$T/check.txt" 2>&1 <<'PY'
import html.parser, http.client, json, sys
dom, port, model = open(sys.argv[1]).read(), int(sys.argv[2]), sys.argv[3]
class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.stack = []; self.msgs = []; self.options = []
    def handle_starttag(self, tag, a):
        a = dict(a)
        if tag == "div" and "msg" in a.get("class", ""):
            self.msgs.append({"cls": a["class"], "chunks": int(a.get("data-chunks", 0)), "done": a.get("data-done"), "text": ""})
            self.stack.append("msg")
        elif tag == "span" and self.stack:
            self.stack.append("meta")
        elif tag == "option":
            self.options.append(a.get("value"))
    def handle_endtag(self, tag):
        if tag in ("div", "span") and self.stack: self.stack.pop()
    def handle_data(self, d):
        if self.stack and self.stack[-1] == "msg": self.msgs[-1]["text"] += d
p = P(); p.feed(dom)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
c.request("POST", "/v1/chat/completions", json.dumps({"model": model, "temperature": 0, "max_tokens": 24,
          "messages": [{"role": "user", "content": "Once upon a time"}]}), {"Content-Type": "application/json"})
want = json.loads(c.getresponse().read())["choices"][0]["message"]["content"]
a = [m for m in p.msgs if "assistant" in m["cls"]]
print("options", p.options)
print("answer", a)
print("want", repr(want))
assert p.options == ["stories260K.gguf", "rys"], p.options
assert len(a) == 1 and a[0]["done"] == "length", a
assert a[0]["text"] == want, (a[0]["text"], want)
assert a[0]["chunks"] > 1, "not streamed"
PY
    if [ $? -eq 0 ]; then ok "webpage_streamed_answer_$model"; else fail "webpage_streamed_answer_$model" "$(tail -3 "$T/check.txt")"; fi
done
