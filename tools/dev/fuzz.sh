#!/usr/bin/env bash
# Runs each libFuzzer target (the `fuzz` preset) for SECONDS on a scratch
# corpus seeded from tests/fuzz/corpus/<target>/ (the committed seeds are
# never modified). A crash, a leak or a timeout fails the run and leaves the
# input in the scratch directory, which is printed.
# Usage: tools/dev/fuzz.sh [SECONDS]   (default 30)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-30}
for t in gguf record manifest prompt request http; do
  work=$(mktemp -d "${TMPDIR:-/tmp}/tierkv-fuzz-$t-XXXXXX")
  echo "=== fuzz_$t: $seconds s"
  if ! build/fuzz/tests/fuzz/fuzz_$t "$work" "tests/fuzz/corpus/$t" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$work/" > "$work/log" 2>&1; then
    tail -n 40 "$work/log"
    echo "fuzz_$t found a problem; its input and log are in $work"
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added|^#[0-9]+ +DONE" "$work/log" || true
  rm -rf "$work"
done
