"""Tokens (cl100k) a client pays: the four meta-tools, a typical discover response, and the whole catalog."""

from __future__ import annotations

import json

import anyio
import mcp_types as types

from satellite.config import Identity
from satellite.mcp_server import META_TOOLS
from satellite.tokens import count_tokens
from tests.benchmarks.catalog import bench_router, bench_tools

QUERIES = ("create a github issue", "read a file from disk", "search the web", "query a postgres database")


def run() -> list[tuple[str, str, str]]:
    listed = types.ListToolsResult(tools=list(META_TOOLS)).model_dump(by_alias=True, mode="json", exclude_none=True)
    meta_tokens = count_tokens(json.dumps(listed, separators=(",", ":")))
    whole = {"tools": [{k: v for k, v in t.items() if k != "server"} for t in bench_tools()]}
    whole_tokens = count_tokens(json.dumps(whole, separators=(",", ":")))
    router = bench_router()

    async def discover_tokens() -> list[int]:
        counts = []
        for query in QUERIES:
            response = await router.discover(Identity("bench"), query, 5)
            counts.append(count_tokens(json.dumps(response, separators=(",", ":"), ensure_ascii=False)))
        return counts

    discover = anyio.run(discover_tokens)
    typical = sorted(discover)[len(discover) // 2]
    return [
        ("tokens: tools/list (4 meta-tools)", str(meta_tokens), "<= 460"),
        ("tokens: 5-hit discover response (median of 4)", f"{typical} (max {max(discover)})", "<= 400"),
        (f"tokens: whole catalog exposed directly ({len(whole['tools'])} tools)", f"{whole_tokens:,}", "-"),
        ("tokens: reduction vs direct exposure", f"{100 * (1 - meta_tokens / whole_tokens):.2f} %", "-"),
    ]
