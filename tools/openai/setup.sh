#!/usr/bin/env bash
# Installs the official OpenAI Node client (pinned in package.json) into
# tools/openai/node_modules from the npm registry, for the server's
# black-box tests (they skip with a message without it). Debian's nodejs
# and npm are installed when missing.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi
if [ -d node_modules/openai ]; then
  echo "openai client already installed"
else
  npm install --no-audit --no-fund --loglevel=error
  node -e 'import("openai").then(() => console.log("openai client installed"))'
fi
