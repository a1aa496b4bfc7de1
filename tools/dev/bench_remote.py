#!/usr/bin/env python3
"""TTFT with the prefixes in a remote tier (Redis on this machine) against
the local disk tier and against computing everything (issue #18).

Starts its own redis-server on a free loopback port. For each request of a
prompt file ({"prefix", "query"} lines, tools/prompts/make_prompts.py):

  1. a writer process (as-like) stores the prefix in its cache directory,
     ordered by its own importance (--store-order on, unless --no-order), and
     sends its chunks up (`tierkv run --remote URL --remote-admit always`),
     so that the values in Redis are in importance order;
  2. then, in an order that rotates per request, one process each:
     recompute  as-like on an empty directory, no remote tier
     disk/S     system S on the writer's directory (the local disk tier,
                cold pools: a new process; O_DIRECT reads)
     remote/S   system S on a new empty directory with --remote: the prefix
                comes from Redis, is verified and admitted, then read
     for S in as-like and impress (at --retention), and
     remote-important/impress  impress with --remote-read important: of each
                chunk layer only the header and the pages of its first
                retention x chunk rows come down (GETRANGE), attended to as
                they are.

Every figure is from `tierkv run --stats` (TTFT measured inside the engine:
lookup, remote fetch and admission, reads, compute). Prints a Markdown table
of means and their ratios to recompute, and how often each run's greedy
first token is recompute's; a performance claim is a ratio within this one
run.
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir):
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
                             "--save", "", "--appendonly", "no", "--logfile", workdir + "/redis.log"])
    for _ in range(200):
        r = subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True)
        if r.stdout.strip() == "PONG":
            return proc, port
        time.sleep(0.025)
    proc.kill()
    sys.exit("bench_remote: redis-server did not start")


STATS = re.compile(r"(\d+) of (\d+) prompt tokens reused \((\d+) bytes read from disk\), TTFT ([\d.]+) ms")
REMOTE = re.compile(r"remote: (\d+) chunks whole, (\d+) in part \((\d+) bytes\) fetched in ([\d.]+) ms")


def run(binary, cache_dir, system, prompt, retention, remote=None, admit=None, extra=()):
    cmd = [binary, "run", "--cache-dir", cache_dir, "--system", system, "--prompt", prompt,
           "--max-tokens", "1", "--temperature", "0", "--stats"] + list(extra)
    if system != "as-like":
        cmd += ["--retention", str(retention)]
    if remote:
        cmd += ["--remote", remote]
        if admit:
            cmd += ["--remote-admit", admit]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("bench_remote: %s failed:\n%s" % (" ".join(cmd[:6]), r.stderr))
    m = STATS.search(r.stderr)
    out = {"reused": int(m.group(1)), "tokens": int(m.group(2)), "disk_bytes": int(m.group(3)),
           "ttft_ms": float(m.group(4)), "remote_chunks": 0, "remote_partial": 0, "remote_bytes": 0,
           "remote_ms": 0.0, "text": r.stdout}
    m = REMOTE.search(r.stderr)
    if m:
        out.update(remote_chunks=int(m.group(1)), remote_partial=int(m.group(2)), remote_bytes=int(m.group(3)),
                   remote_ms=float(m.group(4)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierkv", default="build/release/apps/tierkv")
    ap.add_argument("--prompts", required=True, help="prompt file: {\"prefix\", \"query\"} per line")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--retention", type=float, default=0.25)
    ap.add_argument("--no-order", action="store_true",
                    help="the writer stores in token order (values without an order: read whole)")
    ap.add_argument("--json", help="also write every measurement here")
    a = ap.parse_args()
    if not shutil.which("redis-server"):
        sys.exit("bench_remote: redis-server is not installed (Debian's redis-server)")
    reqs = [json.loads(l) for l in open(a.prompts) if l.strip()][: a.requests]
    work = tempfile.mkdtemp(prefix="tierkv-bench-remote-")
    redis, port = start_redis(work)
    url = "redis://127.0.0.1:%d" % port
    kinds = ["recompute", "disk/as-like", "disk/impress", "remote/as-like", "remote/impress",
             "remote-important/impress"]
    rows = {k: [] for k in kinds}
    try:
        writer = os.path.join(work, "writer")
        for i, rq in enumerate(reqs):
            run(a.tierkv, writer, "as-like", rq["prefix"], a.retention, remote=url, admit="always",
                extra=[] if a.no_order else ["--store-order", "on"])
            prompt = rq["prefix"] + rq["query"]
            order = kinds[i % len(kinds):] + kinds[: i % len(kinds)]
            for k in order:
                fresh = tempfile.mkdtemp(dir=work)
                profile = os.path.join(writer, "probe-profile.json")
                if os.path.exists(profile):  # impress's fitted thresholds: measured once, not per process
                    shutil.copy(profile, fresh)
                if k == "recompute":
                    r = run(a.tierkv, fresh, "as-like", prompt, a.retention)
                elif k.startswith("disk/"):
                    r = run(a.tierkv, writer, k[5:], prompt, a.retention)
                elif k.startswith("remote-important/"):
                    r = run(a.tierkv, fresh, k[17:], prompt, a.retention, remote=url,
                            extra=["--remote-read", "important"])
                else:
                    r = run(a.tierkv, fresh, k[7:], prompt, a.retention, remote=url)
                shutil.rmtree(fresh, ignore_errors=True)
                rows[k].append(r)
            print("request %d/%d" % (i + 1, len(reqs)), file=sys.stderr)
    finally:
        redis.kill()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.mean(r["ttft_ms"] for r in rows["recompute"])
    print("| run | TTFT mean (ms) | p50 | × recompute | reused tokens | remote chunks whole / in part "
          "| remote MB down | remote fetch ms | disk MB read | first token = recompute's |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k in kinds:
        t = [r["ttft_ms"] for r in rows[k]]
        same = sum(r["text"] == c["text"] for r, c in zip(rows[k], rows["recompute"]))
        print("| %s | %.1f | %.1f | %.2f | %.0f | %.1f / %.1f | %.2f | %.1f | %.2f | %d/%d |" % (
            k, statistics.mean(t), statistics.median(t), statistics.mean(t) / base,
            statistics.mean(r["reused"] for r in rows[k]),
            statistics.mean(r["remote_chunks"] for r in rows[k]),
            statistics.mean(r["remote_partial"] for r in rows[k]),
            statistics.mean(r["remote_bytes"] for r in rows[k]) / 1e6,
            statistics.mean(r["remote_ms"] for r in rows[k]),
            statistics.mean(r["disk_bytes"] for r in rows[k]) / 1e6, same, len(rows[k])))
    print("\n%d requests, retention %.2f for impress, prompt tokens %.0f mean" % (
        len(reqs), a.retention, statistics.mean(r["tokens"] for r in rows["recompute"])))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
