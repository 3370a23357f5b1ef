"""An agent loop on the `openai` SDK's Chat Completions, with function tools.

Usage: task_loop.py MODEL BASE_URL WORKDIR PROMPT

Streams each model turn (the SDK's own retries off: the healing is
hale's), runs the tool calls it asks for — `shell` (bash -c in WORKDIR) and
`echo` (its arguments back as JSON) — and sends their outputs back as tool
messages, until a turn answers without a tool call (at most 40 turns).
Prints one JSON object: the final text, the calls made, the turns, and
hale's turn id of each answer (`x-hale-turn-id`). A turn the SDK raises on
(hale failed it to the client) prints `{"error": …}` (with hale's id of
the failed turn, `failed_turn_id`, when its answer carried one) and exits 2.
"""

import json
import subprocess
import sys

import openai

from cut_turns import RETRIES, TRANSPORT_ERRORS, resent_when_cut

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Runs a bash command in the working directory; returns its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Returns its arguments.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    },
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


def turn(client: openai.OpenAI, model: str, messages: list) -> tuple[str, list, str]:
    """One streamed turn: its text, its tool calls (id, name, arguments), hale's turn id."""
    text, calls = [], {}
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=messages, tools=TOOLS, stream=True
    )
    turn_id = raw.headers.get("x-hale-turn-id")
    stream = raw.parse()
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.content:
            text.append(delta.content)
        for tc in delta.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            if tc.id:
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
    return "".join(text), [calls[i] for i in sorted(calls)], turn_id


def main() -> None:
    model, base_url, workdir, prompt = sys.argv[1:5]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=RETRIES, timeout=60)
    messages = [
        {"role": "system", "content": "You are an agent; summarize your work when done."},
        {"role": "user", "content": prompt},
    ]
    made, ids = [], []
    for n in range(1, 41):
        try:
            text, calls, turn_id = resent_when_cut(
                lambda: turn(client, model, messages), (openai.APIConnectionError, *TRANSPORT_ERRORS)
            )
        except openai.APIError as e:
            resp = getattr(e, "response", None)
            failed = resp.headers.get("x-hale-turn-id") if resp is not None else None
            print(json.dumps({"error": f"{type(e).__name__}: {e}", "calls": made, "turns": n,
                              "turn_ids": ids, "failed_turn_id": failed}))
            sys.exit(2)
        ids.append(turn_id)
        if not calls:
            print(json.dumps({"final": text, "calls": made, "turns": n, "turn_ids": ids}))
            return
        messages.append(
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls
                ],
            }
        )
        for c in calls:
            try:
                args = json.loads(c["arguments"])
            except json.JSONDecodeError as e:
                print(json.dumps({"error": f"garbled arguments {c['arguments']!r}: {e}",
                                  "calls": made, "turns": n, "turn_ids": ids}))
                sys.exit(2)
            out = run(c["name"], args, workdir)
            made.append(c["name"])
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
    sys.exit("no final answer in 40 turns")


if __name__ == "__main__":
    main()
