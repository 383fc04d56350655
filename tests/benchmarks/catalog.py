"""The benchmark catalog: real tool definitions from ``../shared/bench``, loaded into the router's shapes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from satellite.catalog import CachedTool, DiscoveredCatalog
from satellite.installation import Installation, Transport
from satellite.router import Router
from tests.unit.fakes import MemoryStore, RecordingUpstream

BENCH = Path(__file__).resolve().parents[3] / "shared" / "bench"
NOW = datetime(2026, 11, 22, tzinfo=UTC)


def bench_tools() -> list[dict[str, Any]]:
    """Every tool line of ``tools.jsonl``."""
    return [json.loads(line) for line in (BENCH / "tools.jsonl").read_text().splitlines() if line.strip()]


def bench_router(team: str = "bench") -> Router:
    """A router over the whole bench catalog, one installation per server, served from memory."""
    store = MemoryStore()
    by_server: dict[str, list[dict[str, Any]]] = {}
    for tool in bench_tools():
        by_server.setdefault(tool["server"], []).append(tool)
    for server, tools in by_server.items():
        installation = Installation(
            installation_id=server,
            team_id=team,
            slug=server,
            transport=Transport.STREAMABLE_HTTP,
            url=f"http://127.0.0.1:9/{server}",
        )
        store.add_installation(installation)
        cached = tuple(
            CachedTool({k: v for k, v in t.items() if k != "server"}, NOW, Transport.STREAMABLE_HTTP) for t in tools
        )
        store.replace_catalog(
            team,
            server,
            DiscoveredCatalog(installation.config_hash, Transport.STREAMABLE_HTTP, NOW, "bench", tools=cached),
        )
    return Router(store, {Transport.STREAMABLE_HTTP: RecordingUpstream()})
