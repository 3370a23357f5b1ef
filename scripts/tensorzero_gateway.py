"""TensorZero's gateway as hale-bench's peer (scripts/peers.sh).

The PyPI wheel `tensorzero` holds TensorZero's Rust gateway;
`_start_http_gateway` serves it over HTTP in this process on a loopback port
it picks itself. This prints the gateway's base URL (its OpenAI-compatible
route, `http://127.0.0.1:PORT/openai/v1`) as the first line on stdout, for
hale-bench to read, and keeps the process alive until it is killed.

    python tensorzero_gateway.py CONFIG.toml
"""

import signal
import sys

from tensorzero import _start_http_gateway

gateway = _start_http_gateway(
    config_file=sys.argv[1],
    clickhouse_url=None,
    postgres_url=None,
    valkey_url=None,
    async_setup=False,
)
print(gateway.base_url, flush=True)
stop = {signal.SIGTERM, signal.SIGINT}
signal.pthread_sigmask(signal.SIG_BLOCK, stop)
signal.sigwait(stop)
gateway.close()
