#!/usr/bin/env bash
# Installs node-llama-cpp (its prebuilt CPU llama.cpp; pinned in
# package.json) into tools/llamacpp/node_modules from the npm registry, and
# Debian's nodejs and npm when missing. Nothing is compiled: the runner asks
# for the prebuilt binary only (build: "never").
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi
if [ -d node_modules/node-llama-cpp ]; then
  echo "node-llama-cpp already installed"
  exit 0
fi
npm install --no-audit --no-fund --loglevel=error
node -e 'import("node-llama-cpp").then(() => console.log("node-llama-cpp installed"))'
