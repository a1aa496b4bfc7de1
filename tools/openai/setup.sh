#!/usr/bin/env bash
# Installs the official OpenAI Node client (pinned in package.json) into
# tools/openai/node_modules from the npm registry, for the server's
# black-box tests (they skip with a message without it). Debian's nodejs
# and npm are installed when missing.
set -euo pipefail
cd "$(dirname "$0")"
bash ../dev/npm_package.sh . openai
