"""An agent loop on the OpenAI Agents SDK (`openai-agents`, the Responses
API), its `echo` tool served by hale's `/mcp`.

Usage: agents_loop.py MODEL BASE_URL WORKDIR PROMPT

BASE_URL is hale's root: the model is called at `BASE_URL/v1` (an
`AsyncOpenAI` client, its retries off — `max_retries=0`: the healing is
hale's — tracing disabled) and the agent's MCP server is hale's
`BASE_URL/mcp` (Streamable HTTP; its tools are the tool nodes' behind
hale's tool routing, `echo` among them; the SDK's MCP retries are off by
default, `max_retry_attempts=0`). `shell` (bash -c in WORKDIR) is a local
function tool. `Runner.run_streamed` runs the task (at most 40 turns).
Prints the same JSON object as task_loop.py: the final text, the calls
made, the turns, hale's turn id of each model answer (`x-hale-turn-id`,
read by a response hook on the SDK's own HTTP client), and on an error the failed turn's id,
exit 2.
"""

import asyncio
import json
import os
import subprocess
import sys

from openai import AsyncOpenAI, DefaultAsyncHttpxClient

from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.mcp import MCPServerStreamableHttp

# HALE_CLIENT_RETRIES: the SDK's own retries (default 0: the healing is hale's;
# hale-bench chaos-hour's scale-out mode keeps the SDK's default, 2).
RETRIES = int(os.environ.get("HALE_CLIENT_RETRIES", "0"))

WORKDIR = "."
CALLS = []
IDS = []
FAILED = []


@function_tool
def shell(command: str) -> str:
    """Runs a bash command in the working directory; returns its output."""
    CALLS.append("shell")
    p = subprocess.run(
        ["bash", "-c", command], cwd=WORKDIR, capture_output=True, text=True, timeout=60
    )
    return p.stdout + p.stderr


async def on_response(response) -> None:
    turn_id = response.headers.get("x-hale-turn-id")
    if turn_id is None:
        return
    (IDS if response.status_code < 400 else FAILED).append(turn_id)


async def main() -> None:
    global WORKDIR
    model, root, WORKDIR, prompt = sys.argv[1:5]
    http = DefaultAsyncHttpxClient(timeout=60, event_hooks={"response": [on_response]})
    client = AsyncOpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=RETRIES,
                         http_client=http)
    set_default_openai_client(client, use_for_tracing=False)
    set_default_openai_api("responses")
    set_tracing_disabled(True)
    out = {}
    try:
        async with MCPServerStreamableHttp(
            params={"url": f"{root}/mcp", "timeout": 30},
            cache_tools_list=True,
            # Longer than hale's step timeout (30 s): a hanging node is
            # hale's to route around.
            client_session_timeout_seconds=90,
        ) as mcp:
            agent = Agent(
                name="task",
                instructions="You are an agent; use the tools, then report.",
                tools=[shell],
                mcp_servers=[mcp],
                model=model,
            )
            result = Runner.run_streamed(agent, prompt, max_turns=40)
            async for _ in result.stream_events():
                pass
            out = {"final": str(result.final_output)}
    except Exception as e:  # the SDK raises its own and openai's errors
        out = {"error": f"{type(e).__name__}: {e}",
               "failed_turn_id": FAILED[-1] if FAILED else None}
    out.update({"calls": CALLS, "turns": len(IDS), "turn_ids": IDS})
    print(json.dumps(out))
    if "error" in out:
        sys.exit(2)


if __name__ == "__main__":
    asyncio.run(main())
