#!/usr/bin/env bash
# Runs `tierkv bench-serve` against `tierkv serve` once per system, back to
# back, each server on a fresh cache directory, and prints one JSON object per
# system (bench-serve's report plus "system"). The ratios between the systems
# of one run are the result; absolute times move from run to run.
# Usage: tools/dev/bench_serve_systems.sh WORKLOAD [SECONDS] [CONCURRENCY] [SYSTEMS]
#   defaults: 60 s, 16 clients, recompute,as-like,impress,spec
# RETENTION (default 0.25) is the selective systems' share of prefix rows;
# as-like and recompute read all or nothing whatever it says.
set -euo pipefail
cd "$(dirname "$0")/../.."
workload=${1:?usage: bench_serve_systems.sh WORKLOAD [SECONDS] [CONCURRENCY] [SYSTEMS]}
seconds=${2:-60}
clients=${3:-16}
systems=${4:-recompute,as-like,impress,spec}
bin=${TIERKV:-build/release/apps/tierkv}
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/tierkv-bench-serve-XXXXXX")
. tools/dev/serve_lib.sh
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$scratch"' EXIT
for system in ${systems//,/ }; do
  start_serve "$system" --cache-dir "$scratch/$system" --system "$system" --retention "${RETENTION:-0.25}" \
    --max-running 16 --max-queue 64
  report=$("$bin" bench-serve --url "$url" --workload "$workload" --concurrency "$clients" \
    --duration "$seconds" --json 2> /dev/null) || echo "bench-serve reported errors for $system" >&2
  stop_serve
  python3 -c 'import json,sys; r=json.loads(sys.argv[2]); r["system"]=sys.argv[1]; print(json.dumps(r))' \
    "$system" "$report"
done
