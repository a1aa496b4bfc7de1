#!/usr/bin/env bash
# tierkv beside native llama.cpp on one model file, programs alternated:
# per round, llama-bench (2 threads, flash attention on, each figure the
# mean of 2 repetitions after its warm-up) then tierkv's prefill of
# batches of the same sizes (`bench-engine --weights mapped`, the best of 2)
# and decode of 64 tokens after a one-token prompt, as llama-bench's tg64
# starts from an empty context (`bench-engine --decode`, the median of 3
# rounds; `run --stats` times too few steps to be steady on a small model),
# and after the rounds the peak resident size of `tierkv run` generating
# 64 tokens. Prints every round, then the medians and the median of the
# per-round ratios tierkv / llama.cpp.
#
#   tools/dev/bench_native.sh MODEL.gguf [ROUNDS=3] [TIERKV=build/release/apps/tierkv]
#
# llama-bench comes from tools/llamacpp/setup.sh --native
# (LLAMA_BENCH=path overrides). Batch sizes: BATCHES="1 16 64 512 2048".
set -euo pipefail
model=${1:?usage: bench_native.sh MODEL.gguf [ROUNDS] [TIERKV]}
rounds=${2:-3}
repo=$(cd "$(dirname "$0")/../.." && pwd)
tierkv=${3:-$repo/build/release/apps/tierkv}
lb=${LLAMA_BENCH:-$("$repo/tools/llamacpp/llamacpp" bin llama-bench 2>/dev/null || echo "llama-bench")}
batches=${BATCHES:-1 16 64 512 2048}
[ -x "$lb" ] || { echo "bench_native: $lb missing: run bash tools/llamacpp/setup.sh --native" >&2; exit 1; }
[ -x "$tierkv" ] || { echo "bench_native: $tierkv missing: make build" >&2; exit 1; }
[ -f "$model" ] || { echo "bench_native: $model missing" >&2; exit 1; }
# As many threads as llama-bench's -t 2 (tierkv takes every core otherwise).
export TIERKV_THREADS=2
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for r in $(seq "$rounds"); do
  csv=$("$lb" -m "$model" -t 2 -fa 1 -p "$(echo $batches | tr ' ' ,)" -n 64 -r 2 -o csv 2>/dev/null) ||
    { echo "bench_native: llama-bench failed on $model (run it by hand to see why)" >&2; exit 1; }
  echo "$csv" | python3 -c '
import csv, sys
for row in csv.DictReader(sys.stdin):
    name = "pp%s" % row["n_prompt"] if row["n_gen"] == "0" else "tg%s" % row["n_gen"]
    print("llama.cpp", name, row["avg_ts"])' >> "$results"
  # shellcheck disable=SC2086
  json=$("$tierkv" bench-engine --model "$model" --weights mapped --tokens $batches --repeats 2 --json) ||
    { echo "bench_native: tierkv bench-engine failed on $model" >&2; exit 1; }
  echo "$json" | python3 -c '
import json, sys
for p in json.load(sys.stdin)["prefill"]: print("tierkv", "pp%d" % p["tokens"], p["tokens_per_s"])' >> "$results"
  json=$("$tierkv" bench-engine --model "$model" --weights mapped --decode --no-products --decode-batch 1 \
    --decode-tokens 64 --prompt-tokens 1 --repeats 3 --json) ||
    { echo "bench_native: tierkv bench-engine --decode failed on $model" >&2; exit 1; }
  echo "$json" | python3 -c '
import json, sys
print("tierkv tg64", json.load(sys.stdin)["decode"][0]["tokens_per_s"])' >> "$results"
  echo "round $r: $(grep -c . "$results") figures" >&2
done
# The resident size once: it does not move between rounds, and each run loads the model again.
timed=$(/usr/bin/time -v "$tierkv" run --model "$model" --weights mapped --prompt Hello --max-tokens 64 \
  --temperature 0 2>&1 >/dev/null) ||
  { echo "bench_native: tierkv run failed on $model:" >&2; echo "$timed" | tail -20 >&2; exit 1; }
echo "$timed" | python3 -c '
import re, sys
t = sys.stdin.read()
rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)
if not rss: sys.exit("bench_native: no resident size from tierkv run:\n" + t[-2000:])
print("tierkv rss_mib", int(rss.group(1)) / 1024)' >> "$results"
python3 - "$results" "$rounds" <<'PY'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
for who, name, v in rows: by[(who, name)].append(float(v))
names = sorted({n for _, n in by if n != "rss_mib"}, key=lambda n: (n[:2] == "tg", int(n[2:])))
print("%-8s %12s %12s %8s   per round (tierkv / llama.cpp)" % ("figure", "llama.cpp", "tierkv", "ratio"))
for n in names:
    a, b = by.get(("llama.cpp", n), []), by.get(("tierkv", n), [])
    if not a or not b: continue
    if len(a) != len(b): sys.exit("bench_native: %s has %d llama.cpp and %d tierkv figures" % (n, len(a), len(b)))
    ratios = [y / x for x, y in zip(a, b)]
    print("%-8s %12.2f %12.2f %7.2fx   %s" % (n, statistics.median(a), statistics.median(b),
          statistics.median(ratios), " ".join("%.2f" % q for q in ratios)))
if ("tierkv", "rss_mib") in by: print("tierkv peak resident (run): %.0f MiB" % statistics.median(by[("tierkv", "rss_mib")]))
PY
