#!/usr/bin/env bash
# Instructions per c=1 non-streaming turn: the bare proxy (hale-bench
# bare-proxy --hyper: hyper-util's pooled client, the client of hale's
# provider attempts and the proxy issue 30's ratios are against; reqwest
# before stop 35) vs hale serve, each run under callgrind in front of a
# native `hale chaos`, and the functions that make up the difference.
#
#   cargo build --release -p hale -p hale-bench
#   scripts/callgrind_turn.sh            # N=2000 WARM=200 OUT=/tmp/hale-callgrind
#   STREAM=1 scripts/callgrind_turn.sh   # the same for streaming turns (SSE)
#   MODEL='tool:name=edit_file:args=path=a.rs' TASK_EVERY=1 STREAM=1 scripts/callgrind_turn.sh
#                                        # another chaos answer (here a tool call)
#   DIALECT=anthropic STREAM=1 scripts/callgrind_turn.sh
#                                        # Anthropic Messages (/v1/messages) on both sides
#
# DIALECT=openai (the default) posts Chat Completions bodies to
# /v1/chat/completions and gives hale a `kind: openai` provider;
# DIALECT=anthropic posts Messages bodies (max_tokens 256, the system prompt
# as `system`, `anthropic-version: 2023-06-01`) to /v1/messages and gives hale
# a `kind: anthropic` provider. Either way `hale chaos` answers in the same
# dialect, so hale does not translate; the bare proxy forwards the path as is.
#
# For each server: start it under valgrind, send WARM requests (caches, pools,
# lazily built tables), zero the counters (callgrind_control -z), send N
# requests on one keep-alive connection (curl, one request after the other),
# dump (callgrind_control -d). Start-up and warm-up are not in the dump, so
# dump total / N is the cost of one turn, every thread of the server counted
# (hale's journal writer included). Callgrind counts instructions, not time,
# so the figure is stable on a noisy machine.
#
# Prints instructions per turn for both, then the top functions by the
# difference hale − bare in self and inclusive cost per turn. The dumps stay
# in OUT for callgrind_annotate; delete OUT when done.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-2000}
WARM=${WARM:-200}
OUT=${OUT:-/tmp/hale-callgrind}
BIN=${BIN:-target/release}
HALE=${HALE:-$BIN/hale} # e.g. a copy of an older build, to compare
TOP=${TOP:-15}
STREAM=${STREAM:-0} # 1: streaming requests
MODEL=${MODEL:-ok:tokens=16} # the chaos answer asked for
TASK_EVERY=${TASK_EVERY:-100} # a new task every this many requests (1 for tool calls: no loop guard)
DIALECT=${DIALECT:-openai} # openai | anthropic: the wire dialect of the requests and of hale's provider
case "$DIALECT" in
openai)
    API=/v1/chat/completions
    BASE_URL=/v1 # hale's openai endpoint is {base_url}/chat/completions
    HEADER=
    ;;
anthropic)
    API=/v1/messages
    BASE_URL= # hale's anthropic endpoint is {base_url}/v1/messages
    HEADER='header = "anthropic-version: 2023-06-01"\n'
    ;;
*)
    echo "DIALECT must be openai or anthropic, not $DIALECT" >&2
    exit 2
    ;;
esac
rm -rf "$OUT" && mkdir -p "$OUT"

# shellcheck source=scripts/lib.sh
source scripts/lib.sh # port, wait_ok, PIDS (killed at exit)

CP=$(port)
"$BIN/hale" chaos --listen "127.0.0.1:$CP" 2>"$OUT/chaos.log" &
PIDS+=($!)
wait_ok "http://127.0.0.1:$CP/v1/models" 30

python3 - "$OUT/body.json" "$STREAM" "$MODEL" "$DIALECT" <<'EOF'
import json, sys
words = ["lorem ", "ipsum ", "dolor ", "sit ", "amet "]
s = ""
i = 0
while len(s) < 1000:
    s += words[i % 5]; i += 1
if sys.argv[4] == "anthropic":
    json.dump({"model": sys.argv[3], "max_tokens": 256, "system": "You are a helpful assistant.",
               "messages": [{"role": "user", "content": s[:1000]}],
               "stream": sys.argv[2] == "1"}, open(sys.argv[1], "w"))
else:
    json.dump({"model": sys.argv[3], "stream": sys.argv[2] == "1", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": s[:1000]}]}, open(sys.argv[1], "w"))
EOF

# A curl config of COUNT requests on one connection, a new task every TASK_EVERY.
requests() { # URL COUNT TAG
    for i in $(seq 1 "$2"); do
        [ "$i" -gt 1 ] && echo next
        printf 'url = "%s"\nrequest = "POST"\nheader = "content-type: application/json"\n%bheader = "x-hale-agent: cg"\nheader = "x-hale-task: %s-%d"\ndata-binary = "@%s"\noutput = "/dev/null"\n' \
            "$1" "$HEADER" "$3" $((i / TASK_EVERY)) "$OUT/body.json"
    done >"$OUT/$3.curl"
    curl -sf -K "$OUT/$3.curl"
}

journal_counts() { # PORT -> "turns commits" of hale's /metrics, or nothing
    curl -sf "http://127.0.0.1:$1/metrics" 2>/dev/null |
        awk '$1 == "hale_turns_started_total" {t = $2} $1 == "hale_store_commits_total" {c = $2}
             END {if (t != "" && c != "") print t, c}'
}

measure() { # NAME PORT CMD...
    local name=$1 p=$2
    shift 2
    valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.out" "$@" 2>"$OUT/$name.log" &
    local pid=$!
    PIDS+=($pid)
    wait_ok "http://127.0.0.1:$p/ready" 300
    requests "http://127.0.0.1:$p$API" "$WARM" "$name-warm"
    local before
    before=$(journal_counts "$p" || true)
    callgrind_control -z "$pid" >/dev/null
    requests "http://127.0.0.1:$p$API" "$N" "$name-run"
    sleep 1 # the journal's group commit of the last turns
    # hale only (the bare proxy has no /metrics): how many turns a group
    # commit held, which the journal's share of a turn depends on.
    [ -n "$before" ] && echo "$before $(journal_counts "$p")" |
        awk '$4 > $2 {printf "%s: %.2f turns per group commit\n", "'"$name"'", ($3 - $1) / ($4 - $2)}'
    callgrind_control -d "$pid" >/dev/null
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    local dump
    dump=$(ls "$OUT/$name.out".* | sort -V | head -1)
    mv "$dump" "$OUT/$name.dump"
    rm -f "$OUT/$name.out" "$OUT/$name.out".*
}

BP=$(port)
measure bare "$BP" "$BIN/hale-bench" bare-proxy --hyper --listen "127.0.0.1:$BP" --upstream "http://127.0.0.1:$CP"

HP=$(port)
mkdir -p "$OUT/data"
cat >"$OUT/hale.yaml" <<EOF
listen: 127.0.0.1:$HP
data_dir: "$OUT/data"
providers:
  - name: chaos
    kind: $DIALECT
    base_url: "http://127.0.0.1:$CP$BASE_URL"
    default_model: "$MODEL"
EOF
RUST_LOG=warn measure hale "$HP" "$HALE" serve --config "$OUT/hale.yaml"

python3 - "$OUT/bare.dump" "$OUT/hale.dump" "$N" "$TOP" <<'EOF'
import re, subprocess, sys
bare, hale, n, top = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def costs(path, inclusive):
    out = subprocess.run(["callgrind_annotate", "--threshold=100",
                          "--inclusive=" + ("yes" if inclusive else "no"), path],
                         capture_output=True, text=True, check=True).stdout
    total, fns = 0, {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line) or re.match(r"\s*([\d,]+)\s+(.*)", line)
        if not m:
            continue
        v, name = int(m.group(1).replace(",", "")), m.group(2).strip()
        if "PROGRAM TOTALS" in name:
            total = v
        elif ":" in name:
            fn = re.sub(r"^[^:]*:", "", name, count=1)
            fn = re.sub(r" \[[^\]]*\]$", "", fn)
            fns[fn] = fns.get(fn, 0) + v
    return total, fns

tb, sb = costs(bare, False)
th, sh = costs(hale, False)
print(f"instructions per turn: bare {tb / n:,.0f}, hale {th / n:,.0f}, difference {(th - tb) / n:,.0f} (N={n})")
for label, inc in (("self", False), ("inclusive", True)):
    _, b = costs(bare, inc)
    _, h = costs(hale, inc)
    fs = set(b) | set(h)
    if inc:
        # The server frameworks' frames (recursive, so counted more than
        # once) say nothing: hale's own functions, its journal and the
        # libraries it calls by name.
        keep = ("hale_", "sha2::", "serde_json::ser::to_vec", "serde_json::de::from_trait",
                "sqlite3_step", "reqwest::async_impl::request::RequestBuilder",
                "<reqwest::async_impl::client::Pending ", "tracing_subscriber::registry")
        fs = {f for f in fs if "'" not in f and any(k in f for k in keep)}
    else:
        # A dump taken mid-run books the threads' outer frames (thread start,
        # the tokio worker loop) as if it were their own cost: no real leaf
        # is a quarter of the program, so those rows are left out.
        fs = {f for f in fs if h.get(f, 0) < th / 4 and b.get(f, 0) < tb / 4}
    diff = sorted(((h.get(f, 0) - b.get(f, 0)) / n, f) for f in fs)
    diff.reverse()
    what = "hale's own functions and named library calls" if inc else "all functions"
    print(f"\ntop {top} by {label} cost ({what}), hale − bare, instructions per turn:")
    for d, f in diff[:top]:
        print(f"  {d:>10,.0f}  (hale {h.get(f, 0) / n:,.0f}, bare {b.get(f, 0) / n:,.0f})  {f[:150]}")
EOF
