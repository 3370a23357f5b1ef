#!/usr/bin/env bash
# Resident memory of `hale serve` right after start (BENCHMARKS.md, "Memory at start").
# usage: scripts/rss_at_start.sh [HALE_BIN] — for an OpenAI-only, an Anthropic-only and
# a both-providers config: start, wait for /ready, wait 2 s, print VmRSS, stop.
set -euo pipefail
bin=${1:-target/release/hale}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
oa='  - {name: oa, kind: openai, base_url: "http://127.0.0.1:9/v1", default_model: gpt-4o}'
an='  - {name: an, kind: anthropic, base_url: "http://127.0.0.1:9", default_model: claude-sonnet-4}'
port=47100
for k in openai anthropic both; do
  port=$((port + 1))
  case $k in openai) p=$oa ;; anthropic) p=$an ;; both) p="$oa"$'\n'"$an" ;; esac
  printf 'listen: 127.0.0.1:%s\ndata_dir: "%s/data-%s"\nproviders:\n%s\n' "$port" "$work" "$k" "$p" > "$work/$k.yaml"
  HALE_LOG=warn "$bin" serve --config "$work/$k.yaml" > "$work/$k.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/ready" > /dev/null && break; sleep 0.1; done
  sleep 2
  echo "$k: $(grep VmRSS "/proc/$pid/status")"
  kill "$pid"; wait "$pid" 2> /dev/null || true
done
