"""The official MCP Python SDK (`mcp` on PyPI) as a client of hale's /mcp.

Usage: mcp_front.py URL. Lists the tools, calls `unit_convert` and a bad
`unit_convert`, and prints one JSON object with what it saw, for the Rust test
to check.
"""

import asyncio
import json
import sys

from mcp import Client


async def main(url: str) -> None:
    async with Client(url) as client:
        listed = await client.list_tools()
        ok = await client.call_tool("unit_convert", {"value": 100, "from": "cm", "to": "m"})
        bad = await client.call_tool("unit_convert", {"value": 1, "from": "cm", "to": "parsec"})
        print(json.dumps({
            "tools": sorted(t.name for t in listed.tools),
            "ok": {
                "is_error": ok.is_error,
                "structured": ok.structured_content,
                "meta": ok.meta,
            },
            "bad": {"is_error": bad.is_error, "text": [c.text for c in bad.content if c.type == "text"]},
        }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
