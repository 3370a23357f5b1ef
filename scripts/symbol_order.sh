#!/usr/bin/env bash
# Writes crates/hale/symbol-order.txt: the functions `hale serve` runs, in
# the order a profile first saw them, for LLD to place together
# (crates/hale/build.rs says why: the kernel maps code 64 KiB around each
# page run, so scattered functions keep most of the binary resident).
#
#   cargo build --release -p hale
#   scripts/symbol_order.sh            # then rebuild: the order is a link input
#
# The names are the mangled ones of the build profiled, with hashes that
# follow the toolchain, the dependencies' versions and features, and the
# crate graph (a build script added to a crate changes that crate's), not
# the source: profile a build of the tree the file is for.
#
# Runs a native `hale chaos` and `hale serve` under callgrind from start to
# exit, with an OpenAI and an Anthropic provider, and sends what a gateway
# serves: turns of both dialects, streaming and not, text and tool calls,
# an upstream error that fails over, the admin and read API. Every function
# callgrind saw (mangled, as the linker knows it) goes in the file. Rerun it
# after a dependency or toolchain upgrade: names the build no longer has
# are skipped by the linker, so a stale file only loses the benefit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/hale}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
ORDER=${ORDER:-crates/hale/symbol-order.txt}

# shellcheck source=scripts/lib.sh
source scripts/lib.sh # port, wait_ok, PIDS (killed at exit)

CP=$(port)
"$BIN" chaos --listen "127.0.0.1:$CP" 2>"$OUT/chaos.log" &
PIDS+=($!)
wait_ok "http://127.0.0.1:$CP/v1/models" 30

HP=$(port)
cat >"$OUT/hale.yaml" <<YAML
listen: 127.0.0.1:$HP
data_dir: "$OUT/data"
providers:
  - name: oa
    kind: openai
    base_url: "http://127.0.0.1:$CP/v1"
    default_model: "ok:tokens=16"
    models: ["ok:tokens=16", "tool:name=edit_file:args=path=a.rs", "error-500:times=1"]
  - name: an
    kind: anthropic
    base_url: "http://127.0.0.1:$CP"
    default_model: "ok:tokens=17"
    models: ["ok:tokens=17", "tool:name=edit_file:args=path=b.rs"]
YAML
RUST_LOG=warn valgrind --tool=callgrind --demangle=no --compress-strings=no \
    --callgrind-out-file="$OUT/cg.out" "$BIN" serve --config "$OUT/hale.yaml" 2>"$OUT/serve.log" &
HALE=$!
PIDS+=($HALE)
wait_ok "http://127.0.0.1:$HP/ready" 300

oa() { # BODY
    curl -s -o /dev/null -H 'content-type: application/json' -H 'x-hale-agent: order' \
        -H "x-hale-task: t$RANDOM" "http://127.0.0.1:$HP/v1/chat/completions" -d "$1"
}
an() { # BODY
    curl -s -o /dev/null -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \
        -H 'x-hale-agent: order' -H "x-hale-task: t$RANDOM" "http://127.0.0.1:$HP/v1/messages" -d "$1"
}
# Models of the OpenAI provider, then of the Anthropic one (chaos reads the
# model as what to answer), each asked in both dialects.
for model in "ok:tokens=16" "tool:name=edit_file:args=path=a.rs" "error-500:times=1" \
    "ok:tokens=17" "tool:name=edit_file:args=path=b.rs"; do
    for stream in false true; do
        for _ in 1 2 3; do
            oa "{\"model\":\"$model\",\"stream\":$stream,\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"hello there\"}]}"
            an "{\"model\":\"$model\",\"max_tokens\":256,\"stream\":$stream,\"system\":\"Be brief.\",\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}"
        done
    done
done
# Turns at once (the journal's group commit of several, the pool's waits).
body='{"model":"ok:tokens=16","stream":true,"messages":[{"role":"user","content":"hello there"}]}'
seq 1 64 | xargs -P 16 -I{} curl -s -o /dev/null -H 'content-type: application/json' \
    -H 'x-hale-agent: many-{}' "http://127.0.0.1:$HP/v1/chat/completions" -d "$body"
for path in /live /ready /metrics /v1/models /agents /agents/order /deployments /history / /nope \
    '/agents?limit=10&after=many-3' '/agents?state=paused' /dlq /cluster /nodes '/jobs?status=failed'; do
    curl -s -o /dev/null "http://127.0.0.1:$HP$path" || true
done
curl -s -o /dev/null -X POST "http://127.0.0.1:$HP/agents/order/pause" || true
curl -s -o /dev/null -X POST "http://127.0.0.1:$HP/agents/order/resume" || true
# The periodic work of a gateway that has run a while: the memory sweep
# (every 5 s) sheds the agents of a finished batch after seconds, those of
# one turn after a minute, with their tasks and breakers; an agent that
# comes back after that is read back from the store. Code first run then
# would otherwise be paged in around minute 2 (BENCHMARKS, memory over time).
sleep 70
oa '{"model":"ok:tokens=16","stream":false,"messages":[{"role":"user","content":"hello again"}]}'
curl -s -o /dev/null -H 'content-type: application/json' -H 'x-hale-agent: many-1' \
    "http://127.0.0.1:$HP/v1/chat/completions" -d "$body"
sleep 6
kill -INT "$HALE"
wait "$HALE" 2>/dev/null || true

# Every function name of the dump ("fn=" its own, "cfn=" one it called), in
# first-seen order, once each.
# Callgrind marks a recursion level with 'N after the name.
grep -E '^c?fn=' "$OUT/cg.out"* | sed -E "s/^[^=]*=(\([0-9]+\) ?)?//; s/'[0-9]+\$//" | grep -v '^$' |
    awk '!seen[$0]++' >"$ORDER"
echo "$(wc -l <"$ORDER") functions in $ORDER (dumps in $OUT)"
