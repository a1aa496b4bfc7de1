#!/usr/bin/env bash
# Issue 34, part 2, "must show": a soak with the disk nearly full.
#
# `tierkv serve` with its cache directory on an 8 MiB tmpfs and the default
# disk budget (--disk-budget-mib auto: half the free space), 64 clients for
# 60 s of distinct documents (bench-serve), /metrics polled throughout for
# the store's bytes on disk (live + dead) against its budget; then one new
# prompt sent twice (the second must report cached_tokens > 0); then a
# restart, and every seg-*.tkv must hold live records (`tierkv inspect`).
# Exit 0 when all of that holds. Needs root (mount) and ../shared (the
# workload's documents).
#
#   tools/dev/soak_full_disk.sh [build/release/apps/tierkv]
#   CLIENTS=64 SECONDS_=60 MIB=8 tools/dev/soak_full_disk.sh
set -euo pipefail

bin=$(realpath "${1:-build/release/apps/tierkv}")
clients=${CLIENTS:-64}
seconds=${SECONDS_:-60}
mib=${MIB:-8}
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d /var/tmp/tierkv_soak_XXXXXX)
mnt=$scratch/mnt
cache=$mnt/c
mkdir -p "$mnt"
if [ "$(id -u)" != 0 ] || ! mount -t tmpfs -o size=${mib}m tmpfs "$mnt"; then
  echo "soak_full_disk: needs root to mount a ${mib} MiB tmpfs" >&2
  rm -rf "$scratch"
  exit 2
fi
pid=
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  umount "$mnt" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
# shellcheck source=serve_lib.sh
source "$here/serve_lib.sh"

python3 "$here/../prompts/make_workload.py" --kind documents --users 256 --rounds 2 --system-chars 900 \
  --max-tokens 8 > "$scratch/docs.jsonl"

# max(live + dead) / budget over every /metrics sample, and the worst du of the segments.
metric() { grep "^$1 " | awk '{print $2}'; }
poll() {
  set +e +o pipefail  # a segment deleted while find lists them is no reason to stop polling
  local worst=0 samples=0 over=0 du_worst=0
  while [ -e "$scratch/polling" ]; do
    if m=$(curl -sf "$url/metrics"); then
      live=$(echo "$m" | metric tierkv_store_live_bytes)
      dead=$(echo "$m" | metric tierkv_store_dead_bytes)
      budget=$(echo "$m" | metric tierkv_store_budget_bytes)
      disk=$(python3 -c "print(int(float($live) + float($dead)))")
      du=$(find "$cache" -name 'seg-*.tkv' -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}')
      samples=$((samples + 1))
      [ "$disk" -gt "$worst" ] && worst=$disk
      [ "$du" -gt "$du_worst" ] && du_worst=$du
      if python3 -c "import sys; sys.exit(0 if $disk > float($budget) > 0 else 1)"; then over=$((over + 1)); fi
    fi
    sleep 0.5
  done
  echo "$samples $worst $du_worst $over ${budget:-0}" > "$scratch/poll.txt"
}

# Every client is on this host: one address, so its cap is all connections.
start_serve soak --cache-dir "$cache" --max-queue 256 --max-connections-per-address 256
[ -n "$url" ] || { cat "$scratch/soak.err"; exit 1; }
grep 'disk budget' "$scratch/soak.err" || echo "(no disk budget printed)"
touch "$scratch/polling"
poll 2> "$scratch/poll.err" &
poller=$!
"$bin" bench-serve --url "$url" --workload "$scratch/docs.jsonl" --concurrency "$clients" \
  --duration "$seconds" --max-tokens 8 --timeout 120 --json > "$scratch/bench.json" ||
  echo "bench-serve: exit $? (some requests failed; the server's warnings follow)"
grep -i 'warn\|error' "$scratch/soak.err" | sed 's/[0-9]\{2,\}/N/g' | sort | uniq -c | sort -rn | head -5 || true
rm "$scratch/polling"
wait "$poller"
[ -s "$scratch/poll.txt" ] || cat "$scratch/poll.err"
read -r samples worst du_worst over budget < "$scratch/poll.txt"

ask() {
  curl -sf "$url/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$1\", \"max_tokens\": 4, \"temperature\": 0}"
}
new="A new prompt after the soak: the lighthouse keeper counted the ships that passed in the night, \
wrote each name in a ledger bound in green cloth, and wondered which of them would come back in \
the spring with letters from the islands, with salt and with news of the storms far away."
ask "$new" > "$scratch/first.json"
ask "$new" > "$scratch/second.json"
cached=$(python3 -c "import json; print(json.load(open('$scratch/second.json'))['usage']['prompt_tokens_details']['cached_tokens'])")
stats=$(curl -sf "$url/v1/cache")
stop_serve
pid=

# A restart: recovery removes segments without live records.
start_serve restart --cache-dir "$cache"
stop_serve
pid=
"$bin" inspect --quick --json --cache-dir "$cache" > "$scratch/inspect.json"
read -r segs dead_segs < <(python3 -c "
import json; r = json.load(open('$scratch/inspect.json'))
print(len(r['segments']), sum(1 for s in r['segments'] if s.get('live_bytes', s['bytes']) == 0))")

python3 - "$scratch/bench.json" <<EOF
import json, sys
b = json.load(open(sys.argv[1]))
s = json.loads('''$stats''')['store']
print("bench-serve: %s" % {k: b[k] for k in b if not isinstance(b[k], (dict, list))})
for e in sorted(set(b.get("error_samples", [])))[:5]:
    print("  failed request: %s" % e[:200])
print("store after the soak: %s" % s)
EOF
echo "metrics samples $samples: worst live+dead $worst bytes, worst segment files $du_worst bytes," \
     "budget $budget bytes, samples over the budget: $over"
echo "new prompt sent twice: cached_tokens $cached on the second"
echo "after a restart: $segs segment files, $dead_segs without live records"
fail=0
[ "$over" = 0 ] || { echo "FAIL: the store passed its budget"; fail=1; }
[ "$cached" -gt 0 ] || { echo "FAIL: the new prompt was not reused"; fail=1; }
[ "$dead_segs" = 0 ] || { echo "FAIL: segments without live records after a restart"; fail=1; }
[ "$fail" = 0 ] && echo "PASS"
exit $fail
