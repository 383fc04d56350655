"""Added latency of ``execute_mcp_tool`` through the local gateway, against calling the upstream directly.

Both sides use the same real MCP client and a warm session; the gateway side also pays its HTTP
edge, the per-request catalog version check (a GetItem on the emulator) and the upstream hop.
"""

from __future__ import annotations

import dataclasses
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


async def _direct(upstream_url: str) -> list[float]:
    async with Client(upstream_url, mode="legacy") as direct:
        return await _timed(lambda: direct.call_tool("echo", {"message": "hi"}))


async def _through(gateway_url: str, token: str) -> list[float]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(gateway_url, http_client=http), mode="legacy") as gateway,  # type: ignore[arg-type]
    ):
        arguments = {"tool_path": "everything:echo", "arguments": {"message": "hi"}}
        return await _timed(lambda: gateway.call_tool("execute_mcp_tool", arguments))


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
        with LocalStack(path, token=secrets.token_urlsafe(16)) as stack:
            direct = anyio.run(_direct, upstream_url)
            with stack.serve() as gateway_url:
                every = anyio.run(_through, gateway_url, stack.token)
            interval = dataclasses.replace(stack.settings, catalog_check_interval_seconds=1.0)
            with stack.serve(settings=interval) as gateway_url:
                paced = anyio.run(_through, gateway_url, stack.token)
    rows = [("execute: direct upstream call p50 / p95", _pair(direct), "-")]
    for label, samples in (("version check every call", every), ("check interval 1 s", paced)):
        rows.append((f"execute via gateway, {label}: p50 / p95", _pair(samples), "-"))
        added = f"{statistics.median(samples) - statistics.median(direct):.2f} ms"
        rows.append((f"execute added latency p50, {label}", added, "<= 2 ms"))
    return rows


def _pair(samples: list[float]) -> str:
    return f"{statistics.median(samples):.2f} / {_p(samples, 95):.2f} ms"
