"""The official `openai` Python SDK against a hale whose provider is Azure
OpenAI (`hale chaos` playing it): what crates/hale/tests/sdk_azure.rs needs
beyond responses_client.py's modes.

Usage: azure_client.py MODE BASE_URL MODEL

Modes:
  chat_tool  a Chat Completions function tool round trip, the first call
             streamed and the second not
  refused    a Chat Completions call and a streamed one, each expected to
             fail: the status and error body the SDK got
Prints one JSON object.
"""

import json
import sys

import openai

QUESTION = "What is the weather in Paris?"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def chat_tool(client, model):
    messages = [{"role": "user", "content": QUESTION}]
    calls = {}
    finish = None
    for chunk in client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, stream=True
    ):
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
            if choice.finish_reason:
                finish = choice.finish_reason
    assert len(calls) == 1, f"one tool call expected: {calls!r}"
    call = calls[0]
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"})
    second = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    return {
        "first_finish": finish,
        "call": {"id": call["id"], "name": call["name"], "arguments": json.loads(call["arguments"])},
        "second_text": second.choices[0].message.content,
        "second_finish": second.choices[0].finish_reason,
    }


def refused_one(call):
    try:
        call()
    except openai.APIStatusError as e:
        return {"status": e.status_code, "body": e.body}
    raise AssertionError("the call was expected to fail")


def refused(client, model):
    messages = [{"role": "user", "content": "Something the filter blocks."}]

    def streamed():
        for _ in client.chat.completions.create(model=model, messages=messages, stream=True):
            pass

    return {
        "nonstream": refused_one(
            lambda: client.chat.completions.create(model=model, messages=messages)
        ),
        "stream": refused_one(streamed),
    }


def main() -> None:
    mode, base_url, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
    if mode == "chat_tool":
        out = chat_tool(client, model)
    elif mode == "refused":
        out = refused(client, model)
    else:
        raise SystemExit(f"unknown mode {mode}")
    out["sdk_version"] = openai.__version__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
