#!/usr/bin/env python3
"""Issue 57 (1), measured: `tierkv serve --remote` on a Redis stand-in that
is first healthy (it has nothing: EXISTS answers 0), then hostile (EXISTS
answers 1, then every GET is answered with one byte every 100 ms). In both
phases a stream runs and, four times, a long prompt (its lookups go to the
Redis) is sent and 20 ms later a 2-token request: the 2-token request's
latency, the stream's worst gap and the server's RSS are compared between
the phases (the long prompts' own prefills and the stream's rounds are the
same in both, so the ratio is what the hostile Redis costs).

  python3 tools/dev/hostile_redis.py build/release/apps/tierkv
"""
import json, os, re, socket, socketserver, statistics, subprocess, sys, tempfile, threading, time, urllib.request

binary = sys.argv[1]
mode = {"hostile": False}


class Fake(socketserver.BaseRequestHandler):
    def handle(self):
        buf = b""
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            buf += data
            while buf.startswith(b"*"):
                parts, pos = [], 0
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                argc, pos, whole = int(buf[1:end]), end + 2, True
                for _ in range(argc):
                    e = buf.find(b"\r\n", pos)
                    if e < 0:
                        whole = False
                        break
                    n = int(buf[pos + 1:e])
                    if len(buf) < e + 2 + n + 2:
                        whole = False
                        break
                    parts.append(buf[e + 2:e + 2 + n])
                    pos = e + 2 + n + 2
                if not whole:
                    break
                buf = buf[pos:]
                name = parts[0].upper()
                if name in (b"GET", b"GETRANGE"):
                    self.request.sendall(b"$49152\r\n")
                    while True:  # until the client gives up
                        time.sleep(0.1)
                        self.request.sendall(b"x")
                reply = {b"PING": b"+PONG\r\n", b"EXISTS": b":1\r\n" if mode["hostile"] else b":0\r\n"}
                self.request.sendall(reply.get(name, b"+OK\r\n"))


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


fake = Server(("127.0.0.1", 0), Fake)
threading.Thread(target=fake.serve_forever, daemon=True).start()
work = tempfile.mkdtemp(prefix="tierkv-hostile-")
env = dict(os.environ, TIERKV_REMOTE_KEY="measure-hostile-redis-0123456789")
server = subprocess.Popen([binary, "serve", "--port", "0", "--cache-dir", work + "/cache", "--remote",
                           f"redis://127.0.0.1:{fake.server_address[1]}"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
port = int(re.search(r"http://[^:]+:(\d+)", server.stdout.readline()).group(1))
base = f"http://127.0.0.1:{port}"
prefix = " ".join(f"Line {i}: the baker counts loaves, flour and the hours of the oven." for i in range(30))


def post(prompt, tokens=2):
    t0 = time.monotonic()
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=120).read()
    return (time.monotonic() - t0) * 1000


def rss(field):
    for line in open(f"/proc/{server.pid}/status"):
        if line.startswith(field):
            return int(line.split()[1])


def phase(name, rounds=8):
    gaps = []

    def stream():
        body = json.dumps({"prompt": "The little dog", "max_tokens": 300, "temperature": 0, "stream": True,
                           "ignore_eos": True}).encode()
        req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
        last = time.monotonic()
        with urllib.request.urlopen(req, timeout=300) as r:
            for line in r:
                if line.strip():
                    now = time.monotonic()
                    gaps.append((now - last) * 1000)
                    last = now

    s = threading.Thread(target=stream)
    s.start()
    time.sleep(0.3)
    brief = []
    for i in range(rounds):
        t = threading.Thread(target=post, args=(f"{name}: {prefix} Round {i}.", 1))
        t.start()
        time.sleep(0.02)
        brief.append(post("Once upon a time"))
        t.join()
    s.join()
    return statistics.median(brief), max(gaps[1:]), brief


post("warm-up: " + prefix, 1)  # the buffers a long prompt needs, allocated once
post("Once upon a time")
rss_idle = rss("VmRSS:")
healthy = phase("healthy")
peak_healthy = rss("VmHWM:")
mode["hostile"] = True
hostile = phase("hostile")
peak = rss("VmHWM:")
server.terminate()
server.wait(timeout=60)
print(f"2-token request p50 beside long prompts: healthy Redis {healthy[0]:.0f} ms, dripping Redis "
      f"{hostile[0]:.0f} ms ({hostile[0] / healthy[0]:.2f}x); stream's worst gap {healthy[1]:.0f} / "
      f"{hostile[1]:.0f} ms; RSS idle {rss_idle} KiB, peak {peak_healthy} KiB after the healthy phase, "
      f"{peak} KiB after the hostile one ({peak / rss_idle:.2f}x idle)")
