"""Added latency of ``execute_mcp_tool`` through the local gateway, against calling the upstream directly.

Both sides use the same real MCP client and a warm session; the gateway side also pays its HTTP
edge, the per-request catalog version check (a GetItem on the emulator) and the upstream hop.
"""

from __future__ import annotations

import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from satellite.local.processes import free_port
from satellite.local.stack import LocalStack
from tests.support.upstreams import EVERYTHING_ENTRY

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

CALLS = 300
WARMUP = 20


async def _timed(call: Callable[[], Awaitable[object]]) -> list[float]:
    for _ in range(WARMUP):
        await call()
    samples = []
    for _ in range(CALLS):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _measure(upstream_url: str, gateway_url: str, token: str) -> tuple[list[float], list[float]]:
    async with Client(upstream_url, mode="legacy") as direct:
        direct_samples = await _timed(lambda: direct.call_tool("echo", {"message": "hi"}))
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(gateway_url, http_client=http), mode="legacy") as gateway,  # type: ignore[arg-type]
    ):
        arguments = {"tool_path": "everything:echo", "arguments": {"message": "hi"}}
        gateway_samples = await _timed(lambda: gateway.call_tool("execute_mcp_tool", arguments))
    return direct_samples, gateway_samples


def _p(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1]


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
        with LocalStack(path, token=secrets.token_urlsafe(16)) as stack, stack.serve() as gateway_url:
            direct, gateway = anyio.run(_measure, upstream_url, gateway_url, stack.token)
    added50 = statistics.median(gateway) - statistics.median(direct)
    added95 = _p(gateway, 95) - _p(direct, 95)
    return [
        ("execute: direct upstream call p50 / p95", f"{statistics.median(direct):.2f} / {_p(direct, 95):.2f} ms", "-"),
        ("execute: through the gateway p50 / p95", f"{statistics.median(gateway):.2f} / {_p(gateway, 95):.2f} ms", "-"),
        ("execute: added latency p50 / p95", f"{added50:.2f} / {added95:.2f} ms", "p50 <= 2 ms"),
    ]
