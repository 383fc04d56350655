"""stdio through the queues: added latency, first spawn against respawn, and one worker's throughput.

* **Added latency.** ``execute_mcp_tool`` on server-everything's ``echo`` over stdio through the local gateway
  (HTTP edge, catalog check, worker request queue, worker, reply queue), against the same call from a direct
  stdio client with a warm session. The queue round trip alone (the bridge, without the gateway's HTTP edge) is
  reported too.
* **Spawn.** From adding an installation (``POST /api/installations``) to its tools being online in the catalog
  (spawn, handshake, discovery), against the first call after the worker stopped the idle server (respawn, no
  ``tools/list``) and a warm call.
* **Throughput.** Calls per second one worker completes against one server with 16 callers in flight (through
  the bridge, so the gateway's HTTP edge is not the bottleneck).
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx
from mcp import Client, StdioServerParameters

from satellite.aws.stdio_bridge import SqsStdioBridge
from satellite.local.stack import LocalStack
from tests.benchmarks.timing import execute_through_gateway, percentile, timed
from tests.support.upstreams import EVERYTHING_ENTRY
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from satellite.catalog import InstallationCatalog

CALLS = 200
SPAWNS = 3
IDLE_SECONDS = 2
THROUGHPUT_SECONDS = 3.0
CALLERS = 16


async def _direct() -> list[float]:
    server = StdioServerParameters(command="node", args=[str(EVERYTHING_ENTRY), "stdio"])
    async with Client(server, mode="legacy") as direct:
        return await timed(lambda: direct.call_tool("echo", {"message": "hi"}), CALLS)


async def _through_bridge(bridge: SqsStdioBridge, entry: InstallationCatalog) -> list[float]:
    return await timed(lambda: bridge.call_tool(entry.installation, "echo", {"message": "hi"}), CALLS)


async def _throughput(bridge: SqsStdioBridge, entry: InstallationCatalog) -> float:
    done = 0
    stop_at = anyio.current_time() + THROUGHPUT_SECONDS

    async def caller() -> None:
        nonlocal done
        while anyio.current_time() < stop_at:
            await bridge.call_tool(entry.installation, "echo", {"message": "hi"})
            done += 1

    started = anyio.current_time()
    async with anyio.create_task_group() as group:
        for _ in range(CALLERS):
            group.start_soon(caller)
    return done / (anyio.current_time() - started)


def _first_spawns(api: httpx.Client) -> list[float]:
    samples = []
    for index in range(SPAWNS):
        body = {"name": f"spawn-{index}", "transport": "stdio", "command": "node"}
        body["args"] = [str(EVERYTHING_ENTRY), "stdio"]
        started = time.perf_counter()
        url = f"/api/installations/{api.post('/api/installations', json=body).json()['installation_id']}"
        eventually(
            lambda url=url: api.get(url).json()["status"]["status"] == "online",  # type: ignore[misc]
            "the new installation is online",
            timeout=30,
        )
        samples.append((time.perf_counter() - started) * 1000)
        api.delete(url)
    return samples


def _respawns(api: httpx.Client, stack: LocalStack, bridge: SqsStdioBridge) -> tuple[list[float], list[float]]:
    entry = next(e for e in stack.stdio if e.slug == "everything-stdio")
    respawns, warm = [], []
    for _ in range(SPAWNS):
        eventually(
            lambda: (
                api.get(f"/api/installations/{entry.installation.installation_id}").json()["status"]["status"]
                == "dormant"
            ),
            "the idle server is stopped",
            timeout=IDLE_SECONDS * 10,
        )
        for samples in (respawns, warm):
            started = time.perf_counter()
            anyio.run(bridge.call_tool, entry.installation, "echo", {"message": "hi"})
            samples.append((time.perf_counter() - started) * 1000)
    return respawns, warm


def run() -> list[tuple[str, str, str]]:
    config = {
        "team": "bench-stdio",
        "mcpServers": {"everything-stdio": {"command": "node", "args": [str(EVERYTHING_ENTRY), "stdio"]}},
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "servers.json"
        path.write_text(json.dumps(config))
        environ = {**os.environ, "SATELLITE_IDLE_TIMEOUT_SECONDS": str(IDLE_SECONDS)}
        with LocalStack(path, token=secrets.token_urlsafe(16), environ=environ, worker=True) as stack:
            entry = next(e for e in stack.stdio if e.slug == "everything-stdio")
            bridge = SqsStdioBridge.from_settings(stack.settings, client=stack.client("sqs"))
            with stack.serve() as url, httpx.Client(base_url=url.removesuffix("/mcp"), timeout=30) as api:
                api.headers["Authorization"] = f"Bearer {stack.token}"
                # Latency first, while the idle timeout cannot stop the server between calls.
                direct = anyio.run(_direct)
                through = anyio.run(execute_through_gateway, url, stack.token, "everything-stdio:echo", CALLS)
                queues = anyio.run(_through_bridge, bridge, entry)
                rate = anyio.run(_throughput, bridge, entry)
                spawns = _first_spawns(api)
                respawns, warm = _respawns(api, stack, bridge)
    added = percentile(through, 50) - percentile(direct, 50)
    return [
        ("stdio direct client call p50 / p95", f"{percentile(direct, 50):.2f} / {percentile(direct, 95):.2f} ms", "-"),
        (
            "stdio call through gateway p50 / p95",
            f"{percentile(through, 50):.2f} / {percentile(through, 95):.2f} ms",
            "-",
        ),
        (
            "stdio added latency p50 / p95",
            f"{added:.2f} / {percentile(through, 95) - percentile(direct, 95):.2f} ms",
            "p50 <= 15 ms",
        ),
        (
            "stdio queue round trip (bridge) p50 / p95",
            f"{percentile(queues, 50):.2f} / {percentile(queues, 95):.2f} ms",
            "-",
        ),
        ("stdio first spawn + discovery (median)", f"{statistics.median(spawns):.0f} ms", "-"),
        ("stdio respawn after idle, first call (median)", f"{statistics.median(respawns):.0f} ms", "-"),
        ("stdio warm call after respawn (median)", f"{statistics.median(warm):.1f} ms", "-"),
        (f"stdio calls/s, one worker, one server, {CALLERS} callers", f"{rate:.0f}", "-"),
    ]
