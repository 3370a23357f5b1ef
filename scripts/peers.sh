#!/usr/bin/env bash
# The peers table of BENCHMARKS.md: direct, the bare proxy, hale (durable
# and relaxed journal), TensorZero, Portkey and LiteLLM, measured by
# `hale-bench peers` with the same client, workload and machine in one run.
# Not part of the test suite.
#
#   scripts/peers.sh [hale-bench peers args…]   e.g. scripts/peers.sh --duration 5s --concurrency 1,64
#   scripts/peers.sh install                    only install the peers (hale-bench chaos-hour --peer litellm)
#
# Installs each peer into .peers/ (git ignores it) from the registries,
# offline at run time:
#   - TensorZero: PyPI tensorzero==2026.6.0 in its own venv; its wheel holds
#     the Rust gateway, served by scripts/tensorzero_gateway.py
#     (observability off, no ClickHouse, no PostgreSQL).
#   - Portkey: npm @portkey-ai/gateway@1.15.2 with @hono/node-server
#     overridden to 1.13.8 (the newer one it resolves to fails every
#     streamed answer with `TypeError: immutable`), run on this Node.js.
#   - LiteLLM: PyPI litellm[proxy]==1.106.2 in its own venv, one worker,
#     offline (LITELLM_LOCAL_MODEL_COST_MAP=True). Never a 1.107.x, 1.82.7 or
#     1.82.8 release: those were compromised.
# Bifrost is not measured: its npm package downloads its binary from outside
# the registry at run time.
# Needs the release binaries: cargo build --release -p hale -p hale-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
LITELLM_VERSION=1.106.2
TENSORZERO_VERSION=2026.6.0
PORTKEY_VERSION=1.15.2
HONO_NODE_SERVER_VERSION=1.13.8

# pip_peer NAME REQUIREMENT DIST VERSION: a venv in .peers/NAME holding DIST==VERSION.
pip_peer() {
  local venv=.peers/$1 installed
  installed=$("$venv/bin/python" -c "from importlib.metadata import version; print(version('$3'))" 2>/dev/null || true)
  if [ "$installed" != "$4" ]; then
    echo "installing $2 into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$2"
  fi
}
pip_peer litellm "litellm[proxy]==$LITELLM_VERSION" litellm "$LITELLM_VERSION"
pip_peer tensorzero "tensorzero==$TENSORZERO_VERSION" tensorzero "$TENSORZERO_VERSION"

PORTKEY=.peers/portkey
installed=$(node -p "require('./$PORTKEY/node_modules/@portkey-ai/gateway/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$PORTKEY_VERSION" ]; then
  echo "installing @portkey-ai/gateway@$PORTKEY_VERSION into $PORTKEY"
  mkdir -p "$PORTKEY"
  cat > "$PORTKEY/package.json" <<JSON
{
  "name": "hale-peer-portkey",
  "private": true,
  "dependencies": { "@portkey-ai/gateway": "$PORTKEY_VERSION" },
  "overrides": { "@hono/node-server": "$HONO_NODE_SERVER_VERSION" }
}
JSON
  (cd "$PORTKEY" && npm install --no-audit --no-fund --ignore-scripts --loglevel=error)
fi

[ "${1:-}" = "install" ] && exit 0

BENCH=${BENCH:-target/release/hale-bench} # or another build
[ -x "$BENCH" ] || { echo "build first: cargo build --release -p hale -p hale-bench" >&2; exit 1; }
exec "$BENCH" peers "$@"
