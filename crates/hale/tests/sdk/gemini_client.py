"""The official `openai` Python SDK's Chat Completions against a running hale
whose route is served by a `kind: gemini` provider.

Usage: gemini_client.py MODE BASE_URL MODEL [MODEL2]

MODE is one of:
  chat    one non-streamed and one streamed chat completion (the text)
  tool    a function tool round trip, non-streamed on MODEL and streamed on
          MODEL2: a `tool_calls` answer, then its `tool` result sent back
  filter  one non-streamed and one streamed call expected to be refused by
          the provider's content filter (`openai.BadRequestError`, or an
          error in the stream)

Prints one JSON object with what it saw for the Rust test to check.
"""

import json
import sys

import openai

QUESTION = "Tell me something useful."
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
                "additionalProperties": False,
            },
        },
    }
]


def chat(client, model):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": QUESTION}]
    )
    c = raw.parse()
    chunks, finish, usage = [], None, None
    for chunk in client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta and choice.delta.content:
                chunks.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    return {
        "nonstream": {
            "text": c.choices[0].message.content,
            "finish_reason": c.choices[0].finish_reason,
            "provider": raw.headers.get("x-hale-provider"),
            "usage": c.usage.model_dump() if c.usage else None,
        },
        "stream": {"text": "".join(chunks), "chunks": len(chunks), "finish_reason": finish, "usage": usage},
    }


def round_trip(client, model, streamed):
    messages = [{"role": "user", "content": QUESTION}]
    if streamed:
        calls, finish = {}, None
        for chunk in client.chat.completions.create(model=model, messages=messages, tools=TOOLS, stream=True):
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or []:
                    c = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                    c["id"] = tc.id or c["id"]
                    if tc.function and tc.function.name:
                        c["name"] = tc.function.name
                    if tc.function and tc.function.arguments:
                        c["arguments"] += tc.function.arguments
                if choice.finish_reason:
                    finish = choice.finish_reason
        assert len(calls) == 1, f"one tool call expected: {calls!r}"
        call = calls[0]
    else:
        first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        finish = first.choices[0].finish_reason
        tcs = first.choices[0].message.tool_calls or []
        assert len(tcs) == 1, f"one tool call expected: {first!r}"
        call = {"id": tcs[0].id, "name": tcs[0].function.name, "arguments": tcs[0].function.arguments}
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"})
    second = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    return {
        "finish_reason": finish,
        "call": {"id": call["id"], "name": call["name"], "arguments": json.loads(call["arguments"])},
        "second_text": second.choices[0].message.content,
        "second_finish_reason": second.choices[0].finish_reason,
    }


def refused(client, model):
    out = {}
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}])
        out["nonstream"] = {"refused": False}
    except openai.BadRequestError as e:
        out["nonstream"] = {"refused": True, "status": e.status_code, "body": e.body}
    chunks, error = [], None
    try:
        for chunk in client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": QUESTION}], stream=True
        ):
            for choice in chunk.choices:
                if choice.delta and choice.delta.content:
                    chunks.append(choice.delta.content)
    except openai.APIError as e:
        error = {"status": getattr(e, "status_code", None), "body": e.body, "message": str(e)}
    out["stream"] = {"text": "".join(chunks), "error": error}
    return out


def main() -> None:
    mode, base_url, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
    if mode == "chat":
        out = chat(client, model)
    elif mode == "tool":
        out = {"nonstream": round_trip(client, model, False), "stream": round_trip(client, sys.argv[4], True)}
    elif mode == "filter":
        out = refused(client, model)
    else:
        raise SystemExit(f"unknown mode {mode}")
    out["sdk_version"] = openai.__version__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
