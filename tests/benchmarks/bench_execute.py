"""Added latency of ``execute_mcp_tool`` through the local gateway, against calling the upstream directly.

Both sides use the same real MCP client and a warm session; the gateway side also pays its HTTP
edge, the per-request catalog version check (a GetItem on the emulator) and the upstream hop.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import tempfile
from pathlib import Path

import anyio
from mcp import Client

from satellite.local.processes import free_port
from satellite.local.stack import LocalStack
from tests.benchmarks.timing import execute_through_gateway, p50_p95, percentile, timed
from tests.support.upstreams import EVERYTHING_ENTRY

CALLS = 300
WARMUP = 20


async def _direct(upstream_url: str) -> list[float]:
    async with Client(upstream_url, mode="legacy") as direct:
        return await timed(lambda: direct.call_tool("echo", {"message": "hi"}))


def run() -> list[tuple[str, str, str]]:
    port = free_port()
    upstream_url = f"http://127.0.0.1:{port}/mcp"
    config = {
        "team": "bench",
        "mcpServers": {
            "everything": {
                "url": upstream_url,
                "start": {
                    "command": "node",
                    "args": [str(EVERYTHING_ENTRY), "streamableHttp"],
                    "env": {"PORT": str(port)},
                },
            }
        },
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "servers.json"
        path.write_text(json.dumps(config))
        with LocalStack(path, token=secrets.token_urlsafe(16), background=False) as stack:
            direct = anyio.run(_direct, upstream_url)
            with stack.serve() as gateway_url:
                every = anyio.run(execute_through_gateway, gateway_url, stack.token, "everything:echo")
            interval = dataclasses.replace(stack.settings, catalog_check_interval_seconds=1.0)
            with stack.serve(settings=interval) as gateway_url:
                paced = anyio.run(execute_through_gateway, gateway_url, stack.token, "everything:echo")
    rows = [("execute: direct upstream call p50 / p95", p50_p95(direct), "-")]
    for label, samples in (("version check every call", every), ("check interval 1 s", paced)):
        rows.append((f"execute via gateway, {label}: p50 / p95", p50_p95(samples), "-"))
        added = f"{percentile(samples, 50) - percentile(direct, 50):.2f} ms"
        rows.append((f"execute added latency p50, {label}", added, "<= 2 ms"))
    return rows
