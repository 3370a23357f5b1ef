#!/usr/bin/env bash
# Runs hale's whole test suite from a clean clone.
# Installs what a fresh machine lacks: nats-server, haproxy, chromium and
# chromium-driver (Debian packages), a Python venv with the official `openai`
# and `mcp` SDKs, the pinned OpenAI Agents SDK, the pinned google-genai SDK
# and the pinned anthropic SDK used by the end-to-end SDK tests and
# hale-bench chaos-hour, and the pinned agent CLIs (Codex, Claude Code,
# Gemini CLI; npm) in .clis/.
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

if ! command -v haproxy >/dev/null 2>&1 && ! [ -x /usr/sbin/haproxy ]; then
  echo "installing haproxy (Debian package, the chaos hour's scale-out load balancer)"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq haproxy
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq haproxy
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
# The OpenAI Agents SDK of crates/hale/tests/agents_sdk.rs, pinned.
AGENTS_VERSION=0.24.0
if [ "$(.venv/bin/python -c 'from importlib.metadata import version; print(version("openai-agents"))' 2>/dev/null)" != "$AGENTS_VERSION" ]; then
  echo "installing openai-agents==$AGENTS_VERSION into .venv"
  .venv/bin/pip install -q --disable-pip-version-check "openai-agents==$AGENTS_VERSION"
fi
# The google-genai SDK of crates/hale/tests/sdk_genai.rs (Gemini as a client), pinned.
GENAI_VERSION=3.6.1
if [ "$(.venv/bin/python -c 'from importlib.metadata import version; print(version("google-genai"))' 2>/dev/null)" != "$GENAI_VERSION" ]; then
  echo "installing google-genai==$GENAI_VERSION into .venv"
  .venv/bin/pip install -q --disable-pip-version-check "google-genai==$GENAI_VERSION"
fi
# The anthropic SDK of hale-bench chaos-hour's Messages agent loop, pinned.
ANTHROPIC_VERSION=2.10.0
if [ "$(.venv/bin/python -c 'from importlib.metadata import version; print(version("anthropic"))' 2>/dev/null)" != "$ANTHROPIC_VERSION" ]; then
  echo "installing anthropic==$ANTHROPIC_VERSION into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check "anthropic==$ANTHROPIC_VERSION"
fi
export HALE_PYTHON="$PWD/.venv/bin/python"

# The agent CLIs of crates/hale/tests/agent_clis.rs (Codex, Claude Code, Gemini CLI) at the
# versions pinned in scripts/clis/package-lock.json, installed with `npm ci`
# into .clis/ (git ignores it); skipped when that lock file is installed.
if ! command -v npm >/dev/null 2>&1; then
  echo "installing nodejs and npm (Debian packages, for the agent CLIs)"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq nodejs npm
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq nodejs npm
  fi
fi
if ! cmp -s scripts/clis/package-lock.json .clis/.installed-lock.json; then
  echo "installing the pinned agent CLIs into .clis/ (npm ci)"
  rm -rf .clis && mkdir -p .clis
  cp scripts/clis/package.json scripts/clis/package-lock.json .clis/
  (cd .clis && npm ci --no-audit --no-fund --loglevel=error)
  # Claude Code's postinstall puts its native binary in place; run it if npm did not.
  if ! .clis/node_modules/.bin/claude --version >/dev/null 2>&1; then
    (cd .clis/node_modules/@anthropic-ai/claude-code && node install.cjs)
  fi
  cp scripts/clis/package-lock.json .clis/.installed-lock.json
fi

cargo test --workspace --all-targets "$@"
