#!/usr/bin/env bash
# Builds llama.cpp's own `llama-bench`, natively for this CPU
# (GGML_NATIVE=ON, Release, OpenMP), from the llama.cpp source that
# node-llama-cpp bundles (the same release its prebuilt library is built
# from), into build/llamacpp-native/ (ignored by git). About 8 minutes on 2
# cores; a second run finds it built. The benchmark of the model files
# users run (tools/dev/bench_native.sh, `make bench-native`) measures
# tierkv against it: the prebuilt library node-llama-cpp loads is slower
# than a native build (docs/engine.md).
#
# Needs tools/llamacpp/setup.sh (npm) first; without it, says so and exits 0
# (optional: not part of `make test`).
set -euo pipefail
cd "$(dirname "$0")/../.."
bundle=tools/llamacpp/node_modules/node-llama-cpp/llama/gitRelease.bundle
out=build/llamacpp-native
if [ ! -f "$bundle" ]; then
  echo "build_llama_bench: $bundle is missing: run tools/llamacpp/setup.sh first (needs npm); skipped"
  exit 0
fi
if [ -x "$out/build/bin/llama-bench" ]; then
  echo "build_llama_bench: $out/build/bin/llama-bench is built"
  exit 0
fi
command -v cmake >/dev/null || { echo "build_llama_bench: cmake is missing" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
git -c advice.detachedHead=false clone -q "$bundle" "$out/src"
fail() { echo "build_llama_bench: $1 failed; the end of $2:" >&2; tail -20 "$2" >&2; exit 1; }
cmake -S "$out/src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > "$out/cmake.log" 2>&1 ||
  fail cmake "$out/cmake.log"
cmake --build "$out/build" --target llama-bench -j"$(nproc)" > "$out/build.log" 2>&1 || fail "the build" "$out/build.log"
echo "build_llama_bench: $out/build/bin/llama-bench ($(git -C "$out/src" log -1 --format=%h))"
