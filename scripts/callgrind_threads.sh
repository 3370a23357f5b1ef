#!/usr/bin/env bash
# Instructions per turn by thread under concurrency: `hale serve` under
# `valgrind --tool=callgrind --separate-threads=yes`, driven by C parallel
# curl processes (one keep-alive connection each, agent cK, a new task every
# TASK_EVERY turns, the chaos answer ok:tokens=16, 1,000-byte requests).
# WARM turns a stream, counters zeroed, N turns in all, one dump per thread.
# Prints the whole process and each thread per turn; for SQLite threads
# the journal's functions and, for the writer's (`sqlite3_exec` runs its
# BEGIN/COMMIT), its commits and re-preparations. Issue 30 (BENCHMARKS.md).
#
#   cargo build --release -p hale -p hale-bench
#   scripts/callgrind_threads.sh                 # C=64 N=3200 WARM=10, relaxed journal
#   C=1 N=300 DUR=durable scripts/callgrind_threads.sh
#   HALE=path/to/other/hale OUT=/tmp/x scripts/callgrind_threads.sh
#
# Under valgrind one thread runs at a time, so a group commit holds far more
# turns than natively at the same C; compare builds in the same conditions.
# Delete OUT when done.
set -euo pipefail
cd "$(dirname "$0")/.."
C=${C:-64}; N=${N:-3200}; WARM=${WARM:-10}; OUT=${OUT:-/tmp/hale-callgrind-threads}
BIN=${BIN:-target/release}; HALE=${HALE:-$BIN/hale}
TASK_EVERY=${TASK_EVERY:-100}; DUR=${DUR:-relaxed}
rm -rf "$OUT" && mkdir -p "$OUT"
source scripts/lib.sh
CP=$(port)
"$BIN/hale" chaos --listen "127.0.0.1:$CP" 2>"$OUT/chaos.log" &
PIDS+=($!)
wait_ok "http://127.0.0.1:$CP/v1/models" 30
python3 - "$OUT/body.json" <<'PY'
import json, sys
words = ["lorem ", "ipsum ", "dolor ", "sit ", "amet "]
s = ""; i = 0
while len(s) < 1000:
    s += words[i % 5]; i += 1
json.dump({"model": "ok:tokens=16", "stream": False, "messages": [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": s[:1000]}]}, open(sys.argv[1], "w"))
PY
requests() { # URL COUNT TAG AGENT
    for i in $(seq 1 "$2"); do
        [ "$i" -gt 1 ] && echo next
        printf 'url = "%s"\nrequest = "POST"\nheader = "content-type: application/json"\nheader = "x-hale-agent: %s"\nheader = "x-hale-task: %s-%d"\ndata-binary = "@%s"\noutput = "/dev/null"\n' \
            "$1" "$4" "$3" $((i / TASK_EVERY)) "$OUT/body.json"
    done >"$OUT/$3.curl"
    curl -sf -K "$OUT/$3.curl"
}
par() { # URL PER TAG
    local ps=()
    for k in $(seq 1 "$C"); do requests "$1" "$2" "$3-$k" "c$k" & ps+=($!); done
    for p in "${ps[@]}"; do wait "$p"; done
}
HP=$(port)
mkdir -p "$OUT/data"
cat >"$OUT/hale.yaml" <<Y
listen: 127.0.0.1:$HP
data_dir: "$OUT/data"
journal: {durability: $DUR}
providers:
  - name: chaos
    kind: openai
    base_url: "http://127.0.0.1:$CP/v1"
    default_model: "ok:tokens=16"
Y
RUST_LOG=warn valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$OUT/hale.out" "$HALE" serve --config "$OUT/hale.yaml" 2>"$OUT/hale.log" &
pid=$!; PIDS+=($pid)
wait_ok "http://127.0.0.1:$HP/ready" 300
par "http://127.0.0.1:$HP/v1/chat/completions" "$WARM" warm
callgrind_control -z "$pid" >/dev/null
par "http://127.0.0.1:$HP/v1/chat/completions" $((N / C)) run
sleep 2
callgrind_control -d "$pid" >/dev/null
kill "$pid"; wait "$pid" 2>/dev/null || true
TOTAL=$(( (N / C) * C ))
python3 - "$OUT" "$TOTAL" <<'PY'
import glob, re, subprocess, sys
out, n = sys.argv[1], int(sys.argv[2])
# first dump per thread: hale.out.PID.1-NN
dumps = {}
for f in glob.glob(out + "/hale.out.*"):
    m = re.search(r"hale\.out\.(?:\d+\.)?(\d+)-(\d+)$", f)
    if m:
        dumps.setdefault(int(m.group(2)), []).append((int(m.group(1)), f))
tot = 0; rows = []
for t, fs in sorted(dumps.items()):
    f = sorted(fs)[0][1]
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", f], capture_output=True, text=True).stdout
    m = re.search(r"([\d,]+) \(.*PROGRAM TOTALS", ann) or re.search(r"([\d,]+)\s+PROGRAM TOTALS", ann)
    v = int(m.group(1).replace(",", "")) if m else 0
    tot += v
    fn = {}
    for line in ann.splitlines():
        mm = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
        if mm:
            name = re.sub(r"^[^:]*:", "", mm.group(2).strip(), count=1); name = re.sub(r" \[[^\]]*\]$", "", name)
            fn[name] = fn.get(name, 0) + int(mm.group(1).replace(",", ""))
    tag = "writer" if fn.get("sqlite3_exec", 0) > 0 else ("sqlite" if fn.get("sqlite3_step", 0) > 0 else "")
    if tag:
        names, calls, cur = {}, {}, None
        for line in open(f, errors="replace"):
            if line.startswith(("fn=", "cfn=")):
                mm = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.strip())
                if mm:
                    if mm.group(2): names[mm.group(1)] = mm.group(2)
                    if line.startswith("cfn="): cur = names.get(mm.group(1))
            elif line.startswith("calls=") and cur:
                calls[cur] = calls.get(cur, 0) + int(line.split()[0][6:])
        fn["#exec"] = calls.get("sqlite3_exec", 0)
        fn["#reprepare"] = calls.get("sqlite3Reprepare", 0)
        fn["#prepare"] = calls.get("sqlite3LockAndPrepare", 0)
    rows.append((t, v, tag, fn))
print(f"turns {n}; whole process {tot / n:,.0f} instr/turn")
for t, v, tag, fn in rows:
    if v / n < 500: continue
    extra = ""
    if tag:
        keys = ["sqlite3_step", "sqlite3_exec", "sqlite3VdbeHalt", "pagerWalFrames", "walChecksumBytes", "sqlite3Reprepare", "sqlite3LockAndPrepare"]
        extra = "  " + ", ".join(f"{k} {fn.get(k, 0) / n:,.0f}" for k in keys)
        if tag == "writer":
            extra += f"\n      sqlite3_exec calls {fn['#exec']} (commits ~{fn['#exec'] // 2}, turns/commit {2 * n / max(fn['#exec'], 1):.1f}), reprepare calls {fn['#reprepare']}, prepare calls {fn['#prepare']}"
        else:
            extra += f"\n      reprepare calls {fn['#reprepare']}"
    print(f"  thread {t:3d} {tag:8s} {v / n:>10,.0f}{extra}")
PY
