#!/usr/bin/env python3
"""The chat page in headless Chromium, driven over the DevTools protocol
(a minimal WebSocket client, standard library only).

usage: webpage_cdp.py CHROMIUM PORT PROFILE_DIR
Loads http://127.0.0.1:PORT/, checks the model picker lists the served
models, types a message and presses Send, watches the answer grow in the DOM
(streamed: several distinct partial texts), compares the final text with the
server's greedy answer; then starts a long answer and presses Stop.
Prints "ok NAME" / "FAIL NAME: why".
"""
import base64, http.client, json, os, re, socket, struct, subprocess, sys, time

CHROME, PORT, PROFILE = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def ok(n): print("ok " + n, flush=True)
def fail(n, why): print("FAIL %s: %s" % (n, str(why)[:400]), flush=True)
def check(n, c, why=""): (ok(n) if c else fail(n, why)); return c


class WS:
    """Just enough of RFC 6455 for the DevTools protocol: text frames."""
    def __init__(self, url):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        self.s = socket.create_connection((m.group(1), int(m.group(2))), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                        % (m.group(3), m.group(1), m.group(2), key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        assert b" 101 " in head.split(b"\r\n")[0], head
        self.n = 0

    def _recv_exact(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c: raise EOFError
            b += c
        return b

    def send(self, obj):
        data = json.dumps(obj).encode()
        mask = os.urandom(4)
        h = bytes([0x81])
        n = len(data)
        h += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 \
            else bytes([0x80 | 127]) + struct.pack(">Q", n)
        self.s.sendall(h + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        msg = b""
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126: n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127: n = struct.unpack(">Q", self._recv_exact(8))[0]
            msg += self._recv_exact(n)
            if b0 & 0x80: return json.loads(msg)

    def call(self, method, **params):
        self.n += 1
        self.send({"id": self.n, "method": method, "params": params})
        while True:
            r = self.recv()
            if r.get("id") == self.n:
                return r.get("result", {})

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        return r.get("result", {}).get("value")


def greedy(model, text, n):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
    c.request("POST", "/v1/chat/completions", json.dumps({"model": model, "temperature": 0, "max_tokens": n,
              "messages": [{"role": "user", "content": text}]}), {"Content-Type": "application/json"})
    return json.loads(c.getresponse().read())["choices"][0]["message"]["content"]


def slots_busy():
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    c.request("GET", "/slots")
    return sum(s["is_processing"] for s in json.loads(c.getresponse().read()))


p = subprocess.Popen([CHROME, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
                      "--user-data-dir=" + PROFILE, "about:blank"], stderr=subprocess.PIPE, text=True)
try:
    ws_url = None
    t0 = time.time()
    while time.time() - t0 < 60 and not ws_url:
        line = p.stderr.readline()
        m = re.search(r"DevTools listening on (ws://\S+)", line)
        if m: ws_url = m.group(1)
    assert ws_url, "chromium did not start"
    dport = int(re.match(r"ws://[^:]+:(\d+)", ws_url).group(1))
    c = http.client.HTTPConnection("127.0.0.1", dport, timeout=30)
    c.request("GET", "/json/list")
    page = [t for t in json.loads(c.getresponse().read()) if t["type"] == "page"][0]
    ws = WS(page["webSocketDebuggerUrl"])
    ws.call("Page.enable")
    ws.call("Page.navigate", url="http://127.0.0.1:%d/" % PORT)
    for _ in range(200):
        opts = ws.js("Array.from(document.querySelectorAll('#model option')).map(o => o.value)")
        if opts: break
        time.sleep(0.05)
    check("webpage_model_picker", opts == ["stories260K.gguf", "rys"], opts)

    def ask(model, text, n):
        ws.js("document.getElementById('reset').click()")
        ws.js("document.getElementById('model').value = %s; document.getElementById('temperature').value = 0;"
              "document.getElementById('max_tokens').value = %d; document.getElementById('msg').value = %s;"
              "document.getElementById('send').click()" % (json.dumps(model), n, json.dumps(text)))

    READ = ("(() => { const a = document.querySelector('.msg.assistant'); if (!a) return null;"
            " return {text: a.firstChild ? a.firstChild.textContent : '', done: a.dataset.done || null,"
            " chunks: Number(a.dataset.chunks || 0)}; })()")
    for model in ["stories260K.gguf", "rys"]:
        ask(model, "Once upon a time", 48)
        seen, st = set(), None
        t0 = time.time()
        while time.time() - t0 < 240:
            st = ws.js(READ)
            if st:
                seen.add(st["text"])
                if st["done"]: break
            time.sleep(0.002)
        want = greedy(model, "Once upon a time", 48)
        check("webpage_answer_%s" % model, st and st["done"] == "length" and st["text"] == want, (st, want))
        check("webpage_streamed_%s" % model, st and st["chunks"] > 1,
              "%d chunks (%d distinct texts seen while polling)" % (st["chunks"] if st else 0, len(seen)))
    # the stop button: a long answer, stopped after its first chunks; the slot frees
    ask("stories260K.gguf", "Once upon a time", 100000)
    t0 = time.time()
    partial = None
    while time.time() - t0 < 60:
        partial = ws.js(READ) or {}
        if partial.get("chunks", 0) >= 2:
            break
        time.sleep(0.01)
    # the answer is on screen while it is being generated: a partial text, not finished
    check("webpage_partial_text_while_streaming", partial.get("text") and not partial.get("done"), partial)
    ws.js("document.getElementById('stop').click()")
    st = None
    t0 = time.time()
    while time.time() - t0 < 60:
        st = ws.js(READ)
        if st and st["done"]: break
        time.sleep(0.02)
    busy = None
    for _ in range(100):
        busy = slots_busy()
        if busy == 0: break
        time.sleep(0.05)
    check("webpage_stop_button", st and st["done"] == "stopped" and busy == 0, (st, busy))
finally:
    p.kill()
    p.wait()
