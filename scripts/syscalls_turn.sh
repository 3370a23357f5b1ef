#!/bin/bash
# Syscalls and context switches per turn at c=64, hale against the bare
# hyper-util proxy (BENCHMARKS.md, "By thread and syscalls").
# usage: scripts/syscalls_turn.sh HALE_BIN stream(off|on) durability TAG
#   BENCH=path/to/hale-bench (default target/release/hale-bench), W=4 (s)
#   HALEONLY=1: hale alone; the bare figures are taken from an earlier
#   run with TAG=main1 (OUT/main1-STREAM).
# Runs hale-bench (direct, bare hyper proxy, hale) at c=64 and, in the middle of
# the bare and the hale run, counts syscalls (perf stat tracepoints, per thread
# name) and context switches (/proc/PID/task/*/status) over W seconds.
# Turns: hale from hale_turns_started_total before/after; bare from the bench's rps × W.
B=${1:-target/release/hale}; S=${2:-off}; D=${3:-relaxed}; TAG=${4:-x}
BENCH=${BENCH:-target/release/hale-bench}; OUT=${OUT:-/tmp/syscalls}; HERE=$(dirname "$0")
W=${W:-4}
EV="-e raw_syscalls:sys_enter"; for k in futex epoll_wait epoll_pwait writev write sendto recvfrom read pread64 pwrite64 fsync fdatasync sched_yield madvise mprotect; do EV="$EV -e syscalls:sys_enter_$k"; done; DUR=${DUR:-10}
O=$OUT/$TAG-$S; mkdir -p $O; L=$O/bench.log
$BENCH --hale-bin $B ${HALEONLY:+--hale-only} --bare-client hyper --journal-durability $D --duration ${DUR}s --warmup 2s --concurrency 64 --stream $S --out $O/bench.json > $L 2>&1 &
BP=$!
ctx() { # PID -> "comm vol nonvol" per thread
  for t in /proc/$1/task/*; do
    c=$(cat $t/comm 2>/dev/null | sed 's/[0-9]*$//; s/ /_/g'); v=$(awk '/^voluntary_ctxt/{print $2}' $t/status 2>/dev/null); n=$(awk '/^nonvoluntary_ctxt/{print $2}' $t/status 2>/dev/null)
    echo "$c ${v:-0} ${n:-0}"
  done | awk '{v[$1]+=$2; n[$1]+=$3} END {for (k in v) print k, v[k], n[k]}' | sort
}
measure() { # NAME PID TURNS_FN
  local name=$1 pid=$2
  export -f $3 ctx; export PORT
  perf stat --per-thread $EV -e context-switches -p $pid -o $O/$name.perf -- bash -c "ctx $pid > $O/$name.ctx0; $3 > $O/$name.t0; sleep $W; $3 > $O/$name.t1; ctx $pid > $O/$name.ctx1" 2>/dev/null
  echo "$(cat $O/$name.t0) $(cat $O/$name.t1)" > $O/$name.turns
}
zero() { echo 0; }
if [ -z "$HALEONLY" ]; then
until grep -q "direct:" $L 2>/dev/null; do sleep 0.2; done
sleep 3
BARE=$(pgrep -f "hale-bench bare-proxy" | head -1); echo bare pid $BARE
measure bare $BARE zero
until grep -q "bare:" $L 2>/dev/null; do sleep 0.2; done
else
until grep -q "hale pid" $L 2>/dev/null; do sleep 0.2; done
cp $OUT/main1-$S/bare.* $O/ 2>/dev/null
fi
HP=$(grep -o "hale pid [0-9]*" $L | grep -o "[0-9]*$"); PORT=$(grep -o "hale pid [0-9]* at 127.0.0.1:[0-9]*" $L | grep -o "[0-9]*$")
turns() { curl -s -m 2 http://127.0.0.1:$PORT/metrics | grep -E "^hale_turns_started_total" | awk '{s+=$NF} END {print s+0}'; }
sleep 3
measure hale $HP turns
wait $BP
BRPS=$(grep "bare:" $L $OUT/main1-$S/bench.log | head -1 | cut -d: -f2- | awk '{for(i=1;i<=NF;i++) if ($i=="rps") print $(i-1)}')
python3 $HERE/syscalls_turn_report.py $O $BRPS $W
