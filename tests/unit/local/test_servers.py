from __future__ import annotations

from pathlib import Path

import pytest

from satellite.errors import InvalidInstallation
from satellite.installation import Transport
from satellite.local.servers import load_servers, parse_servers

EXAMPLE = Path(__file__).resolve().parents[3] / "infra" / "local" / "servers.json"


def test_the_example_config_parses_into_remote_servers_with_start_commands() -> None:
    team, servers = load_servers(EXAMPLE)
    by_slug = {s.installation.slug: s for s in servers}
    assert team == "dev"
    assert by_slug["everything"].installation.transport is Transport.STREAMABLE_HTTP
    assert by_slug["everything-sse"].installation.transport is Transport.SSE
    assert by_slug["basic-app"].start is not None
    assert all(s.start is not None and s.start.command == "node" for s in servers if s.installation.transport.is_remote)


def test_client_style_entries_and_stdio_entries_are_accepted() -> None:
    # Given the mcpServers JSON a client uses, with Claude Code's "type" and a stdio entry
    data = {
        "mcpServers": {
            "github-john-abc123": {"type": "http", "url": "https://api.example.com/mcp", "headers": {"A": "${T}"}},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
            "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        }
    }
    # When parsed
    team, servers = parse_servers(data)
    github, legacy, time = (s.installation for s in servers)
    # Then slugs are derived, transports mapped and placeholders kept
    assert team == "dev"
    assert (github.slug, github.transport, github.headers["A"]) == ("github", Transport.STREAMABLE_HTTP, "${T}")
    assert legacy.transport is Transport.SSE
    assert (time.transport, time.command, time.args, time.env) == (
        Transport.STDIO,
        "uvx",
        ("mcp-server-time",),
        {"TZ": "UTC"},
    )
    # And installation ids are stable across runs
    assert parse_servers(data)[1][0].installation.installation_id == github.installation_id


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"servers": {}}, "mcpServers"),
        ({"mcpServers": {"x": {"type": "websocket", "url": "http://a"}}}, "mcpServers.x.transport"),
        ({"mcpServers": {"x": {"url": "file:///etc/passwd"}}}, "mcpServers.x.url"),
        ({"mcpServers": {"x": {"type": "stdio"}}}, "mcpServers.x.command"),
        ({"mcpServers": {"x": {"url": "http://a", "slug": "Bad Slug"}}}, "mcpServers.x.slug"),
        ({"mcpServers": {"x": {"url": "http://a", "start": {"args": []}}}}, "mcpServers.x.start"),
    ],
)
def test_invalid_entries_name_the_entry_and_field(data: object, field: str) -> None:
    with pytest.raises(InvalidInstallation) as info:
        parse_servers(data)
    assert info.value.field == field
