"""The official `openai` Python SDK against a running hale.

Usage: openai_client.py BASE_URL MODEL EXPECTED_WORDS

Makes one non-streaming and one streaming chat completion through hale,
asserts that each answer is the complete chaos text ("w0 w1 ... w{N-1}"),
and prints one JSON object with what it saw for the Rust test to check.
"""

import json
import sys

import openai


def main() -> None:
    base_url, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    expected = " ".join(f"w{i}" for i in range(n))
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)

    # Non-streaming, with the raw response for hale's evidence headers.
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "Tell me something useful."}],
    )
    completion = raw.parse()
    text = completion.choices[0].message.content
    assert text == expected, f"non-stream text: {text!r}"
    nonstream = {
        "text": text,
        "model": completion.model,
        "finish_reason": completion.choices[0].finish_reason,
        "usage": completion.usage.model_dump() if completion.usage else None,
        "provider": raw.headers.get("x-hale-provider"),
        "attempts": raw.headers.get("x-hale-attempts"),
    }

    # Streaming, with usage.
    chunks = []
    finish = None
    usage = None
    models = set()
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Tell me something useful."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        models.add(chunk.model)
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta and choice.delta.content:
                chunks.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    streamed = "".join(chunks)
    assert streamed == expected, f"stream text: {streamed!r}"
    assert finish is not None, "the stream had no finish_reason"

    print(
        json.dumps(
            {
                "sdk_version": openai.__version__,
                "nonstream": nonstream,
                "stream": {
                    "text": streamed,
                    "chunks": len(chunks),
                    "finish_reason": finish,
                    "usage": usage,
                    "models": sorted(models),
                },
            }
        )
    )


if __name__ == "__main__":
    main()
