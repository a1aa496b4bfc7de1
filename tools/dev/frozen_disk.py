#!/usr/bin/env python3
"""Issue 57 (4), measured: `tierkv serve` with its cache directory on a file
system frozen for N seconds (a loop-mounted ext4 image, fsfreeze: a disk
that stops answering writes). Prints the latency of a 2-token request and of
a fully cached prompt before and during the freeze, what /health said, and
whether a running stream kept its pace. Needs root (mount, fsfreeze).

  python3 tools/dev/frozen_disk.py build/release/apps/tierkv [SECONDS]
"""
import json, os, re, statistics, subprocess, sys, tempfile, threading, time, urllib.request

binary = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 30
work = tempfile.mkdtemp(prefix="tierkv-frozen-")
mnt = work + "/mnt"
os.makedirs(mnt)
subprocess.run(f"truncate -s 256M {work}/img && mkfs.ext4 -q -F {work}/img && mount -o loop {work}/img {mnt}",
               shell=True, check=True)
# Thaw whatever happens to this script.
subprocess.Popen(f"sleep {seconds + 60}; fsfreeze -u {mnt} 2>/dev/null", shell=True)
server = subprocess.Popen([binary, "serve", "--port", "0", "--cache-dir", mnt + "/cache"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = int(re.search(r"http://[^:]+:(\d+)", server.stdout.readline()).group(1))
base = f"http://127.0.0.1:{port}"
prefix = " ".join(f"Line {i}: the baker counts loaves, flour and the hours of the oven." for i in range(30))


def post(prompt, tokens=2):
    t0 = time.monotonic()
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=120).read()
    return (time.monotonic() - t0) * 1000


def health():
    return urllib.request.urlopen(base + "/health", timeout=10).read().decode()


cached = prefix + " The end."
post(cached)
idle_brief = [post("Once upon a time") for _ in range(7)]
idle_cached = [post(cached) for _ in range(7)]
gaps = []


def stream():
    body = json.dumps({"prompt": "The little dog", "max_tokens": 400, "temperature": 0, "stream": True,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    last = time.monotonic()
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r:
            now = time.monotonic()
            if line.strip():
                gaps.append((now - last) * 1000)
                last = now


subprocess.run(["fsfreeze", "-f", mnt], check=True)
t_frozen = time.monotonic()
first_new = post(prefix + " Another ending.")  # its store hangs on the frozen disk
s = threading.Thread(target=stream)
s.start()
frozen_brief, frozen_cached, healths = [], [], []
while time.monotonic() - t_frozen < seconds:
    frozen_brief.append(post("Once upon a time"))
    frozen_cached.append(post(cached))
    healths.append(health())
    time.sleep(0.5)
subprocess.run(["fsfreeze", "-u", mnt], check=True)
s.join()
time.sleep(1)
after = health()
server.terminate()
server.wait(timeout=60)
subprocess.run(f"umount {mnt}; rm -rf {work}", shell=True)
med = statistics.median
print(f"frozen {seconds:.0f} s: 2-token request p50 {med(idle_brief):.0f} ms idle, {med(frozen_brief):.0f} ms frozen "
      f"(max {max(frozen_brief):.0f}); cached prompt p50 {med(idle_cached):.0f} ms idle, {med(frozen_cached):.0f} ms "
      f"frozen (max {max(frozen_cached):.0f}); a new prompt as the freeze began {first_new:.0f} ms; "
      f"stream's worst gap {max(gaps):.0f} ms; /health degraded in {sum('degraded' in h for h in healths)} "
      f"of {len(healths)} probes (last: {healths[-1]}); after the thaw: {after}")
