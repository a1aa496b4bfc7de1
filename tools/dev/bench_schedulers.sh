#!/usr/bin/env bash
# The schedulers side by side (issue #16, must-show 4): `tierkv serve` with
# fcfs, car without its prefetcher and car with it, back to back, each on a
# fresh cache directory, driven by `tierkv bench-serve` with more clients
# than running slots (requests wait), and pools small enough that prefixes
# fall back to disk between a session's questions (the three classes mix).
# Prints one JSON object per configuration: bench-serve's report, plus the
# server's counters at the end (/metrics: requests by where their prefix
# waited and started, prefix load wait, prefix hits by tier, prefetches).
# The ratios between the configurations of one run are the result.
# Usage: tools/dev/bench_schedulers.sh WORKLOAD [SECONDS] [CLIENTS]
#   env: SYSTEM (as-like), RUNNING (4), DEVICE_MIB (64), HOST_MIB (128), WINDOW (8)
set -euo pipefail
cd "$(dirname "$0")/../.."
workload=${1:?usage: bench_schedulers.sh WORKLOAD [SECONDS] [CLIENTS]}
seconds=${2:-60}
clients=${3:-16}
bin=${TIERKV:-build/release/apps/tierkv}
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/tierkv-bench-sched-XXXXXX")
. tools/dev/serve_lib.sh
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$scratch"' EXIT
for config in fcfs car-noprefetch car; do
  case $config in
    fcfs) flags=(--scheduler fcfs) ;;
    car-noprefetch) flags=(--scheduler car --prefetch false) ;;
    car) flags=(--scheduler car --prefetch true) ;;
  esac
  start_serve "$config" --cache-dir "$scratch/$config" --system "${SYSTEM:-as-like}" \
    --max-running "${RUNNING:-4}" --max-queue 256 --device-mib "${DEVICE_MIB:-64}" \
    --host-mib "${HOST_MIB:-128}" --window "${WINDOW:-8}" "${flags[@]}"
  report=$("$bin" bench-serve --url "$url" --workload "$workload" --concurrency "$clients" \
    --duration "$seconds" --json 2> /dev/null) || echo "bench-serve reported errors for $config" >&2
  curl -s "$url/metrics" > "$scratch/$config.metrics"
  stop_serve
  python3 - "$config" "$report" "$scratch/$config.metrics" <<'PY'
import json, re, sys
r = json.loads(sys.argv[2])
r["config"] = sys.argv[1]
m = {}
for line in open(sys.argv[3]):
    if line.startswith("#") or not line.strip():
        continue
    name, value = line.rsplit(" ", 1)
    if re.match(r"tierkv_(waited_requests|started_requests|prefix_load_wait_seconds|prefix_hits|prefetch|prefetched)", name):
        m[name] = float(value)
hits = [m.get('tierkv_prefix_hits_total{tier="%s"}' % t, 0) for t in ("device", "host", "disk")]
m["device_hit_ratio"] = hits[0] / sum(hits) if sum(hits) else 0
r["server"] = m
print(json.dumps(r))
PY
done
