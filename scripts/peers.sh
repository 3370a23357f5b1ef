#!/usr/bin/env bash
# The peers table of BENCHMARKS.md: hale, the bare proxy, direct and the
# LiteLLM proxy, measured by hale-bench with the same client, workload and
# machine in one run. Not part of the test suite.
#
#   scripts/peers.sh [hale-bench args…]     e.g. scripts/peers.sh --duration 10s --concurrency 1,64
#
# LiteLLM is PyPI's litellm[proxy]==1.106.2 in its own venv (.peers/litellm,
# git ignores it), started offline (LITELLM_LOCAL_MODEL_COST_MAP=True) with a
# config naming chaos as an OpenAI-compatible provider, one worker. Never a
# 1.107.x, 1.82.7 or 1.82.8 release: those were compromised.
# Needs the release binaries: cargo build --release -p hale -p hale-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
LITELLM_VERSION=1.106.2
VENV=.peers/litellm

if [ "${1:-}" = "litellm-serve" ]; then
  # hale-bench's --peer command: litellm-serve PORT UPSTREAM MODEL
  port=$2 upstream=$3 model=$4
  cfg=$(mktemp --suffix=.yaml)
  cat > "$cfg" <<YAML
model_list:
  - model_name: "$model"
    litellm_params:
      model: "openai/$model"
      api_base: "$upstream/v1"
      api_key: "chaos-needs-no-key"
litellm_settings:
  telemetry: false
  drop_params: true
general_settings:
  # hale runs here without keys (loopback only), so LiteLLM does too.
  dangerously_permit_weak_or_unset_master_key: true
YAML
  export LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOG=ERROR
  exec "$VENV/bin/litellm" --config "$cfg" --host 127.0.0.1 --port "$port" --num_workers 1
fi

installed=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("litellm"))' 2>/dev/null || true)
if [ "$installed" != "$LITELLM_VERSION" ]; then
  echo "installing litellm[proxy]==$LITELLM_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "litellm[proxy]==$LITELLM_VERSION"
fi

BENCH=${BENCH:-target/release/hale-bench} # or another build
[ -x "$BENCH" ] || { echo "build first: cargo build --release -p hale -p hale-bench" >&2; exit 1; }
MODEL="ok:tokens=16"
exec "$BENCH" --bare-client hyper --model "$MODEL" \
  --peer "litellm=$PWD/scripts/peers.sh litellm-serve {port} {upstream} $MODEL" \
  --out target/hale-bench-peers.json "$@"
