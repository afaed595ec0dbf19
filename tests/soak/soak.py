"""Soak test of reprise serve (make soak): CLIENTS concurrent clients each send
REQUESTS mixed requests (completions, chat, streams read to the end, streams
dropped half-way, tokenize, invalid bodies, two plans); valid requests must
get 200, invalid ones 4xx; the server's RSS is sampled every 2 s."""
import http.client, json, random, socket, sys, threading, time

port, pid, clients, requests = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
models = sys.argv[5].split(",")
lock = threading.Lock()
stats = {"ok": 0, "fail": 0, "invalid_4xx": 0, "invalid_wrong": 0, "cancelled": 0}
failures = []
rss = []
done = threading.Event()

def rss_kib():
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

def sampler():
    t0 = time.time()
    while not done.is_set():
        try:
            rss.append((time.time() - t0, rss_kib()))
        except OSError:
            break
        done.wait(2.0)

def count(k, why=None):
    with lock:
        stats[k] += 1
        if why and len(failures) < 20:
            failures.append(why)

def one(rng):
    kind = rng.choice(["completion", "chat", "stream", "cancel", "tokenize", "invalid", "invalid"])
    model = rng.choice(models)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        if kind == "invalid":
            body = rng.choice([b"{", b'{"prompt": 3}', b'{"messages": "x"}', b"\xff\xfe", b'{"max_tokens": -5, "prompt": "a"}'])
            c.request("POST", rng.choice(["/v1/completions", "/v1/chat/completions"]), body,
                      {"Content-Type": "application/json"})
            r = c.getresponse(); r.read()
            count("invalid_4xx" if 400 <= r.status < 500 else "invalid_wrong",
                  None if 400 <= r.status < 500 else "invalid body -> %d" % r.status)
            return
        if kind == "tokenize":
            c.request("POST", "/tokenize", json.dumps({"content": "Once upon a time"}))
        elif kind == "chat":
            c.request("POST", "/v1/chat/completions", json.dumps({"model": model, "max_tokens": 4,
                      "messages": [{"role": "user", "content": "hi %d" % rng.randrange(1000)}]}))
        else:
            body = {"model": model, "prompt": "Once upon a time %d" % rng.randrange(1000),
                    "max_tokens": 8 if kind != "completion" else 4, "stream": kind in ("stream", "cancel")}
            c.request("POST", "/v1/completions", json.dumps(body))
        r = c.getresponse()
        if r.status != 200:
            count("fail", "%s -> %d %s" % (kind, r.status, r.read()[:200]))
            return
        if kind == "cancel":
            r.read(20)  # a piece of the stream, then the client goes away
            c.sock.shutdown(socket.SHUT_RDWR)
            count("cancelled")
            return
        data = r.read()
        if kind == "stream" and b"[DONE]" not in data:
            count("fail", "stream without [DONE]")
            return
        count("ok")
    except Exception as e:
        count("fail", "%s: %r" % (kind, e))
    finally:
        c.close()

def client(k):
    rng = random.Random(k)
    for _ in range(requests):
        one(rng)

threading.Thread(target=sampler, daemon=True).start()
t0 = time.time()
ts = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
for t in ts: t.start()
for t in ts: t.join()
done.set()
dt = time.time() - t0
print("soak: %d clients x %d requests in %.0f s (%.0f req/s)" % (clients, requests, dt, clients * requests / dt))
print("soak: valid ok %d, failed %d; cancelled streams %d; invalid 4xx %d, invalid other %d" % (
    stats["ok"], stats["fail"], stats["cancelled"], stats["invalid_4xx"], stats["invalid_wrong"]))
step = max(1, len(rss) // 12)
print("soak: RSS KiB (t s: KiB): " + ", ".join("%.0f: %d" % x for x in rss[::step]))
if rss:
    first = rss[min(2, len(rss) - 1)][1]
    print("soak: RSS from %d to %d KiB (%+d), peak %d" % (first, rss[-1][1], rss[-1][1] - first, max(r for _, r in rss)))
for f in failures: print("  failure: " + f)
sys.exit(1 if stats["fail"] or stats["invalid_wrong"] else 0)
