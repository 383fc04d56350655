"""Shared measuring helpers of the benchmarks: timed calls, percentiles, and a client through the gateway."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

CALLS = 300
WARMUP = 20


async def timed(call: Callable[[], Awaitable[object]], calls: int = CALLS) -> list[float]:
    """Milliseconds of ``calls`` sequential calls, after ``WARMUP`` unmeasured ones."""
    for _ in range(WARMUP):
        await call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def percentile(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100)[q - 1]


def p50_p95(samples: list[float]) -> str:
    return f"{percentile(samples, 50):.2f} / {percentile(samples, 95):.2f} ms"


async def execute_through_gateway(gateway_url: str, token: str, tool_path: str, calls: int = CALLS) -> list[float]:
    """Timed ``execute_mcp_tool`` calls of ``tool_path`` (an echo tool) through the gateway, warm session."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(gateway_url, http_client=http), mode="legacy") as gateway,  # type: ignore[arg-type]
    ):
        arguments = {"tool_path": tool_path, "arguments": {"message": "hi"}}
        return await timed(lambda: gateway.call_tool("execute_mcp_tool", arguments), calls)
