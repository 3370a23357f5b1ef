"""The official `google-genai` Python SDK against a running hale, as a
Gemini client: hale's Gemini routes (`/v1beta/models/{model}:…`, and
`/v1/…` with api_version="v1").

Usage: genai_client.py MODE BASE_URL MODEL [MODEL2]

BASE_URL is hale's `/v1` (the shared test helper's); the SDK is given hale's
root and adds the API version itself.

MODE is one of:
  text    generate_content, generate_content_stream and count_tokens on
          MODEL (api_version v1beta), and generate_content with
          api_version v1
  stream  generate_content_stream on MODEL only (the text and chunks)
  tool    a function-call round trip on MODEL (non-streamed) and on MODEL2
          (streamed): a function call, then its function response sent back
  error   generate_content on MODEL, expected to fail: the SDK's APIError

Prints one JSON object with what it saw for the Rust test to check.
"""

import json
import sys

from google import genai
from google.genai import errors, types

QUESTION = "Tell me something useful."
KEY = "hale-genai-test-key"

WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city.",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={"city": types.Schema(type=types.Type.STRING)},
        required=["city"],
    ),
)


def client(root, version="v1beta"):
    # The SDK's own retries off: the healing is hale's. (Keep the client in
    # a variable while it is used: the SDK closes its connection pool when
    # the client is collected.)
    return genai.Client(
        api_key=KEY,
        http_options=types.HttpOptions(
            base_url=root,
            api_version=version,
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )


def usage(u):
    if u is None:
        return None
    return {
        "prompt": u.prompt_token_count,
        "candidates": u.candidates_token_count,
        "total": u.total_token_count,
    }


def stream(c, model, config=None):
    chunks = 0
    text = ""
    finish = None
    last_usage = None
    calls = []
    for chunk in c.models.generate_content_stream(
        model=model, contents=QUESTION, config=config
    ):
        chunks += 1
        if chunk.text:
            text += chunk.text
        if chunk.function_calls:
            calls.extend(chunk.function_calls)
        if chunk.candidates and chunk.candidates[0].finish_reason:
            finish = str(chunk.candidates[0].finish_reason.value)
        if chunk.usage_metadata is not None:
            last_usage = usage(chunk.usage_metadata)
    return {
        "text": text,
        "chunks": chunks,
        "finish": finish,
        "usage": last_usage,
        "calls": calls,
    }


def text_mode(root, model):
    c = client(root)
    r = c.models.generate_content(model=model, contents=QUESTION)
    nonstream = {
        "text": r.text,
        "finish": str(r.candidates[0].finish_reason.value),
        "usage": usage(r.usage_metadata),
    }
    s = stream(c, model)
    s.pop("calls")
    counted = c.models.count_tokens(model=model, contents=QUESTION)
    c1 = client(root, "v1")
    v1 = c1.models.generate_content(model=model, contents=QUESTION)
    return {
        "nonstream": nonstream,
        "stream": s,
        "count": counted.total_tokens,
        "v1": {"text": v1.text},
    }


def tool_round(c, model, streamed):
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    if streamed:
        first = stream(c, model, config)
        calls = first["calls"]
        finish = first["finish"]
    else:
        r = c.models.generate_content(model=model, contents=QUESTION, config=config)
        calls = r.function_calls or []
        finish = str(r.candidates[0].finish_reason.value)
    call = calls[0]
    history = [
        types.Content(role="user", parts=[types.Part(text=QUESTION)]),
        types.Content(role="model", parts=[types.Part(function_call=call)]),
        types.Content(
            role="user",
            parts=[
                types.Part.from_function_response(
                    name=call.name, response={"result": "sunny, 21 C"}
                )
            ],
        ),
    ]
    second = c.models.generate_content(model=model, contents=history, config=config)
    return {
        "finish": finish,
        "call": {"name": call.name, "args": dict(call.args or {}), "id": call.id},
        "second_text": second.text,
        "second_finish": str(second.candidates[0].finish_reason.value),
    }


def main():
    mode, base = sys.argv[1], sys.argv[2]
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    model = sys.argv[3]
    if mode == "text":
        out = text_mode(root, model)
    elif mode == "stream":
        c = client(root)
        s = stream(c, model)
        s.pop("calls")
        out = {"stream": s}
    elif mode == "tool":
        c = client(root)
        out = {
            "nonstream": tool_round(c, model, False),
            "stream": tool_round(c, sys.argv[4], True),
        }
    elif mode == "error":
        c = client(root)
        try:
            c.models.generate_content(model=model, contents=QUESTION)
            out = {"refused": False}
        except errors.APIError as e:
            out = {
                "refused": True,
                "code": e.code,
                "status": e.status,
                "message": e.message,
            }
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
