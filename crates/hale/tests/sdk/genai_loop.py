"""An agent loop on the official `google-genai` SDK (Gemini), with function tools.

Usage: genai_loop.py MODEL BASE_URL WORKDIR PROMPT

BASE_URL is hale's root (the SDK adds `/v1beta/models/...`). Streams each
model turn (`generate_content_stream`, automatic function calling off, the
SDK's own retries off — `HttpRetryOptions(attempts=RETRIES + 1)`: the
healing is hale's; with them on, a turn whose stream broke off is sent
again), runs the function calls it asks for — `shell` (bash -c in WORKDIR)
and `echo` (its arguments back as JSON) — and sends their outputs back as
function responses, until a turn answers without a call (at most
40 turns). Prints the same JSON object as task_loop.py: the final text, the
calls made, the turns, hale's turn id of each answer (`x-hale-turn-id`,
from the SDK's `sdk_http_response`), and on an error the failed turn's id
when the SDK kept it, exit 2.
"""

import json
import subprocess
import sys

from google import genai
from google.genai import errors, types

from cut_turns import RETRIES, TRANSPORT_ERRORS, resent_when_cut

S = types.Schema
T = types.Type
TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name="shell",
                description="Runs a bash command in the working directory; returns its output.",
                parameters=S(type=T.OBJECT, properties={"command": S(type=T.STRING)},
                             required=["command"]),
            ),
            types.FunctionDeclaration(
                name="echo",
                description="Returns its arguments.",
                parameters=S(type=T.OBJECT, properties={"text": S(type=T.STRING)}),
            ),
        ]
    )
]


def run(name: str, args: dict, workdir: str) -> str:
    if name == "shell":
        p = subprocess.run(
            ["bash", "-c", args["command"]], cwd=workdir, capture_output=True, text=True, timeout=60
        )
        return p.stdout + p.stderr
    if name == "echo":
        return json.dumps({"echo": args})
    return f"no tool {name}"


def header(resp, name):
    h = getattr(resp, "sdk_http_response", None)
    headers = getattr(h, "headers", None) or {}
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return None


def turn(client, model, contents, config) -> tuple[list, list, str]:
    """One streamed turn: its texts, its function calls, hale's turn id."""
    text, calls, turn_id = [], [], None
    for chunk in client.models.generate_content_stream(
        model=model, contents=contents, config=config
    ):
        turn_id = turn_id or header(chunk, "x-hale-turn-id")
        if chunk.function_calls:
            calls.extend(chunk.function_calls)
        elif chunk.text:
            text.append(chunk.text)
    return text, calls, turn_id


def main() -> None:
    model, root, workdir, prompt = sys.argv[1:5]
    # Keep the client in a variable while it is used: the SDK closes its
    # connection pool when the client is collected.
    client = genai.Client(
        api_key="unused",
        http_options=types.HttpOptions(
            base_url=root,
            api_version="v1beta",
            timeout=60_000,
            retry_options=types.HttpRetryOptions(attempts=RETRIES + 1),
        ),
    )
    config = types.GenerateContentConfig(
        system_instruction="You are an agent; use the tools, then report.",
        tools=TOOLS,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    contents = [types.Content(role="user", parts=[types.Part(text=prompt)])]
    made, ids = [], []
    for n in range(1, 41):
        try:
            text, calls, turn_id = resent_when_cut(
                lambda: turn(client, model, contents, config), TRANSPORT_ERRORS
            )
        except errors.APIError as e:
            failed = None
            resp = getattr(e, "response", None)
            if resp is not None and getattr(resp, "headers", None) is not None:
                failed = resp.headers.get("x-hale-turn-id")
            print(json.dumps({"error": f"{type(e).__name__}: {e}", "calls": made, "turns": n,
                              "turn_ids": ids, "failed_turn_id": failed}))
            sys.exit(2)
        ids.append(turn_id)
        if not calls:
            print(json.dumps({"final": "".join(text), "calls": made, "turns": n,
                              "turn_ids": ids}))
            return
        contents.append(
            types.Content(role="model", parts=[types.Part(function_call=c) for c in calls])
        )
        parts = []
        for c in calls:
            args = dict(c.args or {})
            out = run(c.name, args, workdir)
            made.append(c.name)
            parts.append(types.Part.from_function_response(name=c.name, response={"output": out}))
        contents.append(types.Content(role="user", parts=parts))
    sys.exit("no final answer in 40 turns")


if __name__ == "__main__":
    main()
