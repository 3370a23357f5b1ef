#!/usr/bin/env bash
# Runs hale's whole test suite from a clean clone.
# Installs what a fresh machine lacks: nats-server, chromium and
# chromium-driver (Debian packages) and a
# Python venv with the official `openai` and `anthropic` SDKs used by the
# end-to-end SDK tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nats-server >/dev/null 2>&1; then
  echo "installing nats-server (Debian package)"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq nats-server
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq nats-server
  fi
fi

if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
  echo "installing chromium and chromium-driver (Debian packages, for the dashboard browser test)"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq chromium chromium-driver
  fi
fi

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import openai, mcp' >/dev/null 2>&1; then
  echo "creating .venv with the openai and mcp SDKs"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check openai mcp
fi
export HALE_PYTHON="$PWD/.venv/bin/python"

cargo test --workspace --all-targets "$@"
