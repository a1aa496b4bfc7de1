#!/usr/bin/env bash
# Installs the npm package DIR/package.json pins (PKG among them) into
# DIR/node_modules from the npm registry, with Debian's nodejs and npm when
# missing, unless it is there already; then imports PKG once to show it
# loads. Used by tools/llamacpp/setup.sh and tools/openai/setup.sh.
#   tools/dev/npm_package.sh DIR PKG
set -euo pipefail
dir=$1 pkg=$2
cd "$dir"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi
if [ -d "node_modules/$pkg" ]; then
  echo "$pkg already installed"
else
  npm install --no-audit --no-fund --loglevel=error
  node -e "import('$pkg').then(() => console.log('$pkg installed'))"
fi
