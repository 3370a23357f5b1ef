# Helpers the profiling scripts share (sourced, not run): a free loopback
# port, waiting for a URL to answer, and stopping what a script started.
# A script adds each background process's pid to PIDS; they are killed
# when it exits.

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

wait_ok() { # URL SECONDS
    for _ in $(seq 1 $(($2 * 10))); do
        curl -fs -o /dev/null "$1" && return 0
        sleep 0.1
    done
    echo "no answer from $1" >&2
    return 1
}

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
