"""The OpenAI Agents SDK (`openai-agents`) against a running hale.

Usage: agents_client.py MODE BASE_URL MODEL

MODE is `run` (`Runner.run`, non-streamed Responses calls) or `streamed`
(`Runner.run_streamed`, streamed ones). The agent has one function tool,
`get_weather`, and the SDK's default model: the Responses API, through an
`AsyncOpenAI` client whose base URL is hale (`set_default_openai_client`),
with the SDK's own retries off (`max_retries=0`, so any healing is hale's)
and tracing disabled (nothing leaves the machine).

Prints one JSON object with what the run saw, for the Rust test to check.
"""

import asyncio
import json
import sys
from importlib.metadata import version

from openai import AsyncOpenAI

from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)

QUESTION = "What is the weather in Paris?"
CALLS = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    CALLS.append(city)
    return f"sunny, 21 C in {city}"


async def main() -> None:
    mode, base_url, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
    set_default_openai_client(client, use_for_tracing=False)
    set_tracing_disabled(True)
    agent = Agent(
        name="weather",
        instructions="Answer questions about the weather with the tool.",
        tools=[get_weather],
        model=model,
    )
    events = 0
    if mode == "run":
        result = await Runner.run(agent, QUESTION)
    elif mode == "streamed":
        result = Runner.run_streamed(agent, QUESTION)
        async for _ in result.stream_events():
            events += 1
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(
        json.dumps(
            {
                "final_output": result.final_output,
                "tool_calls": CALLS,
                "items": [i.type for i in result.new_items],
                "model_responses": len(result.raw_responses),
                "stream_events": events,
                "sdk_version": version("openai-agents"),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
