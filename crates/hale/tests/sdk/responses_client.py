"""The official `openai` Python SDK's Responses API against a running hale.

Usage: responses_client.py MODE BASE_URL MODEL

MODE is one of:
  basic   one non-streamed and one streamed `client.responses.create`, and a
          structured-output call (`text.format` json_schema)
  stream  one streamed `client.responses.create`
  tool    a function tool round trip: a `function_call`, then its
          `function_call_output` sent back
  chat    one non-streamed and one streamed Chat Completions call
  conversation
          MODEL is three models `m1,m2,m3`: a `previous_response_id`
          conversation of three turns (m1; m2 streamed, continuing the first;
          m3 continuing the second), then `responses.retrieve`,
          `input_items.list`, `delete`, a `store=False` response and an id
          hale never issued (both `openai.NotFoundError`)

Prints one JSON object with what it saw for the Rust test to check; the
checks of the stream's shape (one item per output, continuous sequence
numbers) are made here, on the SDK's parsed events.
"""

import json
import sys

import openai

QUESTION = "Tell me something useful."


def nonstream(client, model, **kw):
    raw = client.responses.with_raw_response.create(model=model, input=QUESTION, **kw)
    r = raw.parse()
    return {
        "id": r.id,
        "status": r.status,
        "text": r.output_text,
        "output_types": [item.type for item in r.output],
        "model": r.model,
        "usage": r.usage.model_dump() if r.usage else None,
        "provider": raw.headers.get("x-hale-provider"),
    }


def stream(client, model, **kw):
    raw = client.responses.with_raw_response.create(
        model=model, input=QUESTION, stream=True, **kw
    )
    events = list(raw.parse())
    seqs = [e.sequence_number for e in events]
    types = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    ends = [e for e in events if e.type in ("response.completed", "response.incomplete", "response.failed")]
    final = ends[-1].response if ends else None
    return {
        "provider": raw.headers.get("x-hale-provider"),
        "text": "".join(deltas),
        "deltas": len(deltas),
        "seqs_continuous": seqs == list(range(len(seqs))),
        "first": types[0] if types else None,
        "last": types[-1] if types else None,
        "items_added": types.count("response.output_item.added"),
        "items_done": types.count("response.output_item.done"),
        "errors": [t for t in types if t == "error"],
        "final_status": final.status if final else None,
        "final_output_types": [i.type for i in final.output] if final else None,
        "final_text": final.output_text if final else None,
        "final_usage": final.usage.model_dump() if final and final.usage else None,
    }


def structured(client, model):
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    r = client.responses.create(
        model=model,
        input=QUESTION,
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
        extra_body={"x_unknown_field": {"kept": True}},
    )
    return {"status": r.status, "text": r.output_text}


def tool(client, model):
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
            "strict": True,
        }
    ]
    first = client.responses.create(model=model, input=QUESTION, tools=tools)
    calls = [i for i in first.output if i.type == "function_call"]
    assert len(calls) == 1, f"one function_call expected: {first.output!r}"
    call = calls[0]
    second = client.responses.create(
        model=model,
        tools=tools,
        input=[
            {"role": "user", "content": QUESTION},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"},
        ],
    )
    return {
        "first_status": first.status,
        "call": {"name": call.name, "arguments": json.loads(call.arguments), "call_id": call.call_id},
        "second_status": second.status,
        "second_text": second.output_text,
        "second_output_types": [i.type for i in second.output],
    }


def chat(client, model):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": QUESTION}]
    )
    c = raw.parse()
    chunks = []
    finish = None
    for chunk in client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": QUESTION}], stream=True
    ):
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
            "completion_tokens": c.usage.completion_tokens if c.usage else None,
        },
        "stream": {"text": "".join(chunks), "chunks": len(chunks), "finish_reason": finish},
    }


def not_found(call):
    """The status and error body of a call expected to raise NotFoundError."""
    try:
        call()
    except openai.NotFoundError as e:
        return {"status": e.status_code, "body": e.body}
    return None


def conversation(client, models):
    m1, m2, m3 = models.split(",")
    raw1 = client.responses.with_raw_response.create(model=m1, input="First question.")
    r1 = raw1.parse()
    raw2 = client.responses.with_raw_response.create(
        model=m2, input="Second question.", previous_response_id=r1.id, stream=True
    )
    events = list(raw2.parse())
    ends = [e for e in events if e.type == "response.completed"]
    r2 = ends[-1].response
    raw3 = client.responses.with_raw_response.create(
        model=m3,
        input=[
            {"role": "user", "content": "Third question."},
            {"role": "user", "content": "And one more."},
        ],
        previous_response_id=r2.id,
    )
    r3 = raw3.parse()
    got = client.responses.retrieve(r2.id)
    items = client.responses.input_items.list(r3.id, order="asc")
    first_page = client.responses.input_items.list(r3.id, limit=1)
    unkept = client.responses.create(model=m1, input="Not kept.", store=False)
    deleted = client.responses.with_raw_response.delete(r1.id)
    return {
        "ids": [r1.id, r2.id, r3.id],
        "texts": [r1.output_text, r2.output_text, r3.output_text],
        "providers": [
            raw1.headers.get("x-hale-provider"),
            raw2.headers.get("x-hale-provider"),
            raw3.headers.get("x-hale-provider"),
        ],
        "turns": [
            raw1.headers.get("x-hale-turn-id"),
            raw2.headers.get("x-hale-turn-id"),
            raw3.headers.get("x-hale-turn-id"),
        ],
        "retrieved": {"id": got.id, "text": got.output_text, "status": got.status},
        "input_items": [
            {"id": i.id, "type": i.type, "role": getattr(i, "role", None)} for i in items.data
        ],
        "first_page": {
            "n": len(first_page.data),
            "has_more": first_page.has_more,
            "first_id": getattr(first_page, "first_id", None),
        },
        "deleted": deleted.http_response.json(),
        "after_delete": not_found(lambda: client.responses.retrieve(r1.id)),
        "unkept": not_found(lambda: client.responses.retrieve(unkept.id)),
        "unknown_previous": not_found(
            lambda: client.responses.create(
                model=m1, input="x", previous_response_id="resp_never_issued_by_anyone"
            )
        ),
    }


def main() -> None:
    mode, base_url, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
    if mode == "basic":
        out = {
            "nonstream": nonstream(client, model),
            "stream": stream(client, model),
            "structured": structured(client, model),
        }
    elif mode == "stream":
        out = {"stream": stream(client, model)}
    elif mode == "tool":
        out = tool(client, model)
    elif mode == "chat":
        out = chat(client, model)
    elif mode == "conversation":
        out = conversation(client, model)
    else:
        raise SystemExit(f"unknown mode {mode}")
    out["sdk_version"] = openai.__version__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
