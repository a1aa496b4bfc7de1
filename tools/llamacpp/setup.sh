#!/usr/bin/env bash
# Installs node-llama-cpp (its prebuilt CPU llama.cpp; pinned in
# package.json) into tools/llamacpp/node_modules from the npm registry, and
# Debian's nodejs and npm when missing. Nothing is compiled: the runner asks
# for the prebuilt binary only (build: "never").
set -euo pipefail
cd "$(dirname "$0")"
bash ../dev/npm_package.sh . node-llama-cpp
# The tests' oracle: the same install without llama.cpp's Sapphire Rapids
# CPU build (hard links, no copy). ggml loads the best CPU build found
# beside its own library; on a CPU with AMX that build multiplies
# quantized weights in AMX tiles with their own rounding (greedy
# continuations of Q4_K part from ours 0.13 logits from a tie; the AVX
# builds are within 0.06: docs/models.md), so the oracle computes the same
# on every machine. The benchmark keeps the full install.
rm -rf oracle
mkdir oracle
cp -al node_modules oracle/node_modules
rm -f oracle/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-cpu-sapphirerapids.so
ln -s ../runner.mjs oracle/runner.mjs
