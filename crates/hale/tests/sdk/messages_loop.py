"""An agent loop on the official `anthropic` SDK's Messages API, with tools.

Usage: messages_loop.py MODEL BASE_URL WORKDIR PROMPT

BASE_URL is hale's root (the SDK adds `/v1/messages`). Streams each model
turn (the SDK's own retries off, `max_retries=0`: the healing is hale's),
runs the `tool_use` blocks it asks for — `shell` (bash -c in WORKDIR) and
`echo` (its input back as JSON) — and sends their outputs back as
`tool_result` blocks, until a turn answers without a tool call (at most 40
turns). Prints the same JSON object as task_loop.py: the final text, the
calls made, the turns, hale's turn id of each answer (`x-hale-turn-id`),
and on an error the failed turn's id (`failed_turn_id`), exit 2.
"""

import json
import subprocess
import sys

import anthropic

from cut_turns import RETRIES, TRANSPORT_ERRORS, resent_when_cut

TOOLS = [
    {
        "name": "shell",
        "description": "Runs a bash command in the working directory; returns its output.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
    {
        "name": "echo",
        "description": "Returns its arguments.",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
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


def turn(client, model: str, messages: list):
    """One streamed turn: its content blocks (text and tool_use) and hale's turn id."""
    raw = client.messages.with_raw_response.create(
        model=model,
        max_tokens=4096,
        system="You are an agent; use the tools, then report.",
        messages=messages,
        tools=TOOLS,
        stream=True,
    )
    turn_id = raw.headers.get("x-hale-turn-id")
    blocks = {}
    for ev in raw.parse():
        if ev.type == "content_block_start":
            b = ev.content_block
            if b.type == "tool_use":
                blocks[ev.index] = {"type": "tool_use", "id": b.id, "name": b.name, "json": ""}
            elif b.type == "text":
                blocks[ev.index] = {"type": "text", "text": b.text or ""}
        elif ev.type == "content_block_delta":
            b = blocks.get(ev.index)
            d = ev.delta
            if b is None:
                continue
            if d.type == "text_delta":
                b["text"] += d.text
            elif d.type == "input_json_delta":
                b["json"] += d.partial_json
    return [blocks[i] for i in sorted(blocks)], turn_id


def main() -> None:
    model, base_url, workdir, prompt = sys.argv[1:5]
    client = anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=RETRIES, timeout=60)
    messages = [{"role": "user", "content": prompt}]
    made, ids = [], []
    for n in range(1, 41):
        try:
            blocks, turn_id = resent_when_cut(
                lambda: turn(client, model, messages), (anthropic.APIConnectionError, *TRANSPORT_ERRORS)
            )
        except anthropic.APIError as e:
            resp = getattr(e, "response", None)
            failed = resp.headers.get("x-hale-turn-id") if resp is not None else None
            print(json.dumps({"error": f"{type(e).__name__}: {e}", "calls": made, "turns": n,
                              "turn_ids": ids, "failed_turn_id": failed}))
            sys.exit(2)
        ids.append(turn_id)
        calls = [b for b in blocks if b["type"] == "tool_use"]
        text = "".join(b["text"] for b in blocks if b["type"] == "text")
        if not calls:
            print(json.dumps({"final": text, "calls": made, "turns": n, "turn_ids": ids}))
            return
        content, results = [], []
        if text:
            content.append({"type": "text", "text": text})
        for c in calls:
            try:
                args = json.loads(c["json"] or "{}")
            except json.JSONDecodeError as e:
                print(json.dumps({"error": f"garbled arguments {c['json']!r}: {e}",
                                  "calls": made, "turns": n, "turn_ids": ids}))
                sys.exit(2)
            content.append({"type": "tool_use", "id": c["id"], "name": c["name"], "input": args})
            out = run(c["name"], args, workdir)
            made.append(c["name"])
            results.append({"type": "tool_result", "tool_use_id": c["id"], "content": out})
        messages.append({"role": "assistant", "content": content})
        messages.append({"role": "user", "content": results})
    sys.exit("no final answer in 40 turns")


if __name__ == "__main__":
    main()
